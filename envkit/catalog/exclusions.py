"""Releases left out on purpose: the ``excluded:`` rows of a framework's catalog file.

pytorch.yaml, jax.yaml and tensorflow.yaml may each hold a top-level ``excluded:`` list,
one row per release (docs/catalog.md)::

    excluded:
      - version: "2.6.0"
        reason: "segfaults in NCCL all-reduce on H100 (our bug 1234)"
        sources: [excluded_torch_2_6_0]   # keys of sources.yaml, like every entry
        added: "2027-01-21"               # optional: when it was left out

An excluded release is never proposed by ``envkit catalog refresh`` and never picked by
the resolver, even where the file also lists it as a release (the exclusion wins). The rows
are checked here with their file:line (the catalog's other entries are checked by pydantic
without positions); the loader keeps them in the file's bytes, so they change the digest.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version
from pydantic import Field, StrictStr, StringConstraints, ValidationError

from ..errors import CatalogError, Location
from ..frameworks import FRAMEWORKS
from ..support.models import Frozen
from ..support.yamlsource import parse_yaml

KEY = "excluded"
# framework (as team.yaml and the resolver name it) -> the catalog file (without .yaml) holding its rows
FRAMEWORK_FILES = {name: fw.catalog_file for name, fw in FRAMEWORKS.items()}
_ROW_HINT = ('each row: {version: "X.Y.Z", reason: "why it is left out", sources: [KEY of sources.yaml]} '
             "(optional added: YYYY-MM-DD); see docs/catalog.md")
_Text = Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1)]


class ExclusionRow(Frozen):
    """One ``excluded:`` row as written."""

    version: StrictStr
    reason: _Text
    sources: tuple[_Text, ...] = Field(min_length=1)
    added: StrictStr | None = None


@dataclass(frozen=True)
class Exclusion:
    """A release left out on purpose, with where it is written and what its sources say."""

    framework: str
    version: str
    reason: str
    sources: tuple[tuple[str, str], ...]  # (key, text) from sources.yaml
    added: str | None
    location: Location

    def matches(self, version: str) -> bool:
        try:
            return Version(version) == Version(self.version)
        except InvalidVersion:
            return False

    @property
    def where(self) -> str:
        """'pytorch.yaml:177': the row, without the directory (for text that goes into locks)."""
        return f"{Path(self.location.path).name}:{self.location.line}"

    @property
    def source_text(self) -> str:
        """'KEY (TEXT)' for each source, '; '-joined."""
        return "; ".join(f"{k} ({t})" for k, t in self.sources)

    def rejection(self, *, listed: bool) -> str:
        """Why the resolver rejects this release: the row, its reason and sources (and that it wins over a
        release row of the same version, when ``listed``)."""
        said = f"excluded on purpose ({self.where}): {self.reason} (source: {self.source_text})"
        return said + ("; the catalog also lists it as a release - the exclusion wins" if listed else "")

    def to_json(self) -> dict:
        return {"framework": self.framework, "version": self.version, "reason": self.reason,
                "sources": dict(self.sources), "added": self.added, "location": str(self.location)}


def exact_pin(req: Requirement) -> str | None:
    """X for 'name==X' or 'name===X' (no wildcard, nothing else); None for a range."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


@dataclass(frozen=True)
class RawRows:
    """A framework file's ``excluded`` value, popped by the loader before the file is merged."""

    framework: str
    path: Path
    text: str
    rows: object


def pop_rows(name: str, path: Path, raw: bytes, data: dict) -> RawRows | None:
    """Take the ``excluded`` key out of a loaded catalog file (only framework files may have one)."""
    framework = next((fw for fw, f in FRAMEWORK_FILES.items() if f == name), None)
    if framework is None or KEY not in data:
        return None
    return RawRows(framework, path, raw.decode("utf-8", errors="replace"), data.pop(KEY))


def version_problem(text: str) -> tuple[str, str] | None:
    """(what is wrong, what to write) when ``text`` cannot name one excluded release; None when it can."""
    try:
        version = Version(text)
    except InvalidVersion:
        return f"{text!r} is not a version", "write a release as the index spells it, e.g. \"2.6.0\""
    if version.local:
        return (f"{text!r} names a local version (a build variant)",
                f"write {version.public!r}: an exclusion leaves out the release in every variant")
    if len(version.release) < 3:
        return (f"{text!r} names a series, not a release",
                f"exclude each release of it ({text}.0, {text}.1, ...) with its own row")
    return None


def _validated(item: object, i: int, fail: Callable[..., CatalogError]) -> ExclusionRow:
    """Row ``i`` as its model reads it, or the error of its first bad field."""
    try:
        return ExclusionRow.model_validate(item)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc) or "row"
        if err["type"] == "missing":
            what = {
                "reason": "reason (why the release is left out)",
                "sources": "sources (keys of sources.yaml saying where the reason comes from)",
            }.get(field, field)
            raise fail(f"{KEY}[{i}] has no {what}", i) from None
        if err["type"] == "extra_forbidden":
            raise fail(f"{KEY}[{i}]: unknown key {field!r}", i, *loc) from None
        raise fail(f"{KEY}[{i}].{field}: {err['msg']}", i, *loc) from None


def _check_added_and_sources(row: ExclusionRow, i: int, sources: dict[str, str],
                             fail: Callable[..., CatalogError]) -> None:
    if row.added is not None:
        try:
            datetime.date.fromisoformat(row.added)
        except ValueError:
            raise fail(f"{KEY}[{i}].added {row.added!r} is not an ISO date (YYYY-MM-DD)", i, "added") from None
    for j, key in enumerate(row.sources):
        if key not in sources:
            raise fail(f"{KEY}[{i}].sources names unknown source {key!r}", i, "sources", j,
                       hint="add it to sources.yaml (a URL or citation), or name an existing key")


def check_rows(raw: RawRows, sources: dict[str, str]) -> tuple[Exclusion, ...]:
    """The file's exclusions, or a CatalogError naming the file:line of the first bad row."""
    if raw.rows is None:
        return ()
    doc = parse_yaml(raw.text, str(raw.path), error=CatalogError)

    def fail(message: str, *at: str | int, hint: str = _ROW_HINT) -> CatalogError:
        return CatalogError(message, location=doc.locate((KEY, *at)), hint=hint)

    if not isinstance(raw.rows, list):
        raise fail(f"'{KEY}' must be a list of rows, not {type(raw.rows).__name__}")
    out: list[Exclusion] = []
    for i, item in enumerate(raw.rows):
        row = _validated(item, i, fail)
        problem = version_problem(row.version)
        if problem is not None:
            raise fail(f"{KEY}[{i}].version {problem[0]}", i, "version", hint=problem[1])
        twin = next((e for e in out if e.matches(row.version)), None)
        if twin is not None:
            raise fail(
                f"{KEY}[{i}]: {raw.framework} {row.version} is already excluded at {twin.location}",
                i,
                "version",
                hint="keep one row per release",
            )
        _check_added_and_sources(row, i, sources, fail)
        out.append(Exclusion(framework=raw.framework, version=row.version, reason=row.reason,
                             sources=tuple((k, sources[k]) for k in row.sources), added=row.added,
                             location=doc.locate((KEY, i))))
    return tuple(out)


__all__ = [
    "FRAMEWORK_FILES",
    "KEY",
    "Exclusion",
    "ExclusionRow",
    "RawRows",
    "check_rows",
    "exact_pin",
    "pop_rows",
    "version_problem",
]
