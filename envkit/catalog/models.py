"""The compatibility catalog: facts as data, read through small questions.

Every entry names its sources (keys of ``data/sources.yaml``); loading (``files.load_catalog``) validates that
each key exists. Callers never index the raw YAML: they ask a ``Catalog``. This module holds the models of the
files' entries, the grammars of the values the resolver computes with, and ``Catalog``, the questions.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Annotated, Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, Field, field_validator

from ..errors import CatalogError
from ..support.models import Frozen
from .binaries import Binaries
from .companions import Companions
from .exclusions import Exclusion

Verified = Literal[True, False, "partial"]


# --- the grammars of the values the code computes with (vtuple, Version, rules.covers) -----------------
def _grammar(pattern: str, what: str, example: str) -> Any:
    rx = re.compile(pattern)

    def check(value: str) -> str:
        if not rx.fullmatch(value):
            raise ValueError(f"{value!r} is not {what}; write e.g. {example}")
        return value

    return AfterValidator(check)


def _release(value: str) -> str:
    try:
        version = Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a version; write a release as the index spells it, "
                         f"e.g. \"2.5.1\" or \"2.15.0.post1\"") from None
    if version.local:
        raise ValueError(f"{value!r} is a local version (a build variant); write {version.public!r}")
    return value


_ARCH_ITEM = re.compile(r"[0-9]+\.[0-9][af]?(\+PTX)?")


def _arch_list(value: str) -> str:
    """TORCH_CUDA_ARCH_LIST notation, as ``arches_of`` and ``wheel_arches.to_arch_list`` spell it."""
    items = value.split(";")
    for item in items:
        if not _ARCH_ITEM.fullmatch(item):
            raise ValueError(f"arch list {value!r} holds {item!r}, which is not a compute capability MAJOR.MINOR "
                             f"(one minor digit, optionally a or f, optionally +PTX); write items separated by ';', "
                             f"e.g. \"7.5;8.0;9.0a;12.0+PTX\"")
    twice = sorted({i for i in items if items.count(i) > 1})
    if twice:
        raise ValueError(f"arch list {value!r} names {twice[0]!r} twice; name each target once")
    return value


# numbers and dots, as ``vtuple`` reads them: driver versions, CUDA versions, Python versions, glibc
Dotted = Annotated[str, _grammar(r"[0-9]+(\.[0-9]+)*", "a version of numbers and dots",
                                 '"12.4", "3.11" or "550.54.15"')]
# a compute capability as ``rules.covers`` reads it: MAJOR.MINOR, one minor digit
Cc = Annotated[str, _grammar(r"[0-9]+\.[0-9]", "a compute capability MAJOR.MINOR (one minor digit)",
                             '"8.6" or "12.0"')]
Series = Annotated[str, _grammar(r"[0-9]+\.[0-9]+", "a release series MAJOR.MINOR", '"2.5"')]
Release = Annotated[str, AfterValidator(_release)]
ArchList = Annotated[str, AfterValidator(_arch_list)]
# a compiled target as a build reports it ('sm_90', 'sm_90a', 'sm_100f', 'compute_90'), as wheel_arches reads them
Flag = Annotated[str, _grammar(r"(sm|compute)_[0-9]{2,3}[af]?", "a compiled target sm_XY or compute_XY "
                               "(optionally with a or f)", "sm_90, sm_90a or compute_120")]


class Entry(Frozen):
    verified: Verified
    sources: tuple[str, ...] = Field(min_length=1)
    note: str | None = None


class MinorCompat(Entry):
    major: int
    linux_min: Dotted


class Toolkit(Entry):
    version: Dotted
    linux_min: Dotted | None


class DebianToolkit(Entry):  # Debian's nvidia-cuda-toolkit .deb of one CUDA release: devel's CUDA 12 programs
    cuda: Series
    path: str = Field(pattern=r"^pool/[A-Za-z0-9+~._/-]+\.deb$")  # under a Debian mirror
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Arch(Entry):
    cc: Cc
    family: str
    models: tuple[str, ...] = Field(min_length=1)
    first_cuda: Dotted
    last_cuda_major: int | None

    @property
    def sm(self) -> str:
        return "sm_" + self.cc.replace(".", "")


class OsBase(Entry):
    distro: str
    suite: str
    python: Dotted
    glibc: Dotted


class TorchVariant(Frozen):
    tag: str
    cuda: Dotted
    status: str
    cudnn: str | None
    nccl: str | None
    arch_list: ArchList

    @property
    def arches(self) -> tuple[str, ...]:
        """e.g. ('sm_75', ..., 'sm_120', 'compute_120') for '7.5;...;12.0+PTX'."""
        return arches_of(self.arch_list)


class PyRange(Frozen):
    min: Dotted
    max: Dotted

    def admits(self, python: str) -> bool:
        return Version(self.min) <= Version(python) <= Version(self.max)


class TorchRelease(Entry):
    version: Series
    patches: tuple[Release, ...] = Field(min_length=1)
    python: PyRange
    index_default: str
    variants: tuple[TorchVariant, ...] = Field(min_length=1)

    def variant(self, tag: str) -> TorchVariant | None:
        return next((v for v in self.variants if v.tag == tag), None)


class Since(Frozen):
    since: Release
    python: Dotted | None = None
    cuda: Dotted | None = None


class JaxExtra(Frozen):
    extra: str
    since: Release
    min_cc: Cc
    built_with: tuple[Since, ...] = Field(min_length=1)
    cudnn: str
    nccl: str

    def cuda_for(self, version: str) -> str:
        """The CUDA toolkit this extra's plugin was built with at ``version``."""
        rows = [r for r in self.built_with if Version(r.since) <= Version(version)]
        cuda = rows[-1].cuda if rows else self.built_with[0].cuda
        if cuda is None:
            raise CatalogError(f"jax.yaml: the {self.extra} extra's built_with row for {version} gives no cuda")
        return cuda


class Jax(Entry):
    versions: tuple[Release, ...] = Field(min_length=1)
    python_min: tuple[Since, ...]
    python_max: Dotted
    extras: tuple[JaxExtra, ...]

    def python_range(self, version: str) -> PyRange:
        rows = [r for r in self.python_min if Version(r.since) <= Version(version)]
        return PyRange(min=(rows[-1].python if rows else None) or "3.9", max=self.python_max)


class TfRelease(Frozen):
    version: Series
    patches: tuple[Release, ...] = Field(min_length=1)
    python: PyRange
    cuda: Dotted
    cudnn: str
    # the compiled targets as the release's own build reports them (tf.sysconfig.get_build_info()
    # ["cuda_compute_capabilities"]: a PTX-only target has no sm_ twin); None: the file's arch_list
    arches: tuple[Flag, ...] | None = Field(default=None, min_length=1)


class Tensorflow(Entry):
    extra: str
    min_driver: Dotted
    arch_list: ArchList
    arch_list_verified: Verified
    releases: tuple[TfRelease, ...]

    def arches_for(self, release: TfRelease) -> tuple[str, ...]:
        """What ``release`` was compiled for: its own reading where the catalog has one."""
        return release.arches if release.arches is not None else arches_of(self.arch_list)


class CatalogData(Frozen):
    """Every catalog file's top-level keys, merged (``files.load_catalog``), validated together."""

    sources: dict[str, str]
    minor_version_compat: tuple[MinorCompat, ...]
    toolkits: tuple[Toolkit, ...]
    architectures: tuple[Arch, ...]
    bases: tuple[OsBase, ...]
    releases: tuple[TorchRelease, ...]
    variant_index: str
    jax: Jax
    tensorflow: Tensorflow
    debian_toolkits: tuple[DebianToolkit, ...] = ()  # cuda.yaml (a team's copy without it: no CUDA 12 devel images)

    @field_validator("variant_index")
    @classmethod
    def _one_tag_field(cls, value: str) -> str:
        try:
            ok = "{tag}" in value and value.format(tag="cu124") is not None
        except (KeyError, IndexError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{value!r} is not a URL pattern with one {{tag}} field (and no other braces); write "
                             f"e.g. \"https://download.pytorch.org/whl/{{tag}}\"")
        return value


def arches_of(arch_list: str) -> tuple[str, ...]:
    """'7.5;8.0;12.0+PTX' -> ('sm_75', 'sm_80', 'sm_120', 'compute_120')."""
    out: list[str] = []
    for item in arch_list.split(";"):
        cc, ptx = item.removesuffix("+PTX"), item.endswith("+PTX")
        out.append("sm_" + cc.replace(".", ""))
        if ptx:
            out.append("compute_" + cc.replace(".", ""))
    return tuple(out)


def vtuple(text: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15); leading zeros are insignificant."""
    return tuple(int(p) for p in text.split("."))


class Catalog:
    """Immutable, validated compatibility facts."""

    def __init__(self, files: CatalogData, digest: str, exclusions: tuple[Exclusion, ...] = (),
                 companions: Companions | None = None, binaries: Binaries | None = None):
        self._f = files
        self.digest = digest
        self._excluded = exclusions
        self.companion_rows = companions or Companions()  # companions.yaml (catalog/companions.py)
        self.binaries = binaries or Binaries()  # binaries.yaml (catalog/binaries.py): NumPy ABI, CUDA majors

    # --- CUDA and drivers -----------------------------------------------------------
    def minor_compat_floor(self, major: int) -> str:
        for row in self._f.minor_version_compat:
            if row.major == major:
                return row.linux_min
        raise CatalogError(f"no minor-version-compatibility floor for CUDA {major}.x in the catalog")

    def toolkit_floor(self, cuda: str) -> str:
        """The newest driver floor among the catalog's releases of CUDA major.minor."""
        mm = vtuple(cuda)[:2]
        floors = [t.linux_min for t in self._f.toolkits if vtuple(t.version)[:2] == mm and t.linux_min]
        if not floors:
            raise CatalogError(
                f"the catalog has no driver floor for CUDA {cuda}",
                hint="use policy 'minor', or add the row to envkit/catalog/data/cuda.yaml with its source",
            )
        return max(floors, key=vtuple)

    def debian_toolkits(self) -> dict[str, DebianToolkit]:
        """CUDA release (MAJOR.MINOR) -> Debian's toolkit .deb of it: the devel flavour's CUDA 12 compiler programs."""
        return {t.cuda: t for t in self._f.debian_toolkits}

    def driver_floor_for(self, cuda: str, policy: str) -> str:
        """The oldest Linux driver that runs a CUDA ``cuda`` runtime under ``policy``."""
        if policy == "minor":
            return self.minor_compat_floor(vtuple(cuda)[0])
        return self.toolkit_floor(cuda)

    def require_cuda_for(self, cuda: str, policy: str) -> str:
        """The NVIDIA_REQUIRE_CUDA value matching ``driver_floor_for``."""
        major, minor = vtuple(cuda)[:2]
        return f"cuda>={major}.0" if policy == "minor" else f"cuda>={major}.{minor}"

    # --- GPUs -----------------------------------------------------------------------
    @cached_property
    def _gpu_index(self) -> dict[str, Arch]:
        index: dict[str, Arch] = {}
        for arch in self._f.architectures:
            index[arch.cc] = arch
            for model in arch.models:
                index[norm_gpu(model)] = arch
        return index

    def gpu(self, name: str) -> Arch | None:
        """The architecture of a GPU model ('H100', 'rtx 4090') or capability ('9.0')."""
        return self._gpu_index.get(name.strip()) or self._gpu_index.get(norm_gpu(name))

    def gpu_names(self) -> list[str]:
        return sorted({m for a in self._f.architectures for m in a.models})

    def unknown_gpu_hint(self, name: str) -> str:
        """What to say of a GPU the catalog does not know: the nearest names, then every model it knows."""
        import difflib

        names = self.gpu_names()
        near = difflib.get_close_matches(norm_gpu(name), [norm_gpu(n) for n in names], n=3, cutoff=0.6)
        shown = [n for n in names if norm_gpu(n) in near]
        guess = f"did you mean {' or '.join(repr(n) for n in shown)}? " if shown else ""
        return (f"{guess}give a model the catalog knows ({', '.join(names)}) or a compute capability like '9.0'")

    # --- operating-system bases -----------------------------------------------------
    def os_base(self, suite: str) -> OsBase | None:
        return next((b for b in self._f.bases if b.suite == suite), None)

    def suites(self) -> list[str]:
        return [b.suite for b in self._f.bases]

    # --- PyTorch --------------------------------------------------------------------
    def torch_release(self, version: str) -> TorchRelease | None:
        series = ".".join(version.split(".")[:2])
        return next((r for r in self._f.releases if r.version == series), None)

    def torch_releases(self) -> tuple[TorchRelease, ...]:
        return self._f.releases

    def torch_variant_index(self, tag: str) -> str:
        """The index that serves a non-default torch variant (one URL pattern, here only)."""
        return self._f.variant_index.format(tag=tag)

    # --- JAX and TensorFlow ---------------------------------------------------------
    @property
    def jax(self) -> Jax:
        return self._f.jax

    @property
    def tensorflow(self) -> Tensorflow:
        return self._f.tensorflow

    def max_cuda_for_driver(self, driver: str) -> str | None:
        """The newest CUDA major.minor whose own driver floor ``driver`` meets."""
        ok = [t.version for t in self._f.toolkits if t.linux_min and vtuple(t.linux_min) <= vtuple(driver)]
        if not ok:
            return None
        return ".".join(str(p) for p in max((vtuple(v) for v in ok))[:2])

    def python_suites(self, python: str) -> list[str]:
        return [b.suite for b in self._f.bases if b.python == python]

    def source(self, key: str) -> str:
        return self._f.sources[key]

    # --- companion packages (companions.yaml: catalog/companions.py) -------------------------
    def companions(self, framework: str, version: str) -> dict[str, str]:
        """Canonical name -> PEP 440 specifier of each companion paired with ``framework`` release ``version``
        ('2.6.0' matches the torch/tensorflow series row '2.6'; jax rows are versions); {} when none is known."""
        return self.companion_rows.for_release(framework, version)

    def companion_names(self, framework: str) -> frozenset[str]:
        """Every companion package the catalog pairs with some release of ``framework``."""
        return self.companion_rows.names(framework)

    # --- releases left out on purpose (catalog/exclusions.py) ----------------------------
    def exclusions(self, framework: str | None = None) -> tuple[Exclusion, ...]:
        """Every exclusion, or ``framework``'s ('torch', 'jax', 'tensorflow'), in file order."""
        return tuple(e for e in self._excluded if framework is None or e.framework == framework)

    def excluded(self, framework: str, version: str) -> Exclusion | None:
        """The exclusion of ``framework`` ``version`` ('2.6.0' == '2.6.0.0'), if the catalog has one."""
        return next((e for e in self._excluded if e.framework == framework and e.matches(version)), None)

    # (whether a release is also listed: catalog/releases.py, the one owner of each framework file's rows)


def norm_gpu(name: str) -> str:
    return "".join(name.lower().replace("nvidia", "").replace("geforce", "").split())


