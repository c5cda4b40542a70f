"""Companion packages paired by the catalog: ``companions.yaml`` beside the framework files.

Team stacks put companions beside a framework (torchvision, torchaudio, triton, xformers beside
torch; jaxlib and the CUDA plugins beside jax; the ``and-cuda`` nvidia-* wheels and tf-keras beside
tensorflow). Each framework release pairs with particular companion versions, and some companions
do not say so in their own metadata (torchaudio 2.11.0 declares no torch requirement at all), so
the catalog keeps the pairing (docs/catalog.md)::

    version: 1
    companions:
      torch:                      # a framework the catalog has: torch, jax, tensorflow
        - version: "2.6"          # a row of that framework's file: a torch/tensorflow series, a JAX version
          sources: [pypi_metadata_torchvision]   # keys of sources.yaml, like every entry
          note: "..."             # optional
          packages:               # package -> PEP 440 specifier (a constraint, never an addition)
            torchvision: "==0.21.*"
            triton: "==3.2.0"

Rows are checked here with their file:line:col (as ``exclusions`` does), after the framework
files, since a row must name a release series of its framework's file. The file is optional: a
team's catalog copy made before it existed loads with no companions known (its rows name that
copy's own series and sources, so envkit's packaged file cannot stand in for it, as ``perf.yaml``
does); when present, its bytes are part of the catalog digest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import CatalogError, Location
from ..frameworks import FRAMEWORKS
from ..support.yamlsource import Document, parse_yaml, utf8_text

FILE = "companions.yaml"
KEY = "companions"
# how a framework's rows are keyed: by release series (MAJOR.MINOR, as pytorch.yaml and tensorflow.yaml
# write releases) or by the exact release (jax.yaml's versions)
BY_SERIES = {"torch": True, "jax": False, "tensorflow": True}
ROW_KEYS = ("version", "sources", "note", "packages")
_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
_SERIES = re.compile(r"[0-9]+\.[0-9]+")
if TYPE_CHECKING:
    _Fast = yaml.SafeLoader
else:
    _Fast = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Fast):
    """libyaml's safe loader (the file is parsed at every catalog load), refusing a key written twice; the
    error path parses the file again with positions (``parse_yaml``), which names where."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool=False) -> dict:
        keys = [self.construct_object(k, deep=True) for k, _ in node.value]
        if len({repr(k) for k in keys}) != len(keys):
            raise yaml.constructor.ConstructorError(None, None, "a key is written twice", node.start_mark)
        return super().construct_mapping(node, deep=deep)


class _Positions:
    """The file's positions, parsed only when an error must name one (``Document.locate``)."""

    def __init__(self, text: str, path: Path):
        self.text, self.path = text, path
        self.doc: Document | None = None

    def locate(self, loc: tuple) -> Location:
        if self.doc is None:
            try:
                self.doc = _parse(self.text, self.path)
            except CatalogError:  # a file only libyaml reads (an anchor): the file, not a line
                return Location(str(self.path))
        return self.doc.locate(loc)


def _parse(text: str, path: Path) -> Document:
    try:
        return parse_yaml(text, str(path), error=CatalogError)
    except CatalogError as exc:  # not YAML, a key written twice, an anchor: said where, with what to do
        raise CatalogError(exc.message, location=exc.location,
                           hint=exc.hint or "fix the file (docs/catalog.md describes its rows)") from None


_ROW_HINT = ('each row: {version: "2.6" (a release row of the framework\'s file), sources: [KEYS of sources.yaml], '
             'packages: {NAME: "PEP 440 specifier"}} (optional note); see docs/catalog.md')


@dataclass(frozen=True)
class CompanionRow:
    """One row: a framework release (series or version) and its companions, as written."""

    framework: str
    version: str
    packages: tuple[tuple[str, str], ...]  # (canonical name, specifier), in file order
    sources: tuple[str, ...]
    note: str | None
    at: tuple = ()  # its key path in the file
    positions: _Positions | None = field(default=None, compare=False, repr=False)

    @property
    def location(self) -> Location:
        """The row's file:line:col (the file is parsed for positions on first use)."""
        return self.positions.locate(self.at) if self.positions is not None else Location("")

    def to_json(self) -> dict:
        return {"framework": self.framework, "version": self.version, "packages": dict(self.packages),
                "sources": list(self.sources), "note": self.note, "location": str(self.location)}


def catalog_key(framework: str, version: str) -> Version:
    """``release_key`` of a release the catalog lists (a version it validated)."""
    key = release_key(framework, version)
    if key is None:
        raise CatalogError(f"{framework} {version!r} is not a version")
    return key


def release_key(framework: str, version: str) -> Version | None:
    """What a framework release is matched by: its series (torch, tensorflow) or itself (jax)."""
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    if BY_SERIES.get(framework, False):
        return Version(".".join(str(p) for p in (v.release + (0,))[:2]))
    return Version(v.public)


class Companions:
    """The checked rows of ``companions.yaml`` (none when the catalog has no such file)."""

    def __init__(self, rows: tuple[CompanionRow, ...] = (), path: Path | None = None):
        self.rows = rows
        self.path = path  # None: the catalog has no companions.yaml
        self._by = {(r.framework, release_key(r.framework, r.version)): r for r in rows}

    def row(self, framework: str, version: str) -> CompanionRow | None:
        """The row for ``framework`` release ``version`` ('2.6.0' finds the "2.6" torch row), if any."""
        key = release_key(framework, version)
        return None if key is None else self._by.get((framework, key))

    def for_release(self, framework: str, version: str) -> dict[str, str]:
        row = self.row(framework, version)
        return dict(row.packages) if row is not None else {}

    def names(self, framework: str) -> frozenset[str]:
        return frozenset(name for r in self.rows if r.framework == framework for name, _ in r.packages)

    def rows_of(self, framework: str) -> tuple[CompanionRow, ...]:
        return tuple(r for r in self.rows if r.framework == framework)


def read_companions(directory: Path) -> bytes | None:
    """The file's bytes, or None when ``directory`` has no companions.yaml."""
    path = directory / FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CatalogError(f"cannot load catalog file {path}: {exc}") from None


def check_companions(path: Path, raw: bytes, releases: dict[str, tuple[str, ...]],
                     sources: dict[str, str]) -> Companions:
    """The file's rows, or a CatalogError at the file:line:col of the first bad value."""
    text = utf8_text(raw, path, error=CatalogError, what=f"catalog file {path.name} is ")
    data = _load_yaml(text, path)
    doc = _Positions(text, path)

    def fail(message: str, *at: str | int, hint: str = _ROW_HINT) -> CatalogError:
        return CatalogError(f"{path.name}: {message}", location=doc.locate(at), hint=hint)

    if not isinstance(data, dict) or data.get("version") != 1:
        raise fail("expected a mapping with 'version: 1'", hint="start the file with 'version: 1' (docs/catalog.md)")
    for key in data:
        if key not in ("version", KEY):
            raise fail(f"unknown top-level key {key!r}", key, hint=f"the file holds 'version: 1' and '{KEY}:' only")
    body = data.get(KEY) or {}
    if not isinstance(body, dict):
        raise fail(f"'{KEY}' must be a mapping of framework -> rows, not {type(body).__name__}", KEY)
    rows: list[CompanionRow] = []
    for framework, items in body.items():
        if framework not in BY_SERIES:
            raise fail(f"{KEY}.{framework}: the catalog has no framework {framework!r}", KEY, framework,
                       hint=f"use one of {', '.join(BY_SERIES)}")
        if items is None:
            continue
        if not isinstance(items, list):
            raise fail(f"{KEY}.{framework} must be a list of rows, not {type(items).__name__}", KEY, framework)
        rows += _framework_rows(framework, items, releases[framework], sources, fail, doc)
    return Companions(tuple(rows), path)


def _load_yaml(text: str, path: Path) -> object:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        _parse(text, path)  # names the line, as parse_yaml words it
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        raise CatalogError(f"catalog file {path.name} is not valid YAML: {exc}", hint="fix the file",
                           location=Location(str(path), mark.line + 1, mark.column + 1) if mark else Location(str(path))
                           ) from None


def _framework_rows(framework: str, items: list, known: tuple[str, ...], sources: dict[str, str], fail: _Fail,
                    doc: _Positions) -> list[CompanionRow]:
    """One framework's rows, each checked, one per release."""
    rows = []
    seen: dict[Version, int] = {}
    for i, item in enumerate(items):
        row = _check_row(framework, i, item, known, sources, fail)
        key = release_key(framework, row.version)
        assert key is not None  # _check_version refused a version that is none
        if key in seen:
            raise fail(f"{KEY}.{framework}[{i}]: {framework} {row.version} already has the row "
                       f"{KEY}.{framework}[{seen[key]}]", KEY, framework, i, "version",
                       hint="keep one row per release (merge their packages)")
        seen[key] = i
        rows.append(CompanionRow(framework=framework, version=row.version, packages=row.packages,
                                 sources=row.sources, note=row.note, at=(KEY, framework, i), positions=doc))
    return rows


_Fail = Callable[..., CatalogError]  # (message, *key path, hint=...) -> the error at that path's file:line:col


def _check_row(framework: str, i: int, item: object, known: tuple[str, ...], sources: dict[str, str],
               fail: _Fail) -> CompanionRow:
    at = (KEY, framework, i)
    where = f"{KEY}.{framework}[{i}]"
    if not isinstance(item, dict):
        raise fail(f"{where} must be a mapping (a row), not {type(item).__name__}", *at)
    for key in item:
        if key not in ROW_KEYS:
            raise fail(f"{where}: unknown key {key!r}", *at, key)
    for key in ("version", "sources", "packages"):
        if key not in item:
            raise fail(f"{where} has no {key}", *at)
    version = _check_version(framework, where, at, item["version"], known, fail)
    srcs = item["sources"]
    if not isinstance(srcs, list) or not srcs or not all(isinstance(s, str) for s in srcs):
        raise fail(f"{where}.sources must be a non-empty list of keys of sources.yaml", *at, "sources")
    for j, key in enumerate(srcs):
        if key not in sources:
            raise fail(f"{where}.sources names unknown source {key!r}", *at, "sources", j,
                       hint="add it to sources.yaml (where the fact was read, and when), or name an existing key")
    note = item.get("note")
    if note is not None and not isinstance(note, str):
        raise fail(f"{where}.note must be text", *at, "note")
    return CompanionRow(framework=framework, version=version,
                        packages=_check_packages(framework, where, at, item["packages"], fail), sources=tuple(srcs),
                        note=note)


def _check_version(framework: str, where: str, at: tuple, version: object, known: tuple[str, ...],
                   fail: _Fail) -> str:
    """A row's version: a quoted series (torch, tensorflow) or version (jax) of a release the framework's file has."""
    file = f"{FRAMEWORKS[framework].catalog_file}.yaml"
    if not isinstance(version, str):
        raise fail(f"{where}.version must be a quoted string, not {version!r}", *at, "version",
                   hint='quote it: version: "2.10" (unquoted, YAML reads 2.10 as the number 2.1)')
    if BY_SERIES[framework]:
        if not _SERIES.fullmatch(version):
            raise fail(f"{where}.version {version!r} is not a release series MAJOR.MINOR", *at, "version",
                       hint=f'{framework} rows are keyed by series, as {file} writes them: e.g. "2.6"')
        listed = version in known
    else:
        try:
            listed = any(Version(version) == Version(k) for k in known)
        except InvalidVersion:
            raise fail(f"{where}.version {version!r} is not a version", *at, "version",
                       hint=f'jax rows are keyed by version, as {file} lists them: e.g. "0.6.2"') from None
    if not listed:
        raise fail(f"{where}.version: {framework} {version} is not a release of {file}", *at, "version",
                   hint=f"add the release to {file} first (envkit catalog refresh), or remove this row")
    return version


def _check_packages(framework: str, where: str, at: tuple, packages: object,
                    fail: _Fail) -> tuple[tuple[str, str], ...]:
    """A row's packages: (canonical name, specifier), each named once, none the framework itself."""
    if not isinstance(packages, dict) or not packages:
        raise fail(f"{where}.packages must be a non-empty mapping of package -> specifier", *at, "packages",
                   hint='e.g. packages: {torchvision: "==0.21.*"}')
    out: list[tuple[str, str]] = []
    first: dict[str, str] = {}
    for name, spec in packages.items():
        pat = (*at, "packages", name)
        if not _NAME.fullmatch(name):
            raise fail(f"{where}.packages: {name!r} is not a package name", *pat,
                       hint="write the project name as the index spells it, e.g. torchvision")
        canon = canonicalize_name(name)
        if canon in first:
            raise fail(f"{where}.packages lists {canon} twice ({first[canon]!r} and {name!r})", *pat,
                       hint="list each package once per row")
        if canon == canonicalize_name(framework):
            raise fail(f"{where}.packages names {framework} itself", *pat, hint="list only its companions")
        first[canon] = name
        out.append((canon, _check_spec(f"{where}.packages.{name}", spec, pat, fail)))
    return tuple(out)


def _check_spec(where: str, spec: object, pat: tuple, fail: _Fail) -> str:
    """A package's PEP 440 specifier, stripped."""
    if not isinstance(spec, str) or not spec.strip():
        raise fail(f"{where} must be a PEP 440 specifier as a quoted string, not {spec!r}", *pat,
                   hint='e.g. "==0.21.*", "==3.2.0" or ">=12.5.3.2,<13.0"')
    try:
        parsed = SpecifierSet(spec)
    except InvalidSpecifier:
        raise fail(f"{where}: {spec!r} is not a PEP 440 specifier", *pat,
                   hint='e.g. "==0.21.*", "==3.2.0" or ">=12.5.3.2,<13.0"') from None
    if not len(parsed):
        raise fail(f"{where}: {spec!r} is not a PEP 440 specifier", *pat)
    return spec.strip()


__all__ = ["BY_SERIES", "FILE", "KEY", "CompanionRow", "Companions", "catalog_key", "check_companions",
           "read_companions", "release_key"]
