"""Writing envkit's outputs so that a reader, or a failure, never sees half of them.

One file: written beside its target, synced, then renamed over it (``write_atomic``). Several files and
directories (a render's trees and compose file, a catalog refresh's files): all written beside their
targets first, then renamed into place, and put back if a rename fails (``replace_all``). ``check_writable``
finds what would refuse a write before the work whose result it is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path


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
    creatable, unwritable, read-only or immutable, naming that directory; or, for root, the file itself immutable.
    Called before work whose result goes there, or before the first of several files is replaced. The directory
    is probed for real (a temporary file made and removed): permissions do not show what refuses root."""
    path = Path(path)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(parent)) from None
    # the rename over an existing file needs only the directory, but an immutable file refuses it; to root,
    # access() says no only for such a file (for others a read-only mode says no too, and is no obstacle)
    if os.geteuid() == 0 and path.is_file() and not os.access(path, os.W_OK):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(path))


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


def replace_all(trees: dict[Path, dict[str, bytes]], files: dict[Path, bytes]) -> None:
    """Replace each directory of ``trees`` with exactly its files and each file of ``files`` with its bytes, all
    or nothing as far as one filesystem allows. Everything is written beside its target first, so a full disk,
    a quota or a refusal fails with nothing replaced; then renames put each in place (a directory's old tree is
    renamed aside, then removed), the files last, by ``os.replace``, so readers never see half a file. A rename
    that fails puts back what was already replaced. Readers may see some directories new and others old only
    for the moment between renames."""
    staged: list[tuple[Path, Path]] = []  # (staging, target): the trees, then the files
    swapped: list[tuple[Path, Path | None]] = []  # (directory, its old tree renamed aside, or None)
    try:
        for directory, content in trees.items():
            staged.append((stage_tree(directory, content), directory))
        for path, data in files.items():
            staged.append((stage_file(path, data), path))
        try:
            for staging, target in staged:
                if target in trees:
                    old = None
                    if target.exists():
                        old = target.with_name(f".{target.name}.old{os.getpid()}")
                        target.rename(old)
                    swapped.append((target, old))
                    staging.rename(target)
                else:
                    os.replace(staging, target)
        except BaseException:
            for directory, old in reversed(swapped):  # put the old trees back
                if directory.is_dir() and not directory.is_symlink() and (old is None or old.exists()):
                    aside = directory.with_name(f".{directory.name}.failed{os.getpid()}")
                    with contextlib.suppress(OSError):
                        directory.rename(aside)
                        shutil.rmtree(aside, ignore_errors=True)
                if old is not None:
                    with contextlib.suppress(OSError):
                        old.rename(directory)
            raise
        for _, old in swapped:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        for staging, _ in staged:
            if staging.is_dir():
                shutil.rmtree(staging, ignore_errors=True)
            else:
                staging.unlink(missing_ok=True)
