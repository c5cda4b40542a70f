"""The compatibility catalog: facts as data, read through small questions.

Every entry names its sources (keys of ``data/sources.yaml``); loading validates that
each key exists. Callers never index the raw YAML.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..errors import CatalogError, Location
from ..yamlsource import parse_yaml
from .exclusions import FRAMEWORK_FILES, Exclusion, check_rows, pop_rows

Verified = Literal[True, False, "partial"]
FILES = ("sources", "cuda", "gpus", "os", "pytorch", "jax", "tensorflow")


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    verified: Verified
    sources: tuple[str, ...] = Field(min_length=1)
    note: str | None = None


class MinorCompat(Entry):
    major: int
    linux_min: str


class Toolkit(Entry):
    version: str
    linux_min: str | None


class Arch(Entry):
    cc: str
    family: str
    models: tuple[str, ...]
    first_cuda: str
    last_cuda_major: int | None

    @property
    def sm(self) -> str:
        return "sm_" + self.cc.replace(".", "")


class OsBase(Entry):
    distro: str
    suite: str
    python: str
    glibc: str


class TorchVariant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tag: str
    cuda: str
    status: str
    cudnn: str | None
    nccl: str | None
    arch_list: str

    @property
    def arches(self) -> tuple[str, ...]:
        """e.g. ('sm_75', ..., 'sm_120', 'compute_120') for '7.5;...;12.0+PTX'."""
        return arches_of(self.arch_list)


class PyRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    min: str
    max: str

    def admits(self, python: str) -> bool:
        return Version(self.min) <= Version(python) <= Version(self.max)


class TorchRelease(Entry):
    version: str
    patches: tuple[str, ...]
    python: PyRange
    index_default: str
    variants: tuple[TorchVariant, ...]

    def variant(self, tag: str) -> TorchVariant | None:
        return next((v for v in self.variants if v.tag == tag), None)


class Since(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    since: str
    python: str | None = None
    cuda: str | None = None


class JaxExtra(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    extra: str
    since: str
    min_cc: str
    built_with: tuple[Since, ...]
    cudnn: str
    nccl: str

    def cuda_for(self, version: str) -> str:
        """The CUDA toolkit this extra's plugin was built with at ``version``."""
        rows = [r for r in self.built_with if Version(r.since) <= Version(version)]
        return rows[-1].cuda if rows else self.built_with[0].cuda


class Jax(Entry):
    versions: tuple[str, ...]
    python_min: tuple[Since, ...]
    python_max: str
    extras: tuple[JaxExtra, ...]

    def python_range(self, version: str) -> PyRange:
        rows = [r for r in self.python_min if Version(r.since) <= Version(version)]
        return PyRange(min=rows[-1].python if rows else "3.9", max=self.python_max)


class TfRelease(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: str
    patches: tuple[str, ...]
    python: PyRange
    cuda: str
    cudnn: str
    # the compiled targets as the release's own build reports them (tf.sysconfig.get_build_info()
    # ["cuda_compute_capabilities"]: a PTX-only target has no sm_ twin); None: the file's arch_list
    arches: tuple[Annotated[str, StringConstraints(pattern=r"^(sm|compute)_[0-9]+[af]?$")], ...] | None = None


class Tensorflow(Entry):
    extra: str
    min_driver: str
    arch_list: str
    arch_list_verified: Verified
    releases: tuple[TfRelease, ...]

    def arches_for(self, release: TfRelease) -> tuple[str, ...]:
        """What ``release`` was compiled for: its own reading where the catalog has one."""
        return release.arches if release.arches is not None else arches_of(self.arch_list)


class _Files(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    sources: dict[str, str]
    minor_version_compat: tuple[MinorCompat, ...]
    toolkits: tuple[Toolkit, ...]
    architectures: tuple[Arch, ...]
    bases: tuple[OsBase, ...]
    releases: tuple[TorchRelease, ...]
    variant_index: str
    jax: Jax
    tensorflow: Tensorflow


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

    def __init__(self, files: _Files, digest: str, exclusions: tuple[Exclusion, ...] = ()):
        self._f = files
        self.digest = digest
        self._excluded = exclusions

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
                index[_norm(model)] = arch
        return index

    def gpu(self, name: str) -> Arch | None:
        """The architecture of a GPU model ('H100', 'rtx 4090') or capability ('9.0')."""
        return self._gpu_index.get(name.strip()) or self._gpu_index.get(_norm(name))

    def gpu_names(self) -> list[str]:
        return sorted({m for a in self._f.architectures for m in a.models})

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

    # --- releases left out on purpose (catalog/exclusions.py) ----------------------------
    def exclusions(self, framework: str | None = None) -> tuple[Exclusion, ...]:
        """Every exclusion, or ``framework``'s ('torch', 'jax', 'tensorflow'), in file order."""
        return tuple(e for e in self._excluded if framework is None or e.framework == framework)

    def excluded(self, framework: str, version: str) -> Exclusion | None:
        """The exclusion of ``framework`` ``version`` ('2.6.0' == '2.6.0.0'), if the catalog has one."""
        return next((e for e in self._excluded if e.framework == framework and e.matches(version)), None)

    def lists_release(self, framework: str, version: str) -> bool:
        """Whether the catalog also has ``version`` as a release (a patch of a row, or a JAX version)."""
        if framework == "torch":
            listed = [p for r in self._f.releases for p in r.patches]
        elif framework == "jax":
            listed = list(self._f.jax.versions)
        else:
            listed = [p for r in self._f.tensorflow.releases for p in r.patches]
        return any(Version(p) == Version(version) for p in listed)


def _norm(name: str) -> str:
    return "".join(name.lower().replace("nvidia", "").replace("geforce", "").split())


CATALOG_ENV = "ENVKIT_CATALOG"


def packaged_dir() -> Path:
    """The catalog shipped inside envkit (read-only in an installed envkit)."""
    return Path(str(resources.files("envkit.catalog") / "data"))


def team_dir() -> Path | None:
    """A team's reviewed copy of the catalog, when ``$ENVKIT_CATALOG`` names one."""
    override = os.environ.get(CATALOG_ENV)
    return Path(override) if override else None


def data_dir() -> Path:
    """The catalog in use: the team's copy (``team_dir``), else the packaged one."""
    return team_dir() or packaged_dir()


def export_catalog(dest: str | Path) -> Path:
    """Copy the catalog in use into ``dest`` (new or empty), for a team to keep, review and refresh.

    Written into a temporary directory beside ``dest`` and renamed into place, so ``dest``
    is either absent or complete.
    """
    dest = Path(dest)
    source = data_dir()
    load_catalog(source)  # never export a catalog that does not load
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise CatalogError(f"{dest} exists and is not an empty directory",
                           hint="choose a new directory; envkit does not overwrite a catalog")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    except OSError as exc:  # named by the directory asked for, not the temporary one beside it
        raise OSError(exc.errno, exc.strerror, str(dest)) from exc
    try:
        for name in FILES:
            shutil.copyfile(source / f"{name}.yaml", tmp / f"{name}.yaml")
        if dest.exists():
            dest.rmdir()
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _locate(path: Path | None, loc: tuple, directory: Path) -> Location:
    """Where a validation error's value is: its file, line and column (the file is read again, on this error path
    only), or just the file when that cannot be told (a file using YAML anchors, which the spec parser refuses)."""
    if path is None:
        return Location(str(directory))
    try:
        return parse_yaml(path.read_text(), str(path), error=CatalogError).locate(loc)
    except (CatalogError, OSError, ValueError):
        return Location(str(path))


def load_catalog(directory: str | Path | None = None) -> Catalog:
    directory = Path(directory) if directory else data_dir()
    merged: dict = {}
    excluded = []  # each framework file's `excluded:` rows, checked once sources.yaml is known
    files_of: dict[str, Path] = {}  # top-level key -> the file holding it (to locate a validation error)
    h = hashlib.sha256()
    for name in FILES:
        path = directory / f"{name}.yaml"
        try:
            raw = path.read_bytes()
            data = yaml.safe_load(raw)
        except (OSError, yaml.YAMLError) as exc:
            hint = None
            if team_dir() is not None and directory == team_dir():
                hint = (f"{CATALOG_ENV}={team_dir()} names this catalog; create it with "
                        f"`envkit catalog export DIR`, or unset {CATALOG_ENV} to use the packaged one")
            raise CatalogError(f"cannot load catalog file {path}: {exc}", hint=hint) from None
        h.update(name.encode() + b"\0" + raw)
        if not isinstance(data, dict) or data.pop("version", None) != 1:
            raise CatalogError(f"{path}: expected a mapping with 'version: 1'")
        rows = pop_rows(name, path, raw, data)
        if rows is not None:
            excluded.append(rows)
        merged.update(data)
        files_of.update(dict.fromkeys(data, path))
    try:
        files = _Files.model_validate(merged)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise CatalogError(f"catalog entry {where}: {first['msg']}{more}",
                           hint="fix the entry (`docs/catalog.md` describes each file's fields), or unset "
                                f"{CATALOG_ENV} to use the packaged catalog",
                           location=_locate(files_of.get(first["loc"][0]) if first["loc"] else None, first["loc"],
                                            directory)) from None
    missing = sorted(
        {s for group in (files.minor_version_compat, files.toolkits, files.architectures, files.bases, files.releases,
                         (files.jax, files.tensorflow))
         for e in group for s in e.sources} - set(files.sources)
    )
    if missing:
        raise CatalogError(f"catalog entries name unknown sources: {', '.join(missing)}",
                           hint="add them to sources.yaml")
    exclusions = tuple(e for rows in excluded for e in check_rows(rows, files.sources))
    return Catalog(files, "sha256:" + h.hexdigest(), exclusions)
