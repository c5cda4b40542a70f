"""Writing envkit's outputs so that a reader, or a failure, never sees half of them.

One file: written beside its target, synced, then renamed over it (``write_atomic``). Several files and
directories (a render's trees and compose file, a catalog refresh's files): all written beside their
targets first, then renamed into place, and put back if a rename fails (``replace_all``); two runs replacing
the same targets take turns (an exclusive ``flock`` on each target's directory). ``check_writable`` finds what
would refuse a write before the work whose result it is.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvkitError


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never half."""
    tmp = stage_file(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def stage_file(path: str | Path, data: bytes) -> Path:
    """``data`` written and synced to a new file beside ``path``, with the mode ``path`` has (else a new file's):
    what ``os.replace`` then puts in its place. Where a full disk or a refusal fails, before anything changed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600: give it the mode the file had, else what a plain open() would give
        try:
            mode = path.stat().st_mode & 0o777
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return Path(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: str | Path) -> None:
    """Raise the OSError writing ``path`` (as ``write_atomic`` does) would meet: its directory missing and not
    creatable, unwritable, read-only or immutable, naming that directory; or the file itself: immutable (as seen by
    root; others meet that at the rename, and ``replace_all`` puts back), or another user's in a sticky directory.
    Called before work whose result goes there (resolve, before its lock; ``replace_all`` guards itself). The directory
    is probed for real (a temporary file made and removed): permissions do not show what refuses root."""
    path = Path(path)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:  # the directory refused, except a name too long: the file's own
        raise OSError(exc.errno, exc.strerror, str(path if exc.errno == errno.ENAMETOOLONG else parent)) from None
    # the rename over an existing file needs only the directory, but an immutable file refuses it; to root,
    # access() says no only for such a file (for others a read-only mode says no too, and is no obstacle)
    euid = os.geteuid()
    if euid == 0 and path.is_file() and not os.access(path, os.W_OK):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(path))
    # in a sticky directory (/tmp, a shared team directory) only the owner of a file, or of the directory, may
    # rename over it: the probe above passes and the rename would not
    try:
        held, here = path.lstat(), parent.stat()
    except OSError:
        return
    if euid != 0 and here.st_mode & stat.S_ISVTX and euid not in (held.st_uid, here.st_uid):
        raise PermissionError(errno.EPERM, f"{os.strerror(errno.EPERM)} (another user's file in a sticky directory)",
                              str(path))


def stage_tree(directory: Path, files: dict[str, bytes]) -> Path:
    """A finished tree of exactly ``files`` beside ``directory`` (a hidden sibling), for ``replace_all`` to rename
    into its place. Where a full disk or a refusal fails, before anything changed."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        for name, data in files.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        os.chmod(staging, 0o755)
        return staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@dataclass
class _Swap:
    """One target of ``replace_all``: its new content staged beside it, and a private directory beside it (unique:
    no leftover of a killed run is in the way) that takes the old tree or a link to the old file as ``was``."""

    target: Path
    tree: bool
    aside: Path
    staging: Path | None = None
    had_old: bool = False
    moved_old: bool = False  # a tree: the old one is in aside/was
    placed: bool = False  # the new one is at target
    keep_aside: bool = False  # putting back failed: the old one stays in aside for the user


def _keep_copy(path: Path, dest: Path) -> None:
    """``dest`` holds ``path``'s bytes for a put-back: a hard link (free), else a copy."""
    try:
        os.link(path, dest)
    except OSError:
        shutil.copy2(path, dest)


def replace_all(trees: dict[Path, dict[str, bytes]], files: dict[Path, bytes]) -> None:
    """Replace each directory of ``trees`` with exactly its files and each file of ``files`` with its bytes, all
    or nothing as far as one filesystem allows. Everything is written beside its target first, with a link to (or
    copy of) each old file, so a full disk, a quota or a refusal fails with nothing replaced; then renames put each
    in place (a directory's old tree is renamed aside, then removed), the files last, by ``os.replace``, so readers
    never see half a file. A rename that fails puts back every tree and file already replaced; when putting back
    fails too, the error says where the old ones are. Readers may see some targets new and others old for the
    moment between renames. Two runs replacing the same targets at once take turns (``directories_locked``), so
    neither fails on the other's renames and the targets end as one run wrote them, not half of each."""
    targets = [*trees, *files]
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
    with directories_locked(t.parent for t in targets):
        _replace_all(trees, files)


LOCK_WAIT = 120.0  # seconds to wait for another run writing the same directories (a render takes milliseconds)


# (pid, realpath) -> how many holders in this process (flock is per open file, so not re-entrant by itself; the
# pid keeps a forked child from taking its parent's count for a lock the child does not hold)
_held: dict[tuple[int, str], int] = {}
_held_guard = threading.Lock()


def _flock(fd: int, directory: str, wait: float) -> None:
    """Take an exclusive ``flock`` on open directory ``fd``, waiting up to ``wait`` seconds for another process;
    a filesystem without locks is written without one."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise EnvkitError(
                    f"another process has been writing to {directory} for over {wait:.0f} s "
                    "(an envkit render, build, catalog refresh or exclude of the same outputs)",
                    hint="wait for it to finish, or find it with `fuser -v` on that directory") from None
            time.sleep(0.02)
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                return  # no locks on this filesystem: write as before
            raise


@contextmanager
def directories_locked(directories: Iterable[Path], wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold an exclusive ``flock`` on each directory (on the directory itself: no lock file is left in a user's
    tree), taken in one order so two holders of overlapping sets never deadlock; the kernel drops it with the
    process. Re-entrant within a process (a catalog exclude holds its directory from reading the file to
    replacing it, and ``replace_all`` inside asks again). Waits up to ``wait`` seconds for another process,
    then raises naming the directory. A filesystem without ``flock`` (some network mounts), or a directory this
    user may write but not read, is written without it."""
    fds: list[int] = []
    counted: list[tuple[int, str]] = []
    try:
        for directory in sorted({os.path.realpath(d) for d in directories}):
            key = (os.getpid(), directory)
            with _held_guard:
                if _held.get(key):
                    _held[key] += 1
                    counted.append(key)
                    continue
            try:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            except PermissionError:
                continue  # writable but not readable (mode -wx): written without the lock, as before
            fds.append(fd)
            _flock(fd, directory, wait)
            with _held_guard:
                _held[key] = 1
            counted.append(key)
        yield
    finally:
        with _held_guard:
            for key in counted:
                _held[key] -= 1
                if not _held[key]:
                    del _held[key]
        for fd in fds:
            os.close(fd)


def _replace_all(trees: dict[Path, dict[str, bytes]], files: dict[Path, bytes]) -> None:
    swaps: list[_Swap] = []
    try:
        staged: list[tuple[Path, dict[str, bytes] | bytes]] = [*trees.items(), *files.items()]
        for target, content in staged:
            try:
                _stage(swaps, target, content, target in trees)
            except OSError as exc:  # named by its target, not by the private names staged beside it
                raise OSError(exc.errno, exc.strerror, str(target)) from exc
        try:
            for swap in swaps:
                _place(swap)
        except OSError as exc:  # named by its target, not by the staged file beside it
            _put_back(swaps, exc)
            raise OSError(exc.errno, exc.strerror, str(swap.target)) from exc
        except BaseException as exc:
            _put_back(swaps, exc)
            raise
    finally:
        for swap in swaps:
            _clean_up(swap)


def _place(swap: _Swap) -> None:
    """Rename the staged tree or file over its target (an old tree first moved into the swap's own directory)."""
    staging = swap.staging
    assert staging is not None  # staged by _stage before any is placed
    if swap.tree:
        if swap.had_old:
            swap.target.rename(swap.aside / "was")
            swap.moved_old = True
        staging.rename(swap.target)
    else:
        os.replace(staging, swap.target)
    swap.placed = True


def _clean_up(swap: _Swap) -> None:
    """Remove what was staged and not placed, and the old one set aside unless it must be kept."""
    if swap.staging is not None and not swap.placed:
        if swap.tree:
            shutil.rmtree(swap.staging, ignore_errors=True)
        else:
            swap.staging.unlink(missing_ok=True)
    if not swap.keep_aside:
        shutil.rmtree(swap.aside, ignore_errors=True)


def _stage(swaps: list[_Swap], target: Path, content: dict[str, bytes] | bytes, tree: bool) -> None:
    """Write ``target``'s new content beside it, and keep a link to (or copy of) an old file, as a new swap."""
    target.parent.mkdir(parents=True, exist_ok=True)
    swap = _Swap(target, tree, Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.old.")))
    swaps.append(swap)
    swap.had_old = target.exists() or target.is_symlink()
    if isinstance(content, dict):
        swap.staging = stage_tree(target, content)
    else:
        swap.staging = stage_file(target, content)
        if swap.had_old:
            _keep_copy(target, swap.aside / "was")


def _put_back(swaps: list[_Swap], exc: BaseException) -> None:
    """Undo the renames done, newest first; raise an error naming what could not be put back, and where it is."""
    failures = []
    for swap in reversed(swaps):
        try:
            if swap.tree:
                if swap.placed:
                    swap.target.rename(swap.aside / "new")  # removed with the aside
                    swap.placed = False
                if swap.moved_old:
                    (swap.aside / "was").rename(swap.target)
            elif swap.placed:
                if swap.had_old:
                    os.replace(swap.aside / "was", swap.target)
                else:
                    swap.target.unlink()
                swap.placed = False
        except OSError as err:
            swap.keep_aside = True
            failures.append(f"{swap.target} ({err.strerror}; the old one is {swap.aside / 'was'})"
                            if swap.had_old else f"{swap.target} ({err.strerror}; there was none before)")
    if failures:
        raise EnvkitError(f"replacing {len(swaps)} file(s) and tree(s) failed ({exc}), and putting back what was "
                          f"already replaced failed too: {'; '.join(failures)}",
                          hint="move the old ones back by hand, then run the command again") from exc
