"""Base images: find them in the engine, or make them with debootstrap + docker import.

Bootstrapping is the air-gapped path: it needs only a Debian mirror, no registry. The
made image is tagged with the recipe's hash (``envkit-base/debian:<suite>-minbase-<h>``)
so a rebuild reuses it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

from . import procs
from .engine import ImageInfo
from .errors import EngineError
from .lock import BaseImage

Progress = Callable[[str], None]


def ensure_base(engine, base: BaseImage, progress: Progress = lambda _: None) -> ImageInfo:
    info = engine.inspect(base.ref)
    if info is not None:
        return info
    if base.bootstrap is None:
        raise EngineError(
            f"base image {base.ref} is not in the engine and envkit does not pull",
            hint=f"pull or load it first (docker pull {base.ref}), or use a `bootstrap:` base",
        )
    return bootstrap(engine, base, progress)


def bootstrap(engine, base: BaseImage, progress: Progress) -> ImageInfo:
    recipe = base.bootstrap or {}
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None)
    if debootstrap is None:
        raise EngineError("debootstrap is not installed, so envkit cannot make the base image",
                          hint="apt-get install -y debootstrap (as root), or give an image base")
    tmp = Path(tempfile.mkdtemp(prefix="envkit-rootfs-"))
    try:
        info = _bootstrap_in(tmp, engine, base, recipe, debootstrap, progress)
    except BaseException:
        _remove_rootfs(tmp, strict=False)  # the exception on its way says what went wrong
        raise
    _remove_rootfs(tmp)
    return info


def _bootstrap_in(tmp: Path, engine, base: BaseImage, recipe: dict, debootstrap: str, progress: Progress) -> ImageInfo:
    root = tmp / "rootfs"
    cmd = [debootstrap, f"--variant={recipe['variant']}", recipe["suite"], str(root), recipe["mirror"]]
    progress(f"bootstrapping {recipe['suite']} from {recipe['mirror']} (about a minute)")
    proc = procs.run(cmd)  # interrupted: SIGTERM, on which debootstrap unmounts what it mounted in the target
    if proc.returncode != 0:
        tail = "\n    ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise EngineError(f"debootstrap of {recipe['suite']} failed (exit {proc.returncode})",
                          hint=f"is the mirror reachable and are you root?\n    {tail}")
    # Drop apt lists and caches: the images' own apt-get update refreshes them.
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for p in (root / sub).glob("*"):
            if p.is_file():
                p.unlink()
    tarball = tmp / "rootfs.tar"
    progress(f"importing {base.ref}")
    with tarfile.open(tarball, "w") as tar:
        tar.add(root, arcname=".")
    labels = {"io.envkit.base-recipe": f"{recipe['suite']} {recipe['variant']} {recipe['mirror']}"}
    return engine.import_rootfs(tarball, base.ref, labels)


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


def _remove_rootfs(tmp: Path, strict: bool = True) -> None:
    """Delete the bootstrap's directory, never through a mount: a debootstrap that was killed can leave
    the host's /proc and /sys mounted in its target, and deleting into those would touch the host's
    files. What is mounted there is unmounted first; what stays mounted keeps the directory in place
    (an EngineError saying so, when ``strict``)."""
    for point in mounts_under(tmp):
        try:
            subprocess.run(["umount", "--lazy", point], capture_output=True)
        except OSError:
            break  # no umount here: what is left is said below
    left = mounts_under(tmp)
    if not left:
        shutil.rmtree(tmp, ignore_errors=True)
    elif strict:
        raise EngineError(f"{', '.join(left)} is still mounted inside the base's bootstrap directory {tmp}, "
                          "which envkit left in place rather than delete through a mount",
                          hint=f"umount {' '.join(left)}, then rm -rf {tmp}")
