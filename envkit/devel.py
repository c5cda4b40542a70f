"""The devel flavour as a locked image holds it: what every stage reads of a devel image's lock.

The resolver (``resolve/devel.py``) decides where the CUDA compiler comes from and writes it into the lock: the
compiler's wheels as the lock's ``devel`` package group, and for CUDA 12 Debian's toolkit ``.deb`` (its URL and
sha256: ``LockedImage.toolkit_deb``, from the catalog's ``debian_toolkits``). Render and the bundle read those facts
from the lock alone (this module), never from ``resolve/``: a lock carries every fact its build needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from .errors import BuildError, ResolutionError
from .frameworks import require_devel
from .lock import LockedImage, Package
from .support.download import fetch_pinned

GROUP: Literal["devel"] = "devel"  # the lock's package group of the compiler's wheels
APT = ("g++", "python3-dev", "ninja-build")  # a C++ toolchain for extensions, and the Python headers
CUDA_HOME = "/opt/cuda"  # symlinks into the nvidia-* wheels (and the .deb's programs), in a toolkit's layout
PREFIX = "/opt/devel"  # the compiler wheels' install prefix in the build; merged into the venv at runtime
TOOLS = "/opt/cuda-tools"  # CUDA 12: the .deb's programs, arranged in the nvcc-tools stage
WHEELS_ONLY_FROM = 13  # the first CUDA major whose nvcc wheel ships the compiler's programs


def major(cuda_mm: str) -> int:
    return int(cuda_mm.split(".")[0])


def compiler_names(cuda_mm: str) -> tuple[str, ...]:
    """The wheels a devel image of CUDA ``cuda_mm`` must lock (in its devel group, or already in the
    framework closure): the compiler and its headers; the CUDA runtime is the framework's."""
    if major(cuda_mm) < WHEELS_ONLY_FROM:
        return ("nvidia-cuda-nvcc-cu12", "nvidia-cuda-cccl-cu12")
    return ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl")


def packages(image: LockedImage) -> tuple[Package, ...]:
    """The compiler's wheels ``image`` locks: its devel group, and those its framework closure already holds
    (jax[cuda13] locks the whole CUDA 13 compiler for ptxas, so its devel group is empty). A devel image
    whose lock lacks any of them, or (CUDA 12) the toolkit .deb, is refused: an older envkit locked it."""
    require_devel(image)
    cuda_mm = image.cuda_major_minor
    if not cuda_mm:
        raise ResolutionError(f"image {image.name!r} has no CUDA runtime, so a devel flavour has no nvcc to match",
                              hint="use flavour: runtime for CPU-only images")
    if major(cuda_mm) < WHEELS_ONLY_FROM and image.toolkit_deb is None:
        raise ResolutionError(
            f"image {image.name!r} is flavour devel, but its lock names no CUDA compiler for CUDA {cuda_mm}: the "
            "CUDA 12 nvcc wheels hold no nvcc driver, and the lock pins no Debian toolkit .deb (locked by an older "
            "envkit, or a release Debian has none of)",
            hint="re-resolve the spec with this envkit (`envkit resolve SPEC`): it locks the .deb, or refuses the CUDA "
                 "release with the way out")
    names = compiler_names(cuda_mm)
    found = tuple(p for p in image.packages if p.group == GROUP or p.name in names)
    missing = [n for n in names if n not in {p.name for p in found}]
    if missing:
        raise ResolutionError(f"image {image.name!r} is flavour devel, but its lock has no devel packages "
                              f"(the CUDA compiler's wheels: {', '.join(missing)} missing)",
                              hint="re-resolve the spec with this envkit (`envkit resolve SPEC`)")
    return found


def wheels_to_add(image: LockedImage) -> tuple[Package, ...]:
    """What the devel stage installs with pip: the devel group (empty when the framework closure holds
    the whole compiler)."""
    packages(image)
    return tuple(p for p in image.packages if p.group == GROUP)


def fetch_toolkit_deb(image: LockedImage, dest: Path) -> Path:
    """Download ``image``'s toolkit .deb (CUDA 12: the lock's ``toolkit_deb``) into ``dest`` (a bundle's
    debs/nvcc/), checked against the sha256 the lock pins."""
    deb = image.toolkit_deb
    if deb is None:
        raise BuildError(f"image {image.name!r} takes no toolkit .deb (CUDA {image.cuda_major_minor})")
    return fetch_pinned(deb.url, deb.sha256, dest / deb.url.rsplit("/", 1)[1], hint="is the Debian mirror reachable?")
