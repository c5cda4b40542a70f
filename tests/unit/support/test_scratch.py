"""Scratch directories (envkit/scratch.py): named for the host and process that made them, removed never
through a mount, and found again when their maker was killed. Real directories, processes and (as root)
mounts; no engine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.support import scratch
from envkit.errors import EngineError

HOST = socket.gethostname()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _left(root: Path, kind: str, pid: int, host: str = HOST, suffix: str = "abc123_z") -> Path:
    path = root / f"envkit-{kind}-{host}-{pid}-{suffix}"
    path.mkdir()
    return path


def test_a_scratch_directory_names_its_host_and_process_and_is_private(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with scratch.directory("ctx-train") as path:
        assert path.parent == tmp_path
        assert path.name.startswith(f"envkit-ctx-train-{HOST}-{os.getpid()}-")
        assert path.stat().st_mode & 0o777 == 0o700  # the secrets directory holds a netrc
        assert scratch.leftovers(tmp_path) == []  # its maker (this process) is running
        (path / "f").write_text("x")
    assert list(tmp_path.iterdir()) == []


def test_a_scratch_directory_goes_when_its_block_raises(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        with scratch.directory("verify"):
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_leftovers_are_this_hosts_and_users_directories_whose_maker_is_gone(tmp_path):
    dead = _dead_pid()
    ctx = _left(tmp_path, "ctx-my-image", dead)
    (ctx / "Dockerfile").write_text("FROM x\n")
    (ctx / "sub").mkdir()
    (ctx / "sub" / "w.whl").write_bytes(b"0" * 1000)
    (ctx / "sub" / "link").symlink_to("/etc/passwd")  # counted as a link, never followed
    secrets = _left(tmp_path, "secrets", dead, suffix="zz9")
    os.utime(secrets, (1, 1))  # the oldest: listed first
    _left(tmp_path, "verify", os.getpid())  # its maker runs: in use
    _left(tmp_path, "verify", dead, host=HOST + "x")  # another host's (a shared /tmp): never touched
    _left(tmp_path, "verify", 1, suffix="q")  # pid 1 always runs
    (tmp_path / f"envkit-wheels-{HOST}-{dead}-file").write_text("")  # not a directory
    (tmp_path / f"envkit-rootfs-{HOST}-{dead}-lnk").symlink_to(ctx)  # a link to one: not followed
    (tmp_path / f"other-ctx-{HOST}-{dead}-abc").mkdir()  # not envkit's
    found = scratch.leftovers(tmp_path)
    assert [(f.path, f.kind, f.pid) for f in found] == [(secrets, "secrets", dead), (ctx, "ctx-my-image", dead)]
    assert found[1].bytes == len("FROM x\n") + 1000 + len("/etc/passwd")
    assert found[1].to_json() == {"path": str(ctx), "kind": "ctx-my-image", "pid": dead, "bytes": found[1].bytes,
                                  "mounts": []}


def test_a_build_with_a_login_first_removes_the_logins_killed_builds_left(tmp_path, monkeypatch):
    from envkit.images import builder as build

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = _dead_pid()
    stale = _left(tmp_path, "secrets", dead)
    (stale / "netrc").write_text("machine idx login u password p\n")
    ctx = _left(tmp_path, "ctx-train", dead)  # gc's to remove, not a build's
    monkeypatch.setattr(build, "netrc_for", lambda urls: b"machine idx login u password p\n")
    monkeypatch.setattr(build, "index_urls", lambda image: ["https://idx/simple"])
    with scratch.directory("secrets") as secrets:
        netrc = build._index_netrc(object(), secrets)
        assert netrc.read_bytes() == b"machine idx login u password p\n" and netrc.stat().st_mode & 0o777 == 0o600
        assert sorted(tmp_path.iterdir()) == sorted([ctx, secrets])
    assert scratch.leftovers(tmp_path, kinds=("ctx-train",))[0].path == ctx


def test_leftovers_of_a_missing_directory_are_none(tmp_path):
    assert scratch.leftovers(tmp_path / "absent") == []


MOUNTINFO = r"""22 1 0:21 / /proc rw - proc proc rw
30 22 0:5 / /tmp/envkit-rootfs-x/rootfs/proc rw - proc proc rw
31 22 0:6 / /tmp/envkit-rootfs-x/rootfs/sys rw - sysfs sysfs rw
32 30 0:7 / /tmp/envkit-rootfs-x/rootfs/proc/sys/fs/binfmt_misc rw - binfmt_misc x rw
33 22 0:8 / /tmp/envkit-rootfs-x\040y/a rw - tmpfs x rw
34 22 0:9 / /tmp/envkit-rootfs-xy rw - tmpfs x rw
"""


def test_mounts_under_a_path_deepest_first_with_escaped_spaces():
    assert scratch.mounts_under(Path("/tmp/envkit-rootfs-x"), MOUNTINFO) == [
        "/tmp/envkit-rootfs-x/rootfs/proc/sys/fs/binfmt_misc", "/tmp/envkit-rootfs-x/rootfs/proc",
        "/tmp/envkit-rootfs-x/rootfs/sys"]
    assert scratch.mounts_under(Path("/tmp/envkit-rootfs-x y"), MOUNTINFO) == ["/tmp/envkit-rootfs-x y/a"]
    assert scratch.mounts_under(Path("/tmp/elsewhere"), MOUNTINFO) == []


def _mount_proc(target: Path) -> None:
    target.mkdir(parents=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "proc", "proc", str(target)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting needs root (and a host that allows it)")


def test_a_proc_left_mounted_in_the_rootfs_is_unmounted_before_the_directory_goes(tmp_path):
    """What a SIGKILLed debootstrap leaves: the host's /proc mounted in its target. Deleting through it
    would chmod and unlink the host's files; envkit unmounts first."""
    tmp = tmp_path / "envkit-rootfs-t"
    _mount_proc(tmp / "rootfs" / "proc")
    (tmp / "rootfs" / "etc").mkdir()
    assert scratch.mounts_under(tmp) == [str(tmp / "rootfs" / "proc")]
    scratch.remove(tmp)
    assert not tmp.exists() and scratch.mounts_under(tmp_path) == []


def test_a_mount_that_will_not_go_keeps_the_directory_and_says_what_to_do(tmp_path, monkeypatch):
    tmp = tmp_path / "envkit-rootfs-t"
    _mount_proc(tmp / "rootfs" / "proc")
    real_run = subprocess.run
    monkeypatch.setattr("envkit.support.scratch.subprocess.run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 32, "", "busy"))
    try:
        with pytest.raises(EngineError) as err:
            scratch.remove(tmp)
        assert f"{tmp}/rootfs/proc is still mounted" in err.value.message
        assert err.value.hint == f"umount {tmp}/rootfs/proc, then rm -rf {tmp}"
        assert (tmp / "rootfs" / "proc" / "self").exists()  # nothing was deleted through it
        scratch.remove(tmp, strict=False)  # an interruption on its way: no second error
        assert tmp.exists()
    finally:
        real_run(["umount", "--lazy", str(tmp / "rootfs" / "proc")], capture_output=True)


def test_a_killed_bootstraps_rootfs_is_listed_with_its_mount_and_never_walked(tmp_path):
    left = _left(tmp_path, "rootfs", _dead_pid())
    _mount_proc(left / "rootfs" / "proc")
    try:
        [found] = scratch.leftovers(tmp_path)
        assert found.mounts == (str(left / "rootfs" / "proc"),) and found.bytes == 0  # /proc is not counted
    finally:
        subprocess.run(["umount", "--lazy", str(left / "rootfs" / "proc")], capture_output=True)

