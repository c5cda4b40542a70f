"""What a framework's wheels say about the CUDA libraries they install, read from their metadata (one owner
of the NVIDIA distributions' names).

The CUDA runtime, cuDNN and NCCL come to an image as ``nvidia-*`` wheels: ``nvidia-cuda-runtime-cu12`` (CUDA 12)
or ``nvidia-cuda-runtime`` (CUDA 13 on), ``nvidia-cudnn-cuNN``, ``nvidia-nccl-cuNN``. A torch wheel pins them
exactly in its ``Requires-Dist`` (``bundled_pins``); JAX's plugins and TensorFlow's ``and-cuda`` extra give ranges,
which a closure then pins (``library_versions``). The catalog's refresh reads the same names (``library_of``).
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

LIBRARIES: dict[str, re.Pattern] = {  # the lock's name of each library -> its distributions (canonical names)
    "cuda": re.compile(r"nvidia-cuda-runtime(-cu\d+)?"),
    "cudnn": re.compile(r"nvidia-cudnn-cu\d+"),
    "nccl": re.compile(r"nvidia-nccl-cu\d+"),
}
CUDA_WHEELS = re.compile(r"nvidia-[a-z0-9-]+")  # every NVIDIA CUDA library wheel (an image's CUDA layer)
TOOLKIT = "cuda-toolkit"  # NVIDIA's metapackage, pinning every CUDA wheel of one update (torch 2.10+ requires it)
LINUX = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux"}


def library_of(name: str) -> str | None:
    """'cuda', 'cudnn' or 'nccl' for a distribution of that library (a canonical name), else None."""
    return next((lib for lib, pattern in LIBRARIES.items() if pattern.fullmatch(name)), None)


def is_cuda_wheel(name: str) -> bool:
    """Whether a distribution (a canonical name) is one of the CUDA libraries' wheels or their metapackage: what
    changes with the CUDA release, not the framework (images of a team share the layer they are installed in)."""
    return bool(CUDA_WHEELS.fullmatch(name)) or name == TOOLKIT


def runtime_package(major: int) -> str:
    """The CUDA runtime's distribution for CUDA ``major``: one per major up to 12, one name from 13 on."""
    return "nvidia-cuda-runtime" if major >= 13 else f"nvidia-cuda-runtime-cu{major}"


def bundled_pins(requirements: list[Requirement], python: str) -> dict[str, str]:
    """What a framework wheel pins exactly: its CUDA runtime, cuDNN and NCCL."""
    env = {**LINUX, "python_version": python, "python_full_version": python + ".0", "extra": ""}
    out: dict[str, str] = {}
    for r in requirements:
        if r.marker and not r.marker.evaluate(env):
            continue
        pins = [s.version for s in r.specifier if s.operator == "=="]
        if not pins:
            continue
        name = canonicalize_name(r.name)
        library = "cuda" if name == TOOLKIT else library_of(name)
        if library == "cuda":
            out.setdefault("cuda", pins[0])
        elif library is not None:
            out[library] = pins[0]
    return out


def library_versions(pins: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str | None]:
    """The CUDA runtime, cuDNN and NCCL versions among ``pins`` (canonical name -> version), the first of each;
    None for a library none of them is."""
    items = pins.items() if isinstance(pins, Mapping) else pins
    found: dict[str, str | None] = dict.fromkeys(LIBRARIES)
    for name, version in items:
        library = library_of(name)
        if library is not None and found[library] is None:
            found[library] = version
    return found
