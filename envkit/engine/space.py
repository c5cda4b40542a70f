"""A full disk, said plainly: the engine's (where its images and build layers live) or this host's.

A CUDA framework image is 5-7 GB and its build needs about as much again: build hosts fill their
disks. The engine reports it in many voices (a layer write's ``no space left
on device``, pip's ``[Errno 28]`` in a RUN step, a ``docker load`` that cannot extract); envkit turns
each into one error that says whose disk, how much is free now and what to reclaim.
"""

from __future__ import annotations

import errno
import os
import re
from typing import TYPE_CHECKING

from ..errors import DiskSpaceError, EnvkitError

if TYPE_CHECKING:
    from .protocol import Engine

NO_SPACE = re.compile(r"no space left on device|\[Errno 28\]|disk quota exceeded", re.IGNORECASE)
GIB = 1 << 30
DISK_FAIL, DISK_WARN = 10 * GIB, 30 * GIB  # a CUDA framework image is 5-7 GB, and its build needs about as much again


# What a cold build of a lock takes on the engine's disk, per byte of the lock's wheels (their sizes are in the lock).
# Measured once, 2026-12-06, on the example (examples/team.lock: torch 2.5.1 cu124 + numpy, 3.02 GB of wheels), a cold
# classic build on a 2-core host: the three environment layers hold 5.44 GB (`docker history`: CUDA wheels 2.90 GB,
# framework 2.47 GB, extras 0.07 GB), 1.80 per wheel byte; the engine's free space fell by at most 9.64 GB during the
# build (`df` every 2 s), 3.19 per wheel byte, and by 7.2 GB once it was done (the image is 5.70 GB with its 0.12 GB
# base and 0.15 GB of OS packages). The peak above the image is the layer being committed: uv unpacks a group into its
# cache and the venv (hard links), and the engine copies the step's files into the new layer.
UNPACKED_PER_WHEEL_BYTE = 1.8  # the environment layers an image keeps
PEAK_PER_WHEEL_BYTE = 3.2  # the most a build takes while it runs, its image included
BUILD_MARGIN = GIB  # the base, the OS packages and the payload (~0.3 GB for the example), and some slack


def build_need(wheel_bytes: list[int]) -> int:
    """The engine disk a cold build of images whose locks hold ``wheel_bytes`` of wheels (one total per image) takes
    at its peak: every image's environment as it stays, plus the largest one's transient copy while its layer is
    committed (the images build one after the other), plus ``BUILD_MARGIN``. Layers images share (the same CUDA
    wheels) are counted once per image: an estimate that errs on the safe side."""
    if not wheel_bytes:
        return 0
    kept = sum(UNPACKED_PER_WHEEL_BYTE * b for b in wheel_bytes)
    return int(kept + (PEAK_PER_WHEEL_BYTE - UNPACKED_PER_WHEEL_BYTE) * max(wheel_bytes)) + BUILD_MARGIN


def require_space(engine: Engine, need: int, what: str) -> int | None:
    """Refuse (``DiskSpaceError``, exit 17) when the engine's disk has less than ``need`` bytes free for ``what``;
    the free bytes otherwise (None: not measurable here, e.g. a remote engine: nothing to refuse on)."""
    try:
        root = engine.data_root()
    except Exception:  # noqa: BLE001 - not knowing is no reason to stop a build
        return None
    free = free_bytes(root)
    if free is None or free >= need:
        return free
    raise DiskSpaceError(
        f"{what} needs about {size(need)} on the engine's disk; {root} has {size(free)} free",
        hint="`envkit gc --dry-run` lists what envkit can reclaim (`envkit gc` removes it), or free space on that "
             "disk; `--skip-space-check` builds anyway (the estimate comes from the lock's wheel sizes: "
             "docs/images.md, \"When the disk fills up\")")


def size(n: int) -> str:
    """Bytes for people: MiB below a GiB (a nearly full disk), else GiB with one decimal."""
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n >> 20} MiB"


def says_no_space(text: str | None) -> bool:
    return bool(text and NO_SPACE.search(text))


def free_bytes(path: str | os.PathLike | None) -> int | None:
    """Free bytes for an unprivileged writer on the filesystem of ``path`` (None: not on this host)."""
    if not path or not os.path.isdir(path):
        return None
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def reclaim_hint(usage: dict) -> str:
    """What frees an engine's disk, with what BuildKit's cache holds (``usage``: Engine.disk_usage())."""
    return ("`envkit gc --dry-run` lists the old envkit builds, stage images and leftovers it would remove "
            "(`envkit gc` removes them); `envkit gc --build-cache 24` also prunes BuildKit's cache "
            f"({size(usage.get('build_cache_bytes', 0))}) not used in a day; or move the engine's data-root to a "
            "larger disk")


def low_space(engine: Engine, need: int | None = None) -> str | None:
    """A warning before a build when the engine's disk has less free than ``need`` (``build_need`` of the lock's
    wheel sizes), or, when the lock has no sizes, than a CUDA framework image takes (``DISK_FAIL``); None: enough,
    or not measurable here. Only a warning: without sizes a small image still fits (``envkit build`` refuses
    beforehand when the sizes say it cannot: ``require_space``)."""
    try:
        root = engine.data_root()
    except Exception:  # noqa: BLE001 - not knowing is no reason to stop a build
        return None
    free = free_bytes(root)
    if free is None or free >= (need if need is not None else DISK_FAIL):
        return None
    if need is not None:
        return (f"warning: only {size(free)} free on {root}, where the engine builds; this image needs about "
                f"{size(need)} while it builds (from its lock's wheel sizes). `envkit gc --dry-run` shows what "
                "envkit can reclaim")
    return (f"warning: only {size(free)} free on {root}, where the engine builds; a CUDA framework image needs "
            f"about {DISK_FAIL // GIB} GB while it builds. `envkit gc --dry-run` shows what envkit can reclaim")


def engine_out_of_space(exc: EnvkitError, engine: Engine) -> EnvkitError:
    """``exc`` itself, or, when its text says a disk filled up, an error of its kind that says it was the
    engine's: how much its data root has free now (the failed step's files are gone by then) and what
    to reclaim; the original message and output follow in the hint."""
    if not says_no_space(f"{exc.message}\n{exc.hint or ''}"):
        return exc
    try:
        usage = engine.disk_usage()
    except Exception:  # noqa: BLE001 - the engine cannot say: the error still says what happened
        usage = {}
    root = usage.get("root")
    free = free_bytes(root)
    where = (f"{size(free)} free on {root} now" if free is not None
             else f"its data root {root} is not on this host" if root else "it did not say where")
    held = f"; its images hold {size(usage['images_bytes'])}" if "images_bytes" in usage else ""
    first = exc.message.splitlines()[0]
    action = first.split(": ", 1)[0] if ": " in first else first
    error = type(exc)(f"{action}: the engine ran out of disk space ({where}{held})",
                      hint=f"{reclaim_hint(usage)}, then run it again\n  {first}\n  {exc.hint or ''}".rstrip())
    error.location = exc.location
    error.engine_full = True
    return error


def engine_full(exc: BaseException) -> bool:
    """Whether ``exc`` is an ``engine_out_of_space`` error: the engine's disk filled up (the nightly stops
    building then, after reclaiming once when it may)."""
    return getattr(exc, "engine_full", False) is True


def host_full(what: str, where: str | os.PathLike | None, hint: str, *, writing: str | None = None,
              kind: type[EnvkitError] = EnvkitError) -> EnvkitError:
    """The error for a disk of this host that filled up: ``what`` failed, in ``where`` (or ``writing`` a file),
    with the free space there now; ``kind``: the error class of the step that failed."""
    free = free_bytes(where)
    place = f" writing {writing}" if writing else (f" in {where}" if where else "")
    return kind(
        f"{what}: this host ran out of disk space{place}"
        + (f" ({size(free)} free there now)" if free is not None else ""),
        hint=hint,
    )


def host_out_of_space(exc: OSError, what: str, *, measure: str | os.PathLike | None = None,
                      hint: str = "") -> EnvkitError | None:
    """An error for an OSError that is a full disk on this host (None when it is another error); the free
    space is measured at ``measure``, else beside the file the error names; ``hint`` goes first."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    path = exc.filename
    return host_full(what, measure or (os.path.dirname(path) if path else None),
                     hint + "free space on that disk (`df -h` shows which is full), or point --out or TMPDIR "
                            "(envkit's working directories) at a larger one, then run it again", writing=path)


__all__ = ["BUILD_MARGIN", "DISK_FAIL", "DISK_WARN", "GIB", "NO_SPACE", "PEAK_PER_WHEEL_BYTE",
           "UNPACKED_PER_WHEEL_BYTE", "build_need", "engine_full", "engine_out_of_space", "free_bytes", "host_full",
           "host_out_of_space", "low_space", "reclaim_hint", "require_space", "says_no_space", "size"]
