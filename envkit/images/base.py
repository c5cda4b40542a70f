"""Base images: find them in the engine, or make them with debootstrap + docker import.

Bootstrapping is the air-gapped path: it needs only a Debian mirror, no registry. The
made image is tagged with the recipe's hash (``envkit-base/debian:<suite>-minbase-<h>``)
so a rebuild reuses it.
"""

from __future__ import annotations

import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..engine.protocol import ImageInfo
from ..engine.space import host_full, says_no_space
from ..errors import EngineError
from ..lock import BaseImage
from ..support import procs, scratch
from ..support.progress import Phase, Progress

Phases = Callable[[Phase], None]
# debootstrap's line for one package in each phase: "I: Retrieving adduser 3.134", "I: Extracting adduser...",
# "I: Unpacking libc6:amd64...", "I: Configuring apt..." (its other lines name no package: "I: Retrieving InRelease",
# "I: Unpacking required packages...")
_PACKAGE_LINE = re.compile(r"^I: (?:(Retrieving) \S+ \S+|(Extracting|Unpacking|Configuring) \S+\.\.\.)$")

if TYPE_CHECKING:
    from ..engine.protocol import Engine


@dataclass
class DebootstrapCount:
    """debootstrap's progress, read from its lines (``feed``): the packages it retrieves (how many it needs is known
    once the retrieving ends), then each later phase's packages against that count."""

    total: int = 0
    phase: str = ""
    done: int = 0

    def feed(self, line: str) -> Phase | None:
        m = _PACKAGE_LINE.match(line.rstrip())
        if not m:
            return None
        phase = (m.group(1) or m.group(2)).lower()
        if phase != self.phase:
            self.phase, self.done = phase, 0
        self.done += 1
        if phase == "retrieving":
            self.total = self.done
            return Phase("bootstrap", phase, self.done, None)
        return Phase("bootstrap", phase, min(self.done, self.total), self.total or None)


def ensure_base(engine: Engine, base: BaseImage, progress: Progress = lambda _: None,
                phases: Phases = lambda _: None) -> ImageInfo:
    """The base image ``base`` names: the engine's, else bootstrapped (``progress``: what it does; ``phases``:
    debootstrap's packages per phase as it goes)."""
    info = engine.inspect(base.ref)
    if info is not None:
        return info
    if base.bootstrap is None:
        raise EngineError(
            f"base image {base.ref} is not in the engine and envkit does not pull",
            hint=f"pull or load it first (docker pull {base.ref}), or use a `bootstrap:` base",
        )
    return bootstrap(engine, base, progress, phases)


def bootstrap(engine: Engine, base: BaseImage, progress: Progress, phases: Phases = lambda _: None) -> ImageInfo:
    recipe = base.bootstrap or {}
    debootstrap = shutil.which("debootstrap") or (
        "/usr/sbin/debootstrap" if Path("/usr/sbin/debootstrap").exists() else None
    )
    if debootstrap is None:
        raise EngineError("debootstrap is not installed, so envkit cannot make the base image",
                          hint="apt-get install -y debootstrap (as root), or give an image base")
    tmp = scratch.make("rootfs")
    try:
        info = _bootstrap_in(tmp, engine, base, recipe, debootstrap, progress, phases)
    except BaseException:
        scratch.remove(tmp, strict=False)  # the exception on its way says what went wrong
        raise
    scratch.remove(tmp)  # never through a mount: a killed debootstrap leaves /proc mounted in its target
    return info


def _bootstrap_in(tmp: Path, engine: Engine, base: BaseImage, recipe: dict, debootstrap: str,
                  progress: Progress, phases: Phases) -> ImageInfo:
    root = tmp / "rootfs"
    cmd = [debootstrap, f"--variant={recipe['variant']}", recipe["suite"], str(root), recipe["mirror"]]
    progress(f"bootstrapping {recipe['suite']} from {recipe['mirror']} (about a minute)")
    count = DebootstrapCount()

    def line(text: str) -> None:
        if (phase := count.feed(text)) is not None:
            phases(phase)

    proc = procs.run_lines(cmd, line)  # interrupted: SIGTERM, on which debootstrap unmounts what it mounted
    if proc.returncode != 0:
        tail = "\n    ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        if says_no_space(tail):
            raise host_full(f"debootstrap of {recipe['suite']} failed", tmp, kind=EngineError,
                            hint="the rootfs and its archive need about 350 MB there: free space, or point TMPDIR "
                                 f"at a larger disk\n    {tail}")
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
