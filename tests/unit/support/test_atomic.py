"""envkit/atomic.py: several trees and files replaced all or nothing, on a real filesystem; failures injected
where a filesystem would fail (a full disk, a refused rename)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from envkit.support.atomic import replace_all
from envkit.errors import EnvkitError


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root``, hidden ones included: a file's bytes, a link's target, a directory as "dir"."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        out[key] = f"-> {os.readlink(p)}" if p.is_symlink() else ("dir" if p.is_dir() else p.read_bytes())
    return out


@pytest.fixture
def old(tmp_path):
    """Two trees and two files as an earlier run left them."""
    for name in ("a", "b"):
        (tmp_path / "trees" / name).mkdir(parents=True)
        (tmp_path / "trees" / name / "Dockerfile").write_text(f"old {name}\n")
        (tmp_path / f"{name}.yaml").write_text(f"old {name}\n")
    return tmp_path


def new_content(root: Path):
    return ({root / "trees" / n: {"Dockerfile": f"new {n}\n".encode()} for n in ("a", "b")},
            {root / f"{n}.yaml": f"new {n}\n".encode() for n in ("a", "b")})


def test_everything_is_replaced_and_nothing_hidden_is_left(old):
    replace_all(*new_content(old))
    assert snapshot(old) == {"a.yaml": b"new a\n", "b.yaml": b"new b\n", "trees": "dir", "trees/a": "dir",
                             "trees/a/Dockerfile": b"new a\n", "trees/b": "dir", "trees/b/Dockerfile": b"new b\n"}


def test_a_refused_rename_of_the_last_file_puts_back_every_tree_and_file(old, monkeypatch):
    before = snapshot(old)
    replace = os.replace

    def refused(src, dst, *a, **k):
        if str(dst).endswith("b.yaml"):
            raise OSError(errno.EIO, "Input/output error", str(dst))
        return replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(OSError) as err:
        replace_all(*new_content(old))
    assert err.value.errno == errno.EIO and err.value.filename == str(old / "b.yaml")  # the target, not its stage
    assert snapshot(old) == before  # a.yaml, replaced before b.yaml failed, is the old file again


def test_a_file_that_did_not_exist_is_removed_again(old, monkeypatch):
    (old / "a.yaml").unlink()
    before = snapshot(old)
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda s, d, *a, **k: (_ for _ in ()).throw(OSError(errno.EIO, "EIO", str(d)))
                        if str(d).endswith("b.yaml") else replace(s, d, *a, **k))
    with pytest.raises(OSError):
        replace_all(*new_content(old))
    assert snapshot(old) == before and not (old / "a.yaml").exists()


def test_leftovers_of_a_killed_run_with_this_pid_are_not_in_the_way(old):
    """A name made from the pid collides in a container, whose pid is the same every run."""
    pid = os.getpid()
    (old / "trees" / f".a.old{pid}").mkdir()
    (old / "trees" / f".a.old{pid}" / "Dockerfile").write_text("left\n")
    (old / "trees" / f".a.failed{pid}").write_text("left\n")
    replace_all(*new_content(old))
    assert (old / "trees" / "a" / "Dockerfile").read_text() == "new a\n"


def test_a_symlink_where_a_tree_goes_is_replaced_and_what_it_pointed_at_is_untouched(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine\n")
    (tmp_path / "trees").mkdir()
    (tmp_path / "trees" / "a").symlink_to(elsewhere)
    replace_all({tmp_path / "trees" / "a": {"Dockerfile": b"new\n"}}, {})
    assert not (tmp_path / "trees" / "a").is_symlink() and (tmp_path / "trees" / "a" / "Dockerfile").read_bytes() == b"new\n"
    assert (elsewhere / "keep.txt").read_text() == "mine\n" and os.listdir(tmp_path / "trees") == ["a"]


def test_when_putting_back_fails_too_the_error_says_where_the_old_tree_is(old, monkeypatch):
    replace = os.replace
    monkeypatch.setattr(os, "replace", lambda s, d, *a, **k: (_ for _ in ()).throw(OSError(errno.EIO, "EIO", str(d)))
                        if str(d).endswith("b.yaml") else replace(s, d, *a, **k))
    rename = Path.rename

    def no_way_back(self, target):
        if self.name == "was":
            raise OSError(errno.EIO, "Input/output error", str(self))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", no_way_back)
    with pytest.raises(EnvkitError) as err:
        replace_all(*new_content(old))
    message = err.value.message
    assert message.startswith("replacing 4 file(s) and tree(s) failed (")
    assert f"{old / 'trees' / 'a'} (Input/output error; the old one is {old / 'trees'}/.a.old." in message
    kept = next((old / "trees").glob(".a.old.*")) / "was" / "Dockerfile"
    assert kept.read_text() == "old a\n"  # kept for the user, not removed with the rest
    assert err.value.hint == "move the old ones back by hand, then run the command again"


def test_another_users_file_in_a_sticky_directory_is_refused_before_anything(tmp_path, monkeypatch):
    """The probe file can be made there, but the rename over someone else's file cannot."""
    from envkit.support.atomic import check_writable

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    theirs = shared / "team.yaml"
    theirs.write_text("x\n")
    os.chown(theirs, 2000, 2000)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(PermissionError) as err:
        check_writable(theirs)
    assert err.value.filename == str(theirs) and "another user's file in a sticky directory" in err.value.strerror
    os.chown(theirs, 1000, 1000)  # one's own file there is fine
    check_writable(theirs)
    os.chmod(shared, 0o777)  # and anyone's, without the sticky bit
    os.chown(theirs, 2000, 2000)
    check_writable(theirs)



def _replace_many(root: str, tag: str, times: int, start, report) -> None:
    """Child process: once both have started, replace the same targets ``times`` times with content marked
    ``tag``; report the errors met."""
    errors = []
    start.wait(timeout=60)
    for i in range(times):
        mark = f"{tag}{i}".encode()
        try:
            replace_all({Path(root) / "trees" / n: {"Dockerfile": mark, f"{n}.txt": mark} for n in ("a", "b")},
                        {Path(root) / f"{n}.yaml": mark for n in ("a", "b")})
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            errors.append(repr(exc))
    report.put(errors)


def test_two_runs_replacing_the_same_targets_take_turns(old):
    """Two renders of one spec at once (a nightly and a person): each replaces every target as a whole, one after
    the other, with no error and nothing half of one and half of the other; nothing hidden is left. (Without the
    lock, 100 rounds each met "Directory not empty" and "No such file" several times.)"""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    start, report = ctx.Barrier(2), ctx.Queue()
    children = [ctx.Process(target=_replace_many, args=(str(old), tag, 100, start, report)) for tag in ("x", "y")]
    for child in children:
        child.start()
    errors = [e for _ in children for e in report.get(timeout=120)]
    for child in children:
        child.join(timeout=30)
    assert errors == []
    after = snapshot(old)
    marks = {v for v in after.values() if v != "dir"}
    assert len(marks) == 1 and marks.pop() in (b"x99", b"y99"), after  # the last run's content, all of it
    assert sorted(after) == ["a.yaml", "b.yaml", "trees", "trees/a", "trees/a/Dockerfile", "trees/a/a.txt",
                             "trees/b", "trees/b/Dockerfile", "trees/b/b.txt"]


def test_a_holder_that_does_not_finish_is_named_after_the_wait(old):
    import fcntl

    from envkit.support.atomic import directories_locked

    fd = os.open(old / "trees", os.O_RDONLY | os.O_DIRECTORY)  # another open file: flock sees another holder
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = snapshot(old)
        with pytest.raises(EnvkitError, match=rf"another process has been writing to {old / 'trees'} for over 0 s"):
            with directories_locked([old, old / "trees"], wait=0.1):
                pytest.fail("the lock was taken twice")
        assert snapshot(old) == before
    finally:
        os.close(fd)
    with directories_locked([old / "trees"], wait=0.1):  # released with the descriptor
        pass


def test_a_refusal_while_staging_names_the_target_not_the_private_names_beside_it(old, monkeypatch):
    import tempfile

    before = snapshot(old)

    def refused(*a, dir=None, prefix="", **k):
        raise OSError(errno.EROFS, "Read-only file system", f"{dir}/{prefix}x1y2z3")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    with pytest.raises(OSError) as err:
        replace_all(*new_content(old))
    assert err.value.errno == errno.EROFS and err.value.filename == str(old / "trees" / "a")
    assert snapshot(old) == before


def test_the_lock_is_re_entrant_in_one_process_and_not_shared_with_a_forked_child(old):
    """A catalog exclude holds its directory and replace_all asks again: no wait on itself; another process (a
    fork, which copies the count) still takes its turn."""
    import multiprocessing

    from envkit.support.atomic import directories_locked

    with directories_locked([old], wait=0.1):
        with directories_locked([old / "."], wait=0.1):  # the same directory, spelt otherwise
            replace_all(*new_content(old))
        ctx = multiprocessing.get_context("fork")
        report = ctx.Queue()

        def child():
            try:
                with directories_locked([old], wait=0.2):
                    report.put("took it")
            except EnvkitError as exc:
                report.put(exc.message)

        proc = ctx.Process(target=child)
        proc.start()
        assert "another process has been writing to" in report.get(timeout=30)
        proc.join(timeout=30)
    with directories_locked([old], wait=0.1):  # released when the outer one ended
        pass
