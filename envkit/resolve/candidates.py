"""Framework builds the resolver may choose from, enumerated from the catalog.

Each framework knows its own shape: PyTorch publishes one build per CUDA variant and
pins the CUDA libraries exactly; JAX picks a CUDA major through an extra (`jax[cuda13]`)
and takes library ranges; TensorFlow has one `and-cuda` build per release. Candidates
come newest version first and, within a version, the index's default build first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from packaging.requirements import Requirement
from packaging.version import Version

from ..catalog.models import Catalog, PyRange, vtuple


@dataclass(frozen=True)
class Candidate:
    framework: str
    version: str
    variant: str  # cu124 | cuda13 | and-cuda
    cuda: str  # the CUDA major.minor the build targets
    cudnn: str | None  # exact (torch) or a range/series (jax, tensorflow)
    nccl: str | None
    arches: tuple[str, ...]  # compiled SASS/PTX; empty when coverage is by min_cc
    min_cc: str | None
    python: PyRange
    default: bool  # the package index's default build
    index: str | None  # None: the spec's index; else the variant's own index
    requirement: str  # what the closure is asked to install
    exact_pins: bool  # the wheel pins its CUDA libraries exactly

    @property
    def label(self) -> str:
        return f"{self.framework} {self.version} ({self.variant})"


def candidates(req: Requirement, catalog: Catalog, *, ignore_version: bool = False,
               variant_index: str | None = None) -> list[Candidate]:
    """``variant_index``: the spec's ``build.variant_index_url`` (a URL with ``{variant}``), the mirror that serves
    PyTorch's non-default builds in place of the catalog's ``variant_index``; the choice itself is the same."""
    name = req.name.lower()
    admits = (lambda v: True) if ignore_version else (lambda v: req.specifier.contains(Version(v), prereleases=False))
    if name not in BUILDS:
        raise ValueError(f"unsupported framework {name}")
    return BUILDS[name](catalog, admits, req.extras, variant_index)


def variant_index_for(catalog: Catalog, tag: str, variant_index: str | None = None) -> str:
    """The index of the torch variant ``tag``: the spec's mirror (``variant_index``, its ``{variant}`` filled in),
    else the catalog's (download.pytorch.org/whl/TAG)."""
    return variant_index.replace("{variant}", tag) if variant_index else catalog.torch_variant_index(tag)


def _torch(catalog: Catalog, admits: Callable[[str], bool], extras: set[str], variant_index: str | None
           ) -> list[Candidate]:
    out = []
    for release in sorted(catalog.torch_releases(), key=lambda r: vtuple(r.version), reverse=True):
        variants = sorted(
            release.variants, key=lambda v: (v.tag != release.index_default, [-x for x in vtuple(v.cuda)])
        )
        for patch in sorted(release.patches, key=Version, reverse=True):
            if not admits(patch):
                continue
            for v in variants:
                default = v.tag == release.index_default
                out.append(Candidate(
                    framework="torch", version=patch, variant=v.tag, cuda=v.cuda, cudnn=v.cudnn, nccl=v.nccl,
                    arches=v.arches, min_cc=None, python=release.python, default=default,
                    index=None if default else variant_index_for(catalog, v.tag, variant_index),
                    requirement=f"torch=={patch}" if default else f"torch=={patch}+{v.tag}", exact_pins=True))
    return out


def _jax(catalog: Catalog, admits: Callable[[str], bool], extras: set[str], variant_index: str | None
         ) -> list[Candidate]:
    jax = catalog.jax
    chosen = [e for e in jax.extras if not extras or e.extra in extras]
    out = []
    for version in sorted(jax.versions, key=Version, reverse=True):
        if not admits(version):
            continue
        for i, extra in enumerate(chosen):
            if Version(version) < Version(extra.since):
                continue
            out.append(Candidate(
                framework="jax", version=version, variant=extra.extra, cuda=extra.cuda_for(version),
                cudnn=extra.cudnn, nccl=extra.nccl, arches=(), min_cc=extra.min_cc,
                python=jax.python_range(version), default=i == 0, index=None,
                requirement=f"jax[{extra.extra}]=={version}", exact_pins=False))
    return out


def _tensorflow(catalog: Catalog, admits: Callable[[str], bool], extras: set[str], variant_index: str | None
                ) -> list[Candidate]:
    tf = catalog.tensorflow
    out = []
    for release in sorted(tf.releases, key=lambda r: vtuple(r.version), reverse=True):
        for patch in sorted(release.patches, key=Version, reverse=True):
            if admits(patch):
                out.append(Candidate(
                    framework="tensorflow", version=patch, variant=tf.extra, cuda=release.cuda,
                    cudnn=release.cudnn, nccl=None, arches=tf.arches_for(release), min_cc=None, python=release.python,
                    default=True, index=None, requirement=f"tensorflow[{tf.extra}]=={patch}", exact_pins=False))
    return out


Builds = Callable[[Catalog, Callable[[str], bool], set[str], "str | None"], list[Candidate]]
# each framework's builds from its catalog file (its extras; PyTorch's non-default variants from variant_index),
# one row per framework of envkit.frameworks.FRAMEWORKS (tests/unit/test_frameworks.py holds them in step)
BUILDS: dict[str, Builds] = {"torch": _torch, "jax": _jax, "tensorflow": _tensorflow}

