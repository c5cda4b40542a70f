"""Layers as pure functions of their files: what a directory gained since a snapshot, and a tar of it whose bytes
depend on nothing but the files' paths, contents, modes and links.

A reproducible build (``images.reproducible``) installs each layer group into one directory, snapshots it after each,
and writes each group's new or changed entries as a layer tar with ``write_layer``: entries sorted by path, every
mtime ``epoch``, uid and gid 0 and no user or group names, modes as installed, no PAX access or change times,
hardlinks as links to the first path of their inode. The tar's sha256 is the layer's diff_id, streamed while it is
written (a 5 GB layer is never held in memory).
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from ..errors import BuildError

# What a snapshot keeps of an entry: its kind and mode, and for a file its size, mtime and inode (a file rewritten or
# replaced changes one of them); for a link its target.
Entry = tuple[int, int, int, int, str]
Snapshot = dict[str, Entry]
BytesDone = Callable[[int], None]  # the bytes written so far (progress of a long layer)
EVERY = 1 << 30  # how often a long layer's writing is said (bytes)


def snapshot(root: Path) -> Snapshot:
    """Every entry under ``root`` by its path relative to it (``a/b``), not following links."""
    found: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            found[os.path.relpath(path, root)] = (st.st_mode, st.st_size if stat.S_ISREG(st.st_mode) else 0,
                                                  st.st_mtime_ns, st.st_ino, link)
    return found


def changed(before: Snapshot, after: Snapshot, what: str) -> list[str]:
    """The paths ``after`` added or changed since ``before`` (directories only when new or their mode changed: a
    directory's mtime moves with every file added to it). A path that went away cannot be said by adding files;
    a layer group's install removes nothing of the groups below it, so it is refused."""
    gone = sorted(set(before) - set(after))
    if gone:
        raise BuildError(f"installing {what} removed {len(gone)} path(s) an earlier layer group installed, e.g. "
                         f"{gone[0]}", hint="a layer group must not reinstall another's packages: re-resolve the "
                                            "lock (`envkit resolve SPEC`) and build again")
    out = []
    for path, entry in after.items():
        old = before.get(path)
        if old is None or (stat.S_ISDIR(entry[0]) and old[0] != entry[0]) or (not stat.S_ISDIR(entry[0])
                                                                             and old != entry):
            out.append(path)
    return sorted(out)


@dataclass(frozen=True)
class Layer:
    diff_id: str  # sha256:<hex> of the tar's bytes
    size: int  # the tar's bytes
    entries: int


class _Hashing:
    """A write-only file that hashes and counts what passes through it to ``out``."""

    def __init__(self, out: BinaryIO, done: BytesDone | None):
        self.out, self.done, self.size = out, done, 0
        self.sha = hashlib.sha256()
        self._told = 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.sha.update(data)
        self.size += len(data)
        if self.done is not None and self.size - self._told >= EVERY:
            self._told = self.size
            self.done(self.size)
        return len(data)


def with_parents(paths: Iterable[str]) -> list[str]:
    """``paths`` and every directory above each of them (``opt``, ``opt/venv`` for ``opt/venv/bin``), sorted."""
    out: set[str] = set()
    for path in paths:
        parts = path.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(out)


def write_layer(root: Path, paths: Iterable[str], out: Path, *, epoch: int, prefix: str = "",
                done: BytesDone | None = None) -> Layer:
    """A layer tar of ``paths`` (relative to ``root``) at ``out``, each entry named ``prefix`` + its path, with the
    directories above them (a directory above ``root`` as mode 0755). Deterministic: see the module doc."""
    wanted = with_parents(prefix + p for p in paths)
    first: dict[tuple[int, int], str] = {}  # (device, inode) -> the first path written of a hardlinked file
    with open(out, "wb") as raw:
        sink = _Hashing(raw, done)
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for name in wanted:
                source = root / name[len(prefix):] if name.startswith(prefix) else None
                _add(tar, name, source, epoch, first)
        if done is not None:
            done(sink.size)
    return Layer("sha256:" + sink.sha.hexdigest(), sink.size, len(wanted))


def _add(tar: tarfile.TarFile, name: str, source: Path | None, epoch: int, first: dict[tuple[int, int], str]) -> None:
    info = tarfile.TarInfo(name)
    info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
    if source is None:  # a directory above the installed tree (opt/)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
        return
    st = os.lstat(source)
    info.mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(source)
    elif stat.S_ISREG(st.st_mode):
        key = (st.st_dev, st.st_ino)
        if st.st_nlink > 1 and key in first:
            info.type, info.linkname = tarfile.LNKTYPE, first[key]
        else:
            first.setdefault(key, name)
            info.size = st.st_size
            with open(source, "rb") as fh:
                tar.addfile(info, fh)
            return
    else:
        raise BuildError(f"{source} is neither a file, a directory nor a link; a layer holds only those",
                         hint="a package that makes device files or sockets cannot be installed this way")
    tar.addfile(info)


def write_files_layer(files: dict[str, bytes], out: Path, *, epoch: int, prefix: str) -> Layer:
    """A layer tar of in-memory ``files`` (relative path -> bytes, mode 0644) under ``prefix``, with their
    directories (0755): the payload layer, as `COPY envkit/ /opt/envkit/` would make it."""
    names = with_parents(prefix + p for p in files)
    with open(out, "wb") as raw:
        sink = _Hashing(raw, None)
        with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for name in names:
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
                data = files.get(name[len(prefix):]) if name.startswith(prefix) else None
                if data is None:
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                else:
                    info.mode, info.size = 0o644, len(data)
                    tar.addfile(info, io.BytesIO(data))
    return Layer("sha256:" + sink.sha.hexdigest(), sink.size, len(names))

