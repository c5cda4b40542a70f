"""Why two layer tars differ: the first differing file, not two digests.

Two builds of the same lock should give the same environment layers (``images.layers``: entries sorted by path,
one mtime, uid and gid 0). When their diff_ids differ, ``diff_tars`` reads both tars as streams, side by side (a
layer can be GBs: nothing is extracted, each member's content is hashed as it passes), and names the first member
that differs (its path, and which of its type, size, mode, uid/gid, owner names, mtime, link target, PAX headers
(xattrs among them) or content differs, or that it is in one tar only), with how many members differ in all. Two
tars with the same members in another order differ by ``order``; with the same members in the same order, by their
encoding (``archive``: the tar format, padding, the end blocks).
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from itertools import zip_longest
from typing import BinaryIO, Iterator

CHUNK = 1 << 20
# the header fields compared, in the order a difference is named (content comes after them)
FIELDS = ("type", "size", "mode", "uid/gid", "owner", "mtime", "link target", "device", "pax")
# PAX keys that only spell a field compared on its own (a long path, a large size, a fractional mtime)
SPELLED = {"path", "linkpath", "size", "uid", "gid", "uname", "gname", "mtime"}
TYPES = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "directory",
         tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char device",
         tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "fifo", tarfile.CONTTYPE: "file"}


@dataclass(frozen=True)
class Member:
    """What a tar says of one member: its header fields as text, and its content's sha256 (files only)."""

    index: int
    path: str
    fields: dict[str, str]
    content: str | None


@dataclass(frozen=True)
class FileDiff:
    """One member that differs: ``field`` is a header field of ``FIELDS``, ``content``, ``present`` (in one tar
    only: ``a`` or ``b`` is "absent"), ``order`` (the same members, another order: their positions) or ``archive``
    (the same members in the same order: the tars' bytes around them; no path)."""

    path: str
    field: str
    a: str
    b: str

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "field": self.field, "a": self.a, "b": self.b}

    def describe(self) -> str:
        if self.field == "archive":
            return "the same members in the same order: the tars differ in their encoding (format, padding, end)"
        if self.field == "present":
            return f"/{self.path}: only in {'a' if self.b == 'absent' else 'b'}"
        return f"/{self.path}: {self.field} differs ({self.a} vs {self.b})"


@dataclass(frozen=True)
class TarDiff:
    """Two tars compared: ``first`` None when every member is the same, in the same order."""

    first: FileDiff | None
    differing: int  # members that differ (by path)
    members: tuple[int, int]  # how many each tar holds

    def to_json(self) -> dict[str, object]:
        return {"first": self.first.to_json() if self.first else None, "differing": self.differing,
                "members": list(self.members)}


def normal(name: str) -> str:
    """A member's path as the file system has it: no ``./`` in front, no ``/`` at the end."""
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/")


def _fields(info: tarfile.TarInfo) -> dict[str, str]:
    pax = {k: v for k, v in info.pax_headers.items() if k not in SPELLED}
    return {"type": TYPES.get(info.type, repr(info.type)), "size": str(info.size if info.isreg() else 0),
            "mode": f"{info.mode:04o}", "uid/gid": f"{info.uid}/{info.gid}", "owner": f"{info.uname}/{info.gname}",
            "mtime": str(info.mtime), "link target": info.linkname,
            "device": f"{info.devmajor},{info.devminor}" if info.ischr() or info.isblk() else "",
            "pax": " ".join(f"{k}={v}" for k, v in sorted(pax.items()))}


def members(stream: BinaryIO) -> Iterator[Member]:
    """Each member of the tar read from ``stream`` (read once, never sought), its content hashed in passing."""
    with tarfile.open(fileobj=stream, mode="r|*") as tar:
        for index, info in enumerate(tar):
            content = None
            if info.isreg():
                sha = hashlib.sha256()
                fh = tar.extractfile(info)
                assert fh is not None  # a regular file's
                while chunk := fh.read(CHUNK):
                    sha.update(chunk)
                content = "sha256:" + sha.hexdigest()
            yield Member(index, normal(info.name), _fields(info), content)


def compare(a: Member, b: Member) -> FileDiff | None:
    """The first field in which two members of the same path differ (None: none does)."""
    for name in FIELDS:
        if a.fields[name] != b.fields[name]:
            return FileDiff(a.path, name, a.fields[name], b.fields[name])
    if a.content != b.content:
        return FileDiff(a.path, "content", a.content or "", b.content or "")
    return None


def diff_tars(a: BinaryIO, b: BinaryIO) -> TarDiff:
    """Compare the tars read from ``a`` and ``b`` (streams, read side by side once). The first difference is the one
    earliest in tar ``a`` (a member only in ``b``: by its place in ``b``)."""
    pending: tuple[dict[str, Member], dict[str, Member]] = ({}, {})
    found: list[tuple[int, FileDiff]] = []
    names: tuple[list[str], list[str]] = ([], [])
    for pair in zip_longest(members(a), members(b)):
        for side, member in enumerate(pair):
            if member is not None:
                pending[side][member.path] = member
                names[side].append(member.path)
        for path in {m.path for m in pair if m is not None}:
            if path in pending[0] and path in pending[1]:
                ma, mb = pending[0].pop(path), pending[1].pop(path)
                diff = compare(ma, mb)
                if diff is not None:
                    found.append((ma.index, diff))
    found += [(m.index, FileDiff(p, "present", "present", "absent")) for p, m in pending[0].items()]
    found += [(m.index, FileDiff(p, "present", "absent", "present")) for p, m in pending[1].items()]
    counts = (len(names[0]), len(names[1]))
    if found:
        return TarDiff(min(found, key=lambda f: (f[0], f[1].path))[1], len(found), counts)
    for index, (x, y) in enumerate(zip(*names)):
        if x != y:
            return TarDiff(FileDiff(x, "order", f"#{index}", f"#{names[1].index(x)}"), 1, counts)
    return TarDiff(None, 0, counts)


def diff_files(a: BinaryIO, b: BinaryIO, *, same_bytes: bool) -> TarDiff:
    """``diff_tars``, and where every member is the same but the bytes are not (``same_bytes`` False: the callers
    know the two digests), the ``archive`` difference."""
    result = diff_tars(a, b)
    if result.first is None and not same_bytes:
        return TarDiff(FileDiff("", "archive", "", ""), 0, result.members)
    return result
