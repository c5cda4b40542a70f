"""Where the catalog is (the packaged one, or a team's copy named by ``$ENVKIT_CATALOG``), loading it (every
file read, each value checked against its grammar, rows cross-checked, each refusal at its file:line:col; its
digest) and exporting it for a team to keep. ``perf_path``: where the performance floors are read from.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Hashable, Iterator, Sequence

import yaml
from packaging.version import Version
from pydantic import ValidationError

from ..errors import CatalogError, Location
from ..support.yamlsource import parse_yaml, utf8_text
from .binaries import FILE as BINARIES_FILE
from .binaries import Binaries, check_binaries, read_binaries
from .companions import FILE as COMPANIONS_FILE
from .companions import check_companions, read_companions
from .exclusions import FRAMEWORK_FILES, check_rows, pop_rows
from .models import Catalog, CatalogData, TfRelease, TorchRelease, norm_gpu, vtuple

FILES = ("sources", "cuda", "gpus", "os", *FRAMEWORK_FILES.values())  # in this order into the digest
PERF_FILE = "perf.yaml"  # the performance floors (catalog/perf.py), beside the catalog files, outside its digest
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


def perf_path() -> Path:
    """The team catalog's ``perf.yaml`` when it has one, else the packaged one."""
    team = data_dir() / PERF_FILE
    return team if team.exists() else packaged_dir() / PERF_FILE


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
        shutil.copyfile(perf_path(), tmp / PERF_FILE)  # the performance floors too (not part of the digest)
        for optional in (COMPANIONS_FILE, BINARIES_FILE):  # a copy made without one knows none of its facts
            if (source / optional).is_file():
                shutil.copyfile(source / optional, tmp / optional)
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

    def construct_mapping(self, node: yaml.MappingNode, deep: bool=False) -> dict:
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
    text = utf8_text(raw, path, error=CatalogError, what=f"catalog file {path.name} is ")
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


def _twice(values: Sequence[Hashable]) -> tuple[int, int] | None:
    """(index of the first, index of the repeat) of the first value written twice, else None."""
    first: dict = {}
    for i, v in enumerate(values):
        if v in first:
            return first[v], i
        first[v] = i
    return None


_Broken = tuple[tuple, str, str]  # (key path, message, hint)


def _release_rules(base: tuple[str, ...], name: str,
                   releases: Sequence[TorchRelease | TfRelease]) -> Iterator[_Broken]:
    """Each series' patches in it and listed once; its Python range not empty."""
    patches_seen: dict[Version, str] = {}
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


def _variant_rules(releases: Sequence[TorchRelease]) -> Iterator[_Broken]:
    """Each torch series' variants listed once, and its index_default one of them."""
    keep_one = "keep one row per value (the resolver would silently use one of them)"
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


def _cross_check(files: CatalogData) -> Iterator[_Broken]:
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
    models = [(norm_gpu(m), i, j) for i, a in enumerate(files.architectures) for j, m in enumerate(a.models)]
    if (dup := _twice([m for m, _, _ in models])) is not None:
        (_, i0, _), (_, i, j) = models[dup[0]], models[dup[1]]
        yield (("architectures", i, "models", j), f"GPU {files.architectures[i].models[j]!r} is already a model of "
               f"architectures.{i0} (cc {files.architectures[i0].cc})", "name each GPU model under one architecture")
    if (dup := _twice([r.version for r in files.tensorflow.releases])) is not None:
        yield (("tensorflow", "releases", dup[1], "version"),
               f"version {files.tensorflow.releases[dup[1]].version!r} is already the row tensorflow.releases.{dup[0]}",
               keep_one)
    yield from _release_rules(("releases",), "torch", files.releases)
    yield from _release_rules(("tensorflow", "releases"), "tensorflow", files.tensorflow.releases)
    yield from _variant_rules(files.releases)
    if (dup := _twice([Version(v) for v in files.jax.versions])) is not None:
        yield (("jax", "versions", dup[1]), f"jax {files.jax.versions[dup[1]]!r} is listed twice "
               f"(also jax.versions.{dup[0]})", "list each release once")
    if (dup := _twice([e.extra for e in files.jax.extras])) is not None:
        yield (("jax", "extras", dup[1], "extra"), f"the extra {files.jax.extras[dup[1]].extra!r} has two rows "
               f"(also jax.extras.{dup[0]})", keep_one)


def known_releases(files: CatalogData) -> dict[str, tuple[str, ...]]:
    """framework -> the release keys its catalog file has (torch/tensorflow series, JAX versions)."""
    return {"torch": tuple(r.version for r in files.releases), "jax": tuple(files.jax.versions),
            "tensorflow": tuple(r.version for r in files.tensorflow.releases)}


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
        files = CatalogData.model_validate(merged)
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
                           location=_locate(files_of.get(str(first["loc"][0])) if first["loc"] else None, first["loc"],
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
    companions_raw, companions = read_companions(directory), None  # optional; in the digest when present
    if companions_raw is not None:
        companions = check_companions(directory / COMPANIONS_FILE, companions_raw, known_releases(files), files.sources)
        h.update(b"companions\0" + companions_raw)
    binaries = _binaries(directory, files.sources, h)
    return Catalog(files, "sha256:" + h.hexdigest(), exclusions, companions, binaries)


def _binaries(directory: Path, sources: dict[str, str], h: "hashlib._Hash") -> Binaries | None:
    """binaries.yaml's facts (optional, as companions.yaml), its bytes into the digest when present."""
    raw = read_binaries(directory)
    if raw is None:
        return None
    h.update(b"binaries\0" + raw)
    return check_binaries(directory / BINARIES_FILE, raw, sources)
