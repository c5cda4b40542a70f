"""Facts about built binaries that package metadata does not carry: ``binaries.yaml`` beside the framework files.

- ``numpy_abi``: the NumPy a framework release's binaries were built against (torch < 2.3: NumPy 1.x, so
  ``numpy<2`` beside it). The resolver adds it to the solve as a constraint and refuses a ``pip:`` entry that asks
  for a NumPy the release cannot run on, naming both.
- ``cuda_names`` / ``cuda_releases``: the CUDA major a GPU-bearing distribution targets, from its name
  (``nvidia-cublas-cu11``, ``cupy-cuda12x``, ``jax-cuda13-plugin``) or, where the name does not say it, its
  release (onnxruntime-gpu). The resolver refuses a closure holding a distribution of another major than the
  image's CUDA, naming the one that fits.

- ``cuda_sonames``: which library's major a ``DT_NEEDED`` entry of a wheel's ``.so`` pins (``libcudart.so.11``:
  CUDA 11; ``libcudnn.so.8``: cuDNN 8), so a package the catalog has no row for is caught by what it links.
- ``cpu_only``: accelerator libraries that run on the CPU only unless a plugin or the GPU build is installed
  (``jax`` without ``jax-cuda12-plugin``, ``onnxruntime``), with what to ask for instead.

Every row names its sources (keys of ``sources.yaml``). The file is optional (a team's catalog copy made before it
knows none of these facts); when present its bytes are part of the catalog digest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from pydantic import ValidationError, field_validator

from ..errors import CatalogError, Location
from ..support.grammar import specifier as _specifier
from ..support.models import Strict
from ..support.yamlsource import utf8_text

FILE = "binaries.yaml"


class _Row(Strict):
    sources: tuple[str, ...]
    note: str | None = None

    @field_validator("sources", mode="before")
    @classmethod
    def _listed(cls, value: object) -> object:
        return tuple(value) if isinstance(value, list) and value else value


class NumpyAbi(_Row):
    framework: str
    releases: str  # the framework's releases the row is about
    numpy: str  # what numpy must satisfy beside them

    _spec = field_validator("releases", "numpy")(classmethod(lambda cls, v: _specifier(v)))


def _major_pattern(value: str) -> str:
    try:
        compiled = re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression: {exc}") from None
    if "major" not in compiled.groupindex:
        raise ValueError(f"{value!r} has no (?P<major>...) group")
    return value


class CudaName(_Row):
    pattern: str  # a regular expression on the canonical name, with a ``major`` group
    fits: str  # the distribution of another major: str.format(major=..., **the pattern's other groups)

    _major = field_validator("pattern")(classmethod(lambda cls, v: _major_pattern(v)))


class CudaRelease(_Row):
    name: str
    versions: str
    major: int

    _spec = field_validator("versions")(classmethod(lambda cls, v: _specifier(v)))


class CudaSoname(_Row):
    pattern: str  # a regular expression on a DT_NEEDED entry, with a ``major`` group
    library: Literal["cuda", "cudnn"]  # whose major the soname's is: the image's CUDA's or its cuDNN's

    _major = field_validator("pattern")(classmethod(lambda cls, v: _major_pattern(v)))


class CpuOnly(_Row):
    name: str  # a distribution that runs on the CPU only as installed
    unless: tuple[str, ...]  # any of these in the closure gives it the GPU (a plugin, the GPU build)
    gpu: str  # what to ask for instead, in pip: (e.g. 'jax[cuda12]', 'onnxruntime-gpu')

    @field_validator("unless", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        return tuple(canonicalize_name(v) for v in value) if isinstance(value, list) else value


class BinariesFile(Strict):
    version: int
    numpy_abi: tuple[NumpyAbi, ...] = ()
    cuda_names: tuple[CudaName, ...] = ()
    cuda_releases: tuple[CudaRelease, ...] = ()
    cuda_sonames: tuple[CudaSoname, ...] = ()
    cpu_only: tuple[CpuOnly, ...] = ()

    @field_validator("numpy_abi", "cuda_names", "cuda_releases", "cuda_sonames", "cpu_only", mode="before")
    @classmethod
    def _rows(cls, value: object) -> object:
        return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True)
class CudaTarget:
    """What the catalog says about one distribution's CUDA major."""
    major: int
    fits: str | None  # the requirement that fits another major (filled by ``fits_for``)
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Binaries:
    rows: BinariesFile = BinariesFile(version=1)

    def numpy_for(self, framework: str, version: str) -> NumpyAbi | None:
        """The row saying which NumPy ``framework==version``'s binaries run on, when one does."""
        v = Version(Version(version).public)
        return next((r for r in self.rows.numpy_abi if r.framework == framework
                     and SpecifierSet(r.releases).contains(v, prereleases=True)), None)

    def cuda_major(self, name: str, version: str) -> tuple[int, CudaName | CudaRelease] | None:
        """The CUDA major distribution ``name==version`` targets and the row that says so; None when the catalog
        does not know (a package with no CUDA code, or one it has no row for)."""
        name = canonicalize_name(name)
        for row in self.rows.cuda_names:
            m = re.fullmatch(row.pattern, name)
            if m:
                return int(m.group("major")), row
        try:
            v = Version(Version(version).public)
        except InvalidVersion:
            return None
        for rel in self.rows.cuda_releases:
            if rel.name == name and SpecifierSet(rel.versions).contains(v, prereleases=True):
                return rel.major, rel
        return None

    def fits(self, name: str, row: CudaName | CudaRelease, major: int) -> str | None:
        """The distribution (or release range) of ``name`` that targets CUDA ``major``; None when none is known."""
        if isinstance(row, CudaName):
            m = re.fullmatch(row.pattern, canonicalize_name(name))
            groups = {k: v for k, v in (m.groupdict() if m else {}).items() if k != "major"}
            return row.fits.format(major=major, **groups)
        fit = next((r for r in self.rows.cuda_releases if r.name == row.name and r.major == major), None)
        return f"{row.name}{fit.versions}" if fit else None


    def soname_major(self, soname: str) -> tuple[str, int, CudaSoname] | None:
        """Which library's major a DT_NEEDED entry pins (``libcudart.so.11``: cuda 11), the row saying so."""
        for row in self.rows.cuda_sonames:
            m = re.fullmatch(row.pattern, soname)
            if m:
                return row.library, int(m.group("major")), row
        return None

    def cpu_only(self, name: str) -> CpuOnly | None:
        """The row saying distribution ``name`` runs on the CPU only unless its GPU part is installed."""
        name = canonicalize_name(name)
        return next((r for r in self.rows.cpu_only if r.name == name), None)


def read_binaries(directory: Path) -> bytes | None:
    """The file's bytes, or None when ``directory`` has no binaries.yaml."""
    try:
        return (directory / FILE).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CatalogError(f"cannot load catalog file {directory / FILE}: {exc}") from None


def check_binaries(path: Path, raw: bytes, sources: dict[str, str]) -> Binaries:
    """The file's rows, validated; every source a key of sources.yaml."""
    text = utf8_text(raw, path, error=CatalogError, what=f"catalog file {path.name} is ")
    hint = "fix the row (docs/catalog.md, binaries.yaml), or unset ENVKIT_CATALOG to use the packaged catalog"
    try:
        data = yaml.safe_load(text)
        rows = BinariesFile.model_validate(data)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path.name} is not valid YAML: {exc}", hint=hint, location=Location(str(path))) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CatalogError(f"{path.name}: {where}: {first['msg']}", hint=hint, location=Location(str(path))) from None
    if rows.version != 1:
        raise CatalogError(f"{path.name}: version {rows.version} is not known (1 is)", hint=hint,
                           location=Location(str(path)))
    missing = sorted({s for group in (rows.numpy_abi, rows.cuda_names, rows.cuda_releases, rows.cuda_sonames,
                                                     rows.cpu_only) for r in group
                      for s in r.sources} - set(sources))
    if missing:
        raise CatalogError(f"{path.name} names unknown sources: {', '.join(missing)}", hint="add them to sources.yaml",
                           location=Location(str(path)))
    return Binaries(rows)
