"""The devel flavour's CUDA compiler: what gives an image nvcc of its locked CUDA release.

A devel image is its runtime image plus a C++ toolchain and the CUDA compiler (docs/images.md,
"The devel flavour"). The compiler's Python packages are locked by the resolver, as the lock's
``devel`` package group: ``lock_packages`` compiles ``requirements`` constrained by everything the
image already locks (the framework closure and the extras), so the compiler's wheels agree with the
CUDA runtime the framework installs, and keeps what is new. Where they come from depends on the
CUDA major (looked up on the index on 2026-12-03):

- **CUDA 13 and later: the index alone.** Every CUDA 13 wheel installs into one tree,
  ``site-packages/nvidia/cu13/`` (bin/, include/, lib/, nvvm/), which is a toolkit layout nvcc's own
  ``nvcc.profile`` accepts: ``nvidia-cuda-nvcc`` (nvcc, cudafe++, ptxas, fatbinary, nvlink, bin2c,
  crt/*.stub; it requires, unversioned, ``nvidia-nvvm`` (cicc, libnvvm, libdevice),
  ``nvidia-cuda-crt`` (include/crt/) and ``nvidia-cuda-runtime`` (cuda_runtime.h and the other
  runtime headers, libcudart.so.13, libcudart_static.a, libcudadevrt.a)), and ``nvidia-cuda-cccl``
  (include/cccl/: libcu++, thrust, cub). Each is pinned to the lock's CUDA major.minor (the nvcc
  wheel's own requirements carry no versions); when the framework closure holds NVIDIA's
  ``cuda-toolkit`` metapackage, its ``nvcc`` and ``cccl`` extras are asked for too, so NVIDIA's pins
  of one CUDA update decide.
- **CUDA 12: the index, and Debian.** The ``nvidia-cuda-nvcc-cu12`` wheels hold only ptxas, libnvvm,
  libdevice and crt/ (no nvcc driver, cicc, cudafe++, fatbinary or nvlink), so the programs come from
  Debian's ``nvidia-cuda-toolkit`` .deb of the same CUDA release, pinned by sha256 and unpacked in a
  throwaway stage. A .deb is not on the package index, so it stays a table fact here
  (``DEBIAN_TOOLKITS``); only 12.4 exists (trixie/non-free; bookworm has 11.8).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..index.closure import Pin, compile_closure
from ..errors import BuildError, ResolutionError
from ..support.download import fetch_pinned
from ..lock import LockedImage, Package, sealed
from ..index.wheel_facts import runtime_package
from ..frameworks import devel_refusal, framework, require_devel

GROUP: Literal["devel"] = "devel"  # the lock's package group of the compiler's wheels
APT = ("g++", "python3-dev", "ninja-build")  # a C++ toolchain for extensions, and the Python headers
CUDA_HOME = "/opt/cuda"  # symlinks into the nvidia-* wheels (and the .deb's programs), in a toolkit's layout
PREFIX = "/opt/devel"  # the compiler wheels' install prefix in the build; merged into the venv at runtime
TOOLS = "/opt/cuda-tools"  # CUDA 12: the .deb's programs, arranged in the nvcc-tools stage
DEBIAN_MIRROR = "http://deb.debian.org/debian"
WHEELS_ONLY_FROM = 13  # the first CUDA major whose nvcc wheel ships the compiler's programs


@dataclass(frozen=True)
class DebianToolkit:
    """Debian's nvidia-cuda-toolkit of one CUDA release: the compiler's programs for CUDA 12."""
    pool_path: str  # under the Debian mirror
    sha256: str


# Looked up on 2026-12-02 at deb.debian.org: trixie/non-free is the only suite with a CUDA 12 toolkit.
DEBIAN_TOOLKITS: dict[str, DebianToolkit] = {
    "12.4": DebianToolkit(
        pool_path="pool/non-free/n/nvidia-cuda-toolkit/nvidia-cuda-toolkit_12.4.131~12.4.1-2_amd64.deb",
        sha256="cd5fe85aee38d108b315f408a688641478f2402622a10c677478eb7a6c4e5319"),
}

Closure = Callable[..., list[Pin]]


def _major(cuda_mm: str) -> int:
    return int(cuda_mm.split(".")[0])


def check_cuda(name: str, cuda_mm: str | None, requirement: str | None = None) -> str:
    """``cuda_mm``, once known to be a CUDA release envkit has a compiler for; else refused with the way out
    (``requirement``: the image's framework requirement, whose extra may hold it to CUDA 12)."""
    if not cuda_mm:
        raise ResolutionError(f"image {name!r} has no CUDA runtime, so a devel flavour has no nvcc to match",
                              hint="use flavour: runtime for CPU-only images")
    if _major(cuda_mm) < WHEELS_ONLY_FROM and cuda_mm not in DEBIAN_TOOLKITS:
        known = ", ".join([*DEBIAN_TOOLKITS, f"{WHEELS_ONLY_FROM}.x"])
        raise ResolutionError(
            f"envkit knows no CUDA compiler for CUDA {cuda_mm} (image {name!r}): the CUDA 12 nvcc wheels "
            f"hold no nvcc driver, and Debian has a toolkit only for {', '.join(DEBIAN_TOOLKITS)}; "
            f"the devel flavour needs CUDA {known}",
            hint=_cuda12_extra_hint(requirement) or "pick a framework build with one of those CUDA versions (a "
                 "`cuda:` constraint, e.g. \">=13\"), or use flavour: runtime")
    return cuda_mm


def _cuda12_extra_hint(requirement: str | None) -> str | None:
    """The way out for a framework whose extra installs CUDA 12 wheels only (``jax[cuda12]``): no ``cuda:``
    constraint can take it to CUDA 13."""
    from packaging.requirements import Requirement

    req = Requirement(requirement) if requirement else None
    if req is None or "cuda12" not in req.extras:
        return None
    other = f"{req.name}[{','.join(sorted((req.extras - {'cuda12'}) | {'cuda13'}))}]{req.specifier}"
    return (f"{req.name}[cuda12] installs CUDA 12 wheels only: for flavour: devel use framework: {other!r} (its "
            "closure holds the CUDA 13 compiler), or use flavour: runtime")


def compiler_names(cuda_mm: str) -> tuple[str, ...]:
    """The wheels a devel image of CUDA ``cuda_mm`` must lock (in its devel group, or already in the
    framework closure): the compiler and its headers; the CUDA runtime is the framework's."""
    if _major(cuda_mm) < WHEELS_ONLY_FROM:
        return ("nvidia-cuda-nvcc-cu12", "nvidia-cuda-cccl-cu12")
    return ("nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvvm", "nvidia-cuda-cccl")


def requirements(cuda_mm: str, locked: Sequence[Pin]) -> list[str]:
    """What the compiler's closure is compiled from, for CUDA ``cuda_mm`` (checked by ``check_cuda``).

    Each wheel is asked for in the locked CUDA series, except one the image already locks: that one is
    asked for by name alone, so the framework closure's pin decides (jax[cuda13] locks nvcc for ptxas, and
    a cccl whose versions follow CCCL's own numbering, e.g. 13.3.5.0.6 beside CUDA 13.5)."""
    have = {p.name for p in locked}
    series = f"=={cuda_mm}.*"
    names = compiler_names(cuda_mm)
    if _major(cuda_mm) >= WHEELS_ONLY_FROM:
        names = (*names[:3], runtime_package(_major(cuda_mm)), *names[3:])
    reqs = [n if n in have else f"{n}{series}" for n in names]
    if _major(cuda_mm) >= WHEELS_ONLY_FROM and "cuda-toolkit" in have:  # NVIDIA's pins of the same CUDA update
        reqs.insert(0, "cuda-toolkit[nvcc,cccl]")
    return reqs


def source(cuda_mm: str) -> str:
    """Where the compiler of CUDA ``cuda_mm`` comes from, in words (the lock's decision)."""
    if _major(cuda_mm) >= WHEELS_ONLY_FROM:
        return f"the CUDA {cuda_mm} compiler wheels from the index, constrained by the image's closure"
    return (f"nvcc's headers and CCCL from the index; its programs from Debian's nvidia-cuda-toolkit "
            f"{cuda_mm} .deb (envkit.resolve.devel.DEBIAN_TOOLKITS)")


def check_framework(name: str, framework_name: str) -> None:
    """Refuse, at resolve, a framework envkit makes no devel flavour of (render refuses it too)."""
    fw = framework(framework_name)
    if not fw.devel:
        chosen = "" if fw.devel_refusal[0] else f" ({fw.title} is chosen)"
        raise ResolutionError(devel_refusal(name, fw) + chosen, hint=fw.devel_refusal[1])


def lock_packages(name: str, cuda_mm: str | None, locked: Sequence[Pin], *, requirement: str | None = None,
                  python: str, glibc: str,
                  index_url: str, extra_index_url: str | None = None,
                  closure: Closure = compile_closure) -> list[Package]:
    """The devel group: the compiler's closure, constrained by ``locked``, less what ``locked`` holds."""
    cuda = check_cuda(name, cuda_mm, requirement)
    pins = closure(requirements(cuda, locked), python=python, glibc=glibc, index_url=index_url,
                   extra_index_url=extra_index_url, constraints=list(locked))
    nvcc = next((p for p in pins if p.name == compiler_names(cuda)[0]), None)
    if nvcc is not None and not nvcc.version.startswith(f"{cuda}."):
        raise ResolutionError(
            f"image {name!r} locks the CUDA {cuda_mm} runtime, but its closure pins {nvcc.name} {nvcc.version}: "
            "nvcc must be of the runtime's CUDA release", hint="constrain the CUDA runtime or the framework so the "
            "two agree (a `cuda:` constraint), or use flavour: runtime")
    have = {p.name for p in locked}
    return [Package(name=p.name, version=p.version, hashes=p.hashes, group=GROUP)
            for p in pins if p.name not in have]


def as_devel(image: LockedImage, *, closure: Closure = compile_closure) -> LockedImage:
    """A locked runtime ``image`` as its devel flavour: the same packages plus the devel group, resealed
    (what the resolver locks for ``flavour: devel``; the framework's index only)."""
    base = tuple(p for p in image.packages if p.group != GROUP)
    added = lock_packages(image.name, image.cuda_major_minor, [Pin(p.name, p.version, p.hashes) for p in base],
                          python=image.python, glibc=image.glibc, index_url=image.index_url, closure=closure)
    packages = tuple(sorted((*base, *added), key=lambda x: (x.group, x.name)))
    return sealed(image.model_copy(update={"flavour": "devel", "packages": packages}))


# --- what render and bundle read back from a locked devel image ------------------------------

def packages(image: LockedImage) -> tuple[Package, ...]:
    """The compiler's wheels ``image`` locks: its devel group, and those its framework closure already holds
    (jax[cuda13] locks the whole CUDA 13 compiler for ptxas, so its devel group is empty). A devel image
    whose lock lacks any of them (locked by an older envkit) is refused."""
    require_devel(image)
    names = compiler_names(check_cuda(image.name, image.cuda_major_minor))
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


def toolkit_deb(image: LockedImage) -> DebianToolkit | None:
    """Debian's toolkit .deb ``image`` takes the compiler's programs from (CUDA 12), else None."""
    return DEBIAN_TOOLKITS.get(check_cuda(image.name, image.cuda_major_minor))


def toolkit_deb_url(image: LockedImage) -> str:
    """Where ``image``'s toolkit .deb lies (the base's mirror, else deb.debian.org); "" when it has none."""
    deb = toolkit_deb(image)
    if deb is None:
        return ""
    mirror = ((image.base.bootstrap or {}).get("mirror") or DEBIAN_MIRROR).rstrip("/")
    return f"{mirror}/{deb.pool_path}"


def fetch_toolkit_deb(image: LockedImage, dest: Path) -> Path:
    """Download ``image``'s toolkit .deb (CUDA 12: ``DEBIAN_TOOLKITS``) into ``dest`` (a bundle's debs/nvcc/),
    checked against its pinned sha256."""
    deb = toolkit_deb(image)
    if deb is None:
        raise BuildError(f"image {image.name!r} takes no toolkit .deb (CUDA {image.cuda_major_minor})")
    url = toolkit_deb_url(image)
    return fetch_pinned(url, deb.sha256, dest / url.rsplit("/", 1)[1], hint="is the Debian mirror reachable?")
