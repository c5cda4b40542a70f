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
  throwaway stage. A .deb is not on the package index, so it is a catalog fact (``cuda.yaml``'s
  ``debian_toolkits``, with its source; only 12.4 exists: trixie/non-free; bookworm has 11.8), which the resolver
  writes into the lock (``toolkit_for``: ``LockedImage.toolkit_deb``, the URL on the base's mirror and the sha256).

What a locked devel image holds (its group, the compiler's wheel names, the paths in the image) is
``envkit/devel.py``: render and bundles read the lock through it, never through this module.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ..catalog.files import load_catalog
from ..catalog.models import Catalog
from ..devel import GROUP, WHEELS_ONLY_FROM, compiler_names
from ..devel import major as _major
from ..errors import ResolutionError
from ..frameworks import devel_refusal, framework
from ..index.closure import Pin, compile_closure
from ..index.wheel_facts import runtime_package
from ..lock import BaseImage, DebPin, LockedImage, Package, sealed

DEBIAN_MIRROR = "http://deb.debian.org/debian"  # where a toolkit .deb is fetched from when the base names no mirror

Closure = Callable[..., list[Pin]]


def check_cuda(name: str, cuda_mm: str | None, requirement: str | None = None, *,
               toolkits: Collection[str]) -> str:
    """``cuda_mm``, once known to be a CUDA release envkit has a compiler for (``toolkits``: the CUDA 12 releases
    the catalog has Debian's toolkit of); else refused with the way out (``requirement``: the image's framework
    requirement, whose extra may hold it to CUDA 12)."""
    if not cuda_mm:
        raise ResolutionError(f"image {name!r} has no CUDA runtime, so a devel flavour has no nvcc to match",
                              hint="use flavour: runtime for CPU-only images")
    if _major(cuda_mm) < WHEELS_ONLY_FROM and cuda_mm not in toolkits:
        known = ", ".join([*toolkits, f"{WHEELS_ONLY_FROM}.x"])
        raise ResolutionError(
            f"envkit knows no CUDA compiler for CUDA {cuda_mm} (image {name!r}): the CUDA 12 nvcc wheels "
            f"hold no nvcc driver, and Debian has a toolkit only for {', '.join(toolkits)}; "
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
            f"{cuda_mm} .deb (the catalog's debian_toolkits, pinned in the lock as toolkit_deb)")


def toolkit_for(catalog: Catalog, name: str, cuda_mm: str | None, base: BaseImage,
                requirement: str | None = None) -> DebPin | None:
    """What a devel image of CUDA ``cuda_mm`` on ``base`` locks of Debian's toolkit: the .deb's URL on the base's
    mirror (else deb.debian.org) and its sha256, from the catalog (CUDA 12); None for CUDA 13 and later (wholly
    wheels). A CUDA release envkit has no compiler for is refused (``check_cuda``)."""
    cuda = check_cuda(name, cuda_mm, requirement, toolkits=tuple(catalog.debian_toolkits()))
    deb = catalog.debian_toolkits().get(cuda)
    if deb is None:
        return None
    mirror = ((base.bootstrap or {}).get("mirror") or DEBIAN_MIRROR).rstrip("/")
    return DebPin(url=f"{mirror}/{deb.path}", sha256=deb.sha256)


def check_framework(name: str, framework_name: str) -> None:
    """Refuse, at resolve, a framework envkit makes no devel flavour of (render refuses it too)."""
    fw = framework(framework_name)
    if not fw.devel:
        chosen = "" if fw.devel_refusal[0] else f" ({fw.title} is chosen)"
        raise ResolutionError(devel_refusal(name, fw) + chosen, hint=fw.devel_refusal[1])


def lock_packages(name: str, cuda_mm: str | None, locked: Sequence[Pin], *, requirement: str | None = None,
                  python: str, glibc: str,
                  index_url: str, extra_index_url: str | None = None,
                  closure: Closure = compile_closure, toolkits: Collection[str]) -> list[Package]:
    """The devel group: the compiler's closure, constrained by ``locked``, less what ``locked`` holds
    (``toolkits``: ``check_cuda``'s)."""
    cuda = check_cuda(name, cuda_mm, requirement, toolkits=toolkits)
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


def as_devel(image: LockedImage, *, closure: Closure = compile_closure, catalog: Catalog | None = None) -> LockedImage:
    """A locked runtime ``image`` as its devel flavour: the same packages plus the devel group, and (CUDA 12) the
    toolkit .deb, resealed (what the resolver locks for ``flavour: devel``; the framework's index only; ``catalog``:
    the one in use unless given)."""
    catalog = catalog or load_catalog()
    base = tuple(p for p in image.packages if p.group != GROUP)
    added = lock_packages(image.name, image.cuda_major_minor, [Pin(p.name, p.version, p.hashes) for p in base],
                          python=image.python, glibc=image.glibc, index_url=image.index_url, closure=closure,
                          toolkits=tuple(catalog.debian_toolkits()))
    packages = tuple(sorted((*base, *added), key=lambda x: (x.group, x.name)))
    return sealed(image.model_copy(update={"flavour": "devel", "packages": packages,
                                           "toolkit_deb": toolkit_for(catalog, image.name, image.cuda_major_minor,
                                                                      image.base)}))
