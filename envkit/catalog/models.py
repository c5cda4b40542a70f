"""The compatibility catalog: facts as data, read through small questions.

Every entry names its sources (keys of ``data/sources.yaml``); loading validates that
each key exists. Callers never index the raw YAML.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import tempfile
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import CatalogError, Location
from ..support.yamlsource import parse_yaml
from .companions import FILE as COMPANIONS_FILE, Companions, check_companions, known_releases, read_companions
from .exclusions import FRAMEWORK_FILES, Exclusion, check_rows, pop_rows

Verified = Literal[True, False, "partial"]
FILES = ("sources", "cuda", "gpus", "os", *FRAMEWORK_FILES.values())  # in this order into the digest


# --- the grammars of the values the code computes with (vtuple, Version, rules.covers) -----------------
def _grammar(pattern: str, what: str, example: str):
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


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    verified: Verified
    sources: tuple[str, ...] = Field(min_length=1)
    note: str | None = None


class MinorCompat(Entry):
    major: int
    linux_min: Dotted


class Toolkit(Entry):
    version: Dotted
    linux_min: Dotted | None


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


class TorchVariant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
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


class PyRange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
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


class Since(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    since: Release
    python: Dotted | None = None
    cuda: Dotted | None = None


class JaxExtra(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    extra: str
    since: Release
    min_cc: Cc
    built_with: tuple[Since, ...] = Field(min_length=1)
    cudnn: str
    nccl: str

    def cuda_for(self, version: str) -> str:
        """The CUDA toolkit this extra's plugin was built with at ``version``."""
        rows = [r for r in self.built_with if Version(r.since) <= Version(version)]
        return rows[-1].cuda if rows else self.built_with[0].cuda


class Jax(Entry):
    versions: tuple[Release, ...] = Field(min_length=1)
    python_min: tuple[Since, ...]
    python_max: Dotted
    extras: tuple[JaxExtra, ...]

    def python_range(self, version: str) -> PyRange:
        rows = [r for r in self.python_min if Version(r.since) <= Version(version)]
        return PyRange(min=rows[-1].python if rows else "3.9", max=self.python_max)


class TfRelease(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
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

    def __init__(self, files: _Files, digest: str, exclusions: tuple[Exclusion, ...] = (),
                 companions: Companions | None = None):
        self._f = files
        self.digest = digest
        self._excluded = exclusions
        self.companion_rows = companions or Companions()  # companions.yaml (catalog/companions.py)

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
        # a file where a parent directory should be: mkdir says "File exists" (or "Not a directory" deeper down)
        blocker = next((p for p in reversed(dest.parents) if p.exists() and not p.is_dir()), None)
        if blocker is not None and exc.errno in (errno.EEXIST, errno.ENOTDIR):
            raise OSError(errno.ENOTDIR, f"{os.strerror(errno.ENOTDIR)} ({blocker} is a file)", str(dest)) from exc
        raise OSError(exc.errno, exc.strerror, str(dest)) from exc
    try:
        for name in FILES:
            shutil.copyfile(source / f"{name}.yaml", tmp / f"{name}.yaml")
        from .perf import FILE as PERF_FILE, perf_path  # the performance floors too (not part of the digest)

        shutil.copyfile(perf_path(), tmp / PERF_FILE)
        if (source / COMPANIONS_FILE).is_file():  # optional: a copy made without it knows no companions
            shutil.copyfile(source / COMPANIONS_FILE, tmp / COMPANIONS_FILE)
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


class _Loader(yaml.SafeLoader):
    """yaml's safe loader, refusing a key written twice in one mapping (plain YAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the constructor's own error says so
                continue
            if first is not key_node.start_mark:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {first.line + 1}); keep one",
                    key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _read(path: Path, directory: Path) -> tuple[bytes, object]:
    """A catalog file's bytes and its YAML, or a CatalogError naming the file (and its line where there is one)."""
    hint = None
    if team_dir() is not None and directory == team_dir():
        hint = (f"{CATALOG_ENV}={team_dir()} names this catalog; create it with "
                f"`envkit catalog export DIR`, or unset {CATALOG_ENV} to use the packaged one")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CatalogError(f"cannot load catalog file {path}: {exc}", hint=hint) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = raw.rfind(b"\n", 0, exc.start) + 1
        column = len(raw[start:exc.start].decode("utf-8", errors="replace")) + 1
        raise CatalogError(f"catalog file {path.name} is not UTF-8 text: byte 0x{raw[exc.start]:02x} cannot be decoded",
                           hint="save the file as UTF-8 (YAML files are UTF-8 text)",
                           location=Location(str(path), raw[:exc.start].count(b"\n") + 1, column)) from None
    try:
        return raw, yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = Location(str(path), mark.line + 1, mark.column + 1) if mark else Location(str(path))
        raise CatalogError(f"catalog file {path.name} is not valid YAML: {exc.problem or exc}",
                           hint="fix the file (`docs/catalog.md` describes each file's fields)"
                                + (f", or unset {CATALOG_ENV} to use the packaged catalog" if hint else ""),
                           location=where) from None
    except yaml.YAMLError as exc:  # the reader's (a character YAML does not allow)
        raise CatalogError(f"cannot load catalog file {path}: {exc}", hint=hint) from None


def _refuse(loc: tuple, message: str, hint: str, files_of: dict[str, Path], directory: Path) -> CatalogError:
    where = ".".join(str(p) for p in loc)
    return CatalogError(f"catalog entry {where}: {message}", hint=hint,
                        location=_locate(files_of.get(loc[0]), loc, directory))


def _twice(values) -> tuple[int, int] | None:
    """(index of the first, index of the repeat) of the first value written twice, else None."""
    first: dict = {}
    for i, v in enumerate(values):
        if v in first:
            return first[v], i
        first[v] = i
    return None


def _cross_check(files: _Files):
    """Rules between values that each pass their own grammar: (loc, message, hint) of the first broken one."""
    keep_one = "keep one row per value (the resolver would silently use one of them)"
    for key, rows, what in (("minor_version_compat", [r.major for r in files.minor_version_compat], "major"),
                            ("toolkits", [vtuple(t.version) for t in files.toolkits], "version"),
                            ("architectures", [a.cc for a in files.architectures], "cc"),
                            ("bases", [b.suite for b in files.bases], "suite"),
                            ("releases", [r.version for r in files.releases], "version")):
        if (dup := _twice(rows)) is not None:
            value = getattr((getattr(files, key))[dup[1]], what)
            yield (key, dup[1], what), f"{what} {value!r} is already the row {key}.{dup[0]}", keep_one
    models = [(_norm(m), i, j) for i, a in enumerate(files.architectures) for j, m in enumerate(a.models)]
    if (dup := _twice([m for m, _, _ in models])) is not None:
        (_, i0, _), (_, i, j) = models[dup[0]], models[dup[1]]
        yield (("architectures", i, "models", j), f"GPU {files.architectures[i].models[j]!r} is already a model of "
               f"architectures.{i0} (cc {files.architectures[i0].cc})", "name each GPU model under one architecture")
    if (dup := _twice([r.version for r in files.tensorflow.releases])) is not None:
        yield (("tensorflow", "releases", dup[1], "version"),
               f"version {files.tensorflow.releases[dup[1]].version!r} is already the row tensorflow.releases.{dup[0]}",
               keep_one)
    patches_seen: dict[Version, str] = {}
    for key, releases in (("releases", files.releases), ("tensorflow", files.tensorflow.releases)):
        base = ("releases",) if key == "releases" else ("tensorflow", "releases")
        name = "torch" if key == "releases" else "tensorflow"
        patches_seen.clear()
        for i, r in enumerate(releases):
            for j, patch in enumerate(r.patches):
                v = Version(patch)
                if v.release[:2] != vtuple(r.version)[:2]:
                    yield ((*base, i, "patches", j), f"{name} {patch!r} is not a release of the series {r.version}",
                           f"move it to the {'.'.join(map(str, v.release[:2]))} row")
                if v in patches_seen:
                    yield ((*base, i, "patches", j), f"{name} {patch!r} is listed twice (also at {patches_seen[v]})",
                           "list each release once")
                patches_seen.setdefault(v, f"{'.'.join(map(str, base))}.{i}.patches.{j}")
            if Version(r.python.min) > Version(r.python.max):
                yield ((*base, i, "python", "min"), f"Python range {r.python.min}-{r.python.max} is empty",
                       "write min <= max")
        if key == "releases":
            for i, r in enumerate(releases):
                tags = [v.tag for v in r.variants]
                if (dup := _twice(tags)) is not None:
                    yield (("releases", i, "variants", dup[1], "tag"),
                           f"torch {r.version} has the variant {tags[dup[1]]!r} twice", keep_one)
                if r.index_default not in tags:
                    yield (("releases", i, "index_default"),
                           f"{r.index_default!r} names no variant of torch {r.version} (its variants: "
                           f"{', '.join(tags)})",
                           "set index_default to the tag of the variant the package index serves by default "
                           "(it picks the wheel source), or add that variant to the row")
    if (dup := _twice([Version(v) for v in files.jax.versions])) is not None:
        yield (("jax", "versions", dup[1]), f"jax {files.jax.versions[dup[1]]!r} is listed twice "
               f"(also jax.versions.{dup[0]})", "list each release once")
    if (dup := _twice([e.extra for e in files.jax.extras])) is not None:
        yield (("jax", "extras", dup[1], "extra"), f"the extra {files.jax.extras[dup[1]].extra!r} has two rows "
               f"(also jax.extras.{dup[0]})", keep_one)


def load_catalog(directory: str | Path | None = None) -> Catalog:
    directory = Path(directory) if directory else data_dir()
    merged: dict = {}
    excluded = []  # each framework file's `excluded:` rows, checked once sources.yaml is known
    files_of: dict[str, Path] = {}  # top-level key -> the file holding it (to locate a validation error)
    h = hashlib.sha256()
    for name in FILES:
        path = directory / f"{name}.yaml"
        raw, data = _read(path, directory)
        h.update(name.encode() + b"\0" + raw)
        if not isinstance(data, dict) or data.pop("version", None) != 1:
            raise CatalogError(f"{path}: expected a mapping with 'version: 1'")
        rows = pop_rows(name, path, raw, data)
        if rows is not None:
            excluded.append(rows)
        twice = sorted(set(data) & set(merged))
        if twice:
            raise CatalogError(f"{path.name}: the top-level key {twice[0]!r} is already in {files_of[twice[0]].name}",
                               hint="each top-level key belongs to one catalog file (docs/catalog.md)",
                               location=_locate(path, (twice[0],), directory))
        merged.update(data)
        files_of.update(dict.fromkeys(data, path))
    hint = ("fix the entry (`docs/catalog.md` describes each file's fields), or unset "
            f"{CATALOG_ENV} to use the packaged catalog")
    try:
        files = _Files.model_validate(merged)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        if first["type"] == "value_error":  # envkit's own grammars: the message names the value and the fix
            msg = str(first["ctx"]["error"])
        else:
            value = first.get("input")
            shown = (f" (got {value!r})" if first["type"] != "missing" and (value is None or isinstance(
                value, (str, int, float, bool))) else "")
            msg = first["msg"] + shown
        raise CatalogError(f"catalog entry {where}: {msg}{more}", hint=hint,
                           location=_locate(files_of.get(first["loc"][0]) if first["loc"] else None, first["loc"],
                                            directory)) from None
    for loc, message, why in _cross_check(files):
        raise _refuse(loc, message, f"{why}; {hint}", files_of, directory)
    missing = sorted(
        {s for group in (files.minor_version_compat, files.toolkits, files.architectures, files.bases, files.releases,
                         (files.jax, files.tensorflow))
         for e in group for s in e.sources} - set(files.sources)
    )
    if missing:
        raise CatalogError(f"catalog entries name unknown sources: {', '.join(missing)}",
                           hint="add them to sources.yaml")
    exclusions = tuple(e for rows in excluded for e in check_rows(rows, files.sources))
    raw, companions = read_companions(directory), None  # optional; in the digest when present
    if raw is not None:
        companions = check_companions(directory / COMPANIONS_FILE, raw, known_releases(files), files.sources)
        h.update(b"companions\0" + raw)
    return Catalog(files, "sha256:" + h.hexdigest(), exclusions, companions)
