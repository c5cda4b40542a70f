"""Scratch directories that say whose they are, so that what a killed envkit left can be found and removed.

envkit works in directories under the temporary directory (``$TMPDIR``, else /tmp): a build's context,
the build secrets (the index logins as a 0600 netrc), the payload a certification mounts, a base's
debootstrap target, a bundle's wheels. Each is removed when its work ends, interrupted or not; only a
process that is killed outright (SIGKILL, the OOM killer, a lost runner) leaves one behind, and then
for good: a context or a rootfs is hundreds of MB, and a netrc is a credential lying on disk.

So every such directory is named ``envkit-<kind>-<host>-<pid>-<random>``: the host and the process
that made it. ``leftovers`` lists the ones made on this host, by this user, by a process that is no
longer running (one still running, or made on another host sharing the directory, is never touched);
``envkit gc`` removes them and ``envkit doctor`` counts them; a build removes
the ``secrets`` ones before it writes a login of its own (``sweep_secrets``). Removal never goes through a mount
(``remove``): a killed debootstrap can leave the host's /proc and /sys mounted in its target, and
deleting into those would touch the host's own files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Iterator

from ..errors import EngineError

PREFIX = "envkit-"


def owner(pid: int | None = None) -> str:
    """``<host>-<pid>-``: whose a scratch directory is (this process's, or ``pid``'s on this host)."""
    return f"{socket.gethostname()}-{os.getpid() if pid is None else pid}-"


def owner_pattern() -> str:
    """A regular expression for ``owner()`` of any process on this host, the pid in group ``pid``."""
    return re.escape(socket.gethostname()) + r"-(?P<pid>\d+)-"


def make(kind: str, parent: Path | None = None) -> Path:
    """A new private (0700) directory ``envkit-<kind>-<host>-<pid>-XXXXXXXX``; the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{kind}-{owner()}", dir=parent))


@contextlib.contextmanager
def directory(kind: str) -> Iterator[Path]:
    """``make``, removed (never through a mount) when the block ends, however it ends."""
    path = make(kind)
    try:
        yield path
    finally:
        remove(path, strict=False)


def running(pid: int) -> bool:
    """Whether a process with this id runs on this host (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Leftover:
    """A scratch directory whose maker is gone."""

    path: Path
    kind: str  # ctx-<image>, secrets, verify, rootfs, buildkit, closure, wheels, refresh
    pid: int
    bytes: int
    mounts: tuple[str, ...] = ()  # what is still mounted under it (a killed debootstrap's /proc)

    def to_json(self) -> dict:
        return {"path": str(self.path), "kind": self.kind, "pid": self.pid, "bytes": self.bytes,
                "mounts": list(self.mounts)}


def leftovers(root: Path | None = None, kinds: Collection[str] | None = None) -> list[Leftover]:
    """The scratch directories in ``root`` (default: the temporary directory) made on this host, owned by
    this user, by a process that is no longer running (only those of ``kinds``, when given); oldest first."""
    root = Path(root or tempfile.gettempdir())
    mine = re.compile(re.escape(PREFIX) + r"(?P<kind>.+)-" + owner_pattern() + r"[a-z0-9_]+")
    found = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        m = mine.fullmatch(entry.name)
        if not m or (kinds is not None and m.group("kind") not in kinds) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid != os.geteuid() or running(int(m.group("pid"))):
            continue
        path = Path(entry.path)
        mounts = tuple(mounts_under(path))
        found.append((st.st_mtime, Leftover(path, m.group("kind"), int(m.group("pid")),
                                            0 if mounts else _size(path), mounts)))
    return [leftover for _, leftover in sorted(found, key=lambda t: (t[0], str(t[1].path)))]


def sweep_secrets() -> None:
    """Remove the build-secrets directories killed envkits left here: index logins must not stay on disk
    until someone runs gc."""
    for left in leftovers(kinds=("secrets",)):
        remove(left.path, strict=False)


def _size(path: Path) -> int:
    """Bytes in the files under ``path``, not following links (a directory with a mount is not walked)."""
    total = 0
    for top, dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                pass
    return total


def mounts_under(path: Path, mountinfo: str | None = None) -> list[str]:
    """The mount points at or below ``path`` (``/proc/self/mountinfo``, or the text given), deepest first."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    top = str(Path(path).resolve())
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # "\040" is a space
        if point == top or point.startswith(top + "/"):
            found.append(point)
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def remove(path: Path, strict: bool = True) -> None:
    """Delete ``path``, never through a mount: what is mounted under it is unmounted first; what stays
    mounted keeps the directory in place (an EngineError saying so, when ``strict``)."""
    for point in mounts_under(path):
        try:
            subprocess.run(["umount", "--lazy", point], capture_output=True)
        except OSError:
            break  # no umount here: what is left is said below
    left = mounts_under(path)
    if not left:
        shutil.rmtree(path, ignore_errors=True)
    elif strict:
        raise EngineError(f"{', '.join(left)} is still mounted inside envkit's scratch directory {path}, "
                          "which envkit left in place rather than delete through a mount",
                          hint=f"umount {' '.join(left)}, then rm -rf {path}")
