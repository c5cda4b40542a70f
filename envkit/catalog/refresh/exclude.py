"""`envkit catalog exclude`: leave a release out on purpose, written like `refresh --apply`.

One row is added to the framework file's ``excluded:`` list (the list is made, at the end of
the file, when there is none), with its reason, its source and today's date. The source is a
key of sources.yaml, or a URL/citation that becomes the new key ``excluded_<framework>_<version>``.
Nothing else in either file changes; both are validated together in a copy of the catalog,
then each is replaced atomically (sources.yaml first, so a crash between the two leaves an
unused source, never an exclusion naming a missing one). Offline: no index is asked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import CatalogError
from ...support.atomic import directories_locked
from ..exclusions import FRAMEWORK_FILES, KEY, version_problem
from ..files import data_dir as default_data_dir
from ..files import load_catalog
from ..models import Catalog
from ..releases import lists_release
from .arches import sources_result
from .common import FILENAMES, RefreshResult, apply_texts, check_parses_back, check_today, q, read_file, splice

HEADER = ("# Releases left out on purpose (docs/catalog.md): `envkit catalog refresh` never proposes them and\n"
          "# the resolver never picks them. Added with `envkit catalog exclude`.\n")


@dataclass(frozen=True)
class Excluding:
    """What `envkit catalog exclude` wrote (or, with ``written`` empty, would write)."""

    framework: str
    version: str
    reason: str
    sources: dict[str, str]
    added: str
    listed: bool  # the catalog also has the version as a release row (the exclusion wins)
    data_dir: Path
    results: tuple[RefreshResult, ...]
    written: tuple[Path, ...]

    def diff(self) -> str:
        return "".join(r.diff() for r in self.results)

    def to_json(self) -> dict:
        return {"framework": self.framework, "version": self.version, "reason": self.reason, "sources": self.sources,
                "added": self.added, "also_listed": self.listed, "catalog": str(self.data_dir),
                "files": [str(p) for p in self.written], "diff": self.diff()}


def source_key(framework: str, version: str) -> str:
    """The sources.yaml key a new exclusion's source gets: excluded_torch_2_6_0."""
    return f"excluded_{framework}_" + re.sub(r"[^0-9A-Za-z]+", "_", version).strip("_").lower()


def _checked_input(framework: str, version: str, reason: str, source: str) -> tuple[str, str]:
    """The reason and source, stripped, once the framework, version, reason and source are known to be usable."""
    if framework not in FRAMEWORK_FILES:
        raise CatalogError(
            f"no catalog file for framework {framework!r}", hint=f"choose from {', '.join(FRAMEWORK_FILES)}"
        )
    problem = version_problem(version)
    if problem is not None:
        raise CatalogError(f"cannot exclude {framework}: {problem[0]}", hint=problem[1])
    reason, source = reason.strip(), source.strip()
    if not reason:
        raise CatalogError("an exclusion needs a reason", hint="say why with --reason (a bug, a regression, a policy)")
    if len(reason) > 500 or any(ord(c) < 32 or ord(c) == 127 for c in reason):
        raise CatalogError("--reason must be one line of at most 500 characters, without control characters",
                           hint="say why in a sentence and put the detail behind --source (a URL)")
    if not source:
        raise CatalogError("an exclusion needs a source", hint="give --source a URL or a key of sources.yaml")
    return reason, source


def _source_entry(catalog: Catalog, framework: str, version: str, source: str) -> tuple[str, str, dict[str, str]]:
    """The sources.yaml key the row names, its text, and the entry to add there ({} when ``source`` is a key, or
    its text is already there under the key it would get)."""
    try:
        return source, catalog.source(source), {}
    except KeyError:
        pass
    key = source_key(framework, version)
    try:
        have: str | None = catalog.source(key)
    except KeyError:
        have = None
    if have is not None and have != source:
        raise CatalogError(
            f"sources.yaml already has {key} with another text: {have!r}",
            hint=f"name it with --source {key}, or give the source a key of its own in sources.yaml",
        )
    return key, source, ({} if have is not None else {key: source})


def exclude_release(framework: str, version: str, *, reason: str, source: str, today: str,
                    data_dir: str | Path | None = None, write: bool = True) -> Excluding:
    """Add an ``excluded:`` row for ``framework`` ``version`` to the catalog in ``data_dir`` (default: in use)."""
    check_today(today)
    reason, source = _checked_input(framework, version, reason, source)
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    # read, propose and write under the directory's lock: a second exclude at once waits, then adds its row to
    # this one's file instead of writing over it
    with directories_locked([directory]):
        catalog = load_catalog(directory)
        twin = catalog.excluded(framework, version)
        if twin is not None:
            raise CatalogError(f"{framework} {twin.version} is already excluded at {twin.location}: {twin.reason}",
                               hint="edit that row to change its reason or source")
        key, text, new_sources = _source_entry(catalog, framework, version, source)
        filename = FILENAMES[framework]
        current, raw = read_file(directory, filename)
        row = {"version": version, "reason": reason, "sources": [key], "added": today}
        proposed = _with_row(current, filename, row)
        check_parses_back(filename, proposed, {**raw, KEY: [*(raw.get(KEY) or []), row]})
        results = []
        if new_sources:
            results.append(sources_result(directory, new_sources))
        results.append(
            RefreshResult(framework=framework, data_dir=directory, current_text=current, proposed_text=proposed)
        )
        written = tuple(apply_texts(directory, results)) if write else ()
        return Excluding(framework=framework, version=version, reason=reason, sources={key: text}, added=today,
                         listed=lists_release(catalog, framework, version), data_dir=directory, results=tuple(results),
                         written=written)


def render_row(row: dict) -> list[str]:
    return [f"  - version: {q(row['version'])}\n",
            f"    reason: {q(row['reason'])}\n",
            f"    sources: [{', '.join(row['sources'])}]\n",
            f"    added: {q(row['added'])}\n"]


def _with_row(text: str, filename: str, row: dict) -> str:
    """``text`` with ``row`` appended to its top-level ``excluded:`` list (made at the end when missing)."""
    lines = text.splitlines(keepends=True)
    heads = [i for i, line in enumerate(lines) if re.match(rf"^{KEY}:", line)]
    if not heads:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        return "".join(lines) + HEADER + f"{KEY}:\n" + "".join(render_row(row))
    (head,) = heads
    value = lines[head].split("#", 1)[0][len(KEY) + 1:].strip()
    if value in ("[]", "null", "~"):
        return splice(lines, {}, {head: [f"{KEY}:\n", *render_row(row)]})
    if value:
        raise CatalogError(f"{filename}:{head + 1}: '{KEY}:' is written on one line ({value})",
                           hint="write its rows one under another ('  - version: ...'), or add the row by hand")
    end = head + 1
    for i in range(head + 1, len(lines)):
        if lines[i].startswith((" ", "\t")):
            end = i + 1
        elif lines[i].strip() and not lines[i].lstrip().startswith("#"):
            break
    return splice(lines, {end: render_row(row)}, {})


__all__ = ["Excluding", "exclude_release", "render_row", "source_key"]
