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

from ..errors import EnvkitError

if TYPE_CHECKING:
    from .protocol import Engine

NO_SPACE = re.compile(r"no space left on device|\[Errno 28\]|disk quota exceeded", re.IGNORECASE)
GIB = 1 << 30
DISK_FAIL, DISK_WARN = 10 * GIB, 30 * GIB  # a CUDA framework image is 5-7 GB, and its build needs about as much again


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


def low_space(engine: Engine) -> str | None:
    """A warning before a build when the engine's disk has too little free for a CUDA framework image
    (None: enough, or not measurable here). Only a warning: a small image still fits."""
    try:
        root = engine.data_root()
    except Exception:  # noqa: BLE001 - not knowing is no reason to stop a build
        return None
    free = free_bytes(root)
    if free is None or free >= DISK_FAIL:
        return None
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


__all__ = ["DISK_FAIL", "DISK_WARN", "GIB", "NO_SPACE", "engine_full", "engine_out_of_space", "free_bytes", "host_full",
           "host_out_of_space",
           "low_space", "reclaim_hint", "says_no_space", "size"]
