"""Companions: propose ``companions.yaml`` rows from the package index (catalog/companions.py).

Two kinds of pairing are read from wheel METADATA (``Requires-Dist``):

- **declared**: the companion's own release names the framework. torchvision, torchaudio,
  torchtext and xformers name torch, tf-keras names tensorflow: an exact pin (``torch==2.6.0``)
  or a floor (``torch>=2.14.0``, ``tensorflow<2.16,>=2.15``) pairs that companion release with
  the framework series it names. A torchaudio release that names no torch at all (2.11.0) is
  paired by its own number (torchaudio X.Y with torch X.Y): a rule, not metadata, and the row
  says so. torchvision, torchaudio, torchtext and tf-keras get ``==A.B.*`` (their series);
  xformers, whose releases pin one torch each, gets the releases read (``==X`` or ``>=X,<=Y``).
- **pinned**: the framework's own wheel pins it: triton in torch's Linux wheels (per patch; a
  ``python_version`` marker is noted), the ``and-cuda`` extra's nvidia-* wheels in tensorflow's,
  jaxlib and ``jax-cudaNN-plugin`` in jax's ``cudaNN`` extras; ``jax-cudaNN-pjrt`` is pinned by
  each plugin release the jax requirement admits.

``refresh`` runs after the framework refreshes (``refresh_catalog``) and reads little: the
framework wheels of releases those proposed (a new series reads all its patches; a new JAX
version its own), the listings of the declared companions, and the METADATA of companion
releases no row admits yet. It proposes a row for each new release with companions, adds a
package a row lacks, and widens an exact range (``==0.0.34`` -> ``>=0.0.34,<=0.0.35``) when a
newer companion release pairs with a row; it never narrows a row, and a disagreement it cannot
widen is a warning. New text names where each fact was read (the row's ``note``, or a comment on
the package line); refreshed rows name the source ``pypi_index``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Iterable

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ...frameworks import framework as framework_of
from ..companions import FILE, KEY, catalog_key
from ..files import data_dir as default_data_dir
from ..models import Catalog
from ..releases import release_rows
from .common import SOURCE, ReadingIndex, RefreshResult, check_parses_back, load_yaml, not_loaded_from
from .companions_read import Proposal, Reader, admits, exact_spec, provenance
from .companions_text import edit_text


def _widenable(spec: str) -> tuple[str, ...] | None:
    """The endpoints of an exact-form spec ('==X', '>=X,<=Y'), which can be widened by new releases."""
    try:
        parts = list(SpecifierSet(spec))
    except ValueError:
        return None
    if len(parts) == 1 and parts[0].operator == "==" and "*" not in parts[0].version:
        return (parts[0].version,)
    if len(parts) == 2 and {p.operator for p in parts} == {">=", "<="}:
        return tuple(p.version for p in parts)
    return None


# --- the refresh -----------------------------------------------------------------------------------------
def _new_keys(framework: str, result: RefreshResult | None) -> dict[str, list[str]]:
    """Row key -> the patches to read, for the releases the framework's refresh proposes."""
    if result is None or not result.changed:
        return {}
    if framework_of(framework).companions.rows == "version":
        return {v: [v] for v in result.added_patches}
    return {str(e["version"]): [str(p) for p in e["patches"]] for e in result.entries}


def proposals(catalog: Catalog, reader: Reader, framework: str, new: dict[str, list[str]],
              *, every_row: bool = False) -> dict[Version, dict[str, Proposal]]:
    """What the index says the rows of ``framework`` should hold: for the releases in ``new`` (key ->
    patches), for catalog releases without a row, and, from the declared companions, for any release
    (``every_row``: read every release of the framework, as when a file is written afresh)."""
    rows = catalog.companion_rows.rows_of(framework)
    have = {catalog_key(framework, r.version) for r in rows}
    known = {key: list(patches) for key, patches in release_rows(catalog, framework).items()}
    todo = dict(new)
    for key, patches in known.items():
        if key not in todo and (every_row or catalog_key(framework, key) not in have):
            todo[key] = patches
    keys = {catalog_key(framework, k) for k in (*known, *new)}
    out: dict[Version, dict[str, Proposal]] = {}
    for key in sorted(todo, key=Version):
        pinned = reader.pinned(framework, key, todo[key])
        if pinned:
            out.setdefault(catalog_key(framework, key), {}).update(pinned)
    for release, packages in reader.declared(framework, keys, () if every_row else rows).items():
        out.setdefault(release, {}).update(packages)
    return out


def refresh(catalog: Catalog, index: ReadingIndex, *, today: str, results: dict[str, RefreshResult],
            frameworks: Iterable[str], data_dir: str | Path | None = None, python: str = "3.12",
            glibc: str = "2.36") -> RefreshResult:
    """Propose companions.yaml changes for ``frameworks``, given their refresh ``results``; reads only."""
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    path = directory / FILE
    if catalog.companion_rows.path is None or not path.is_file():
        note = (f"{path} does not exist: companions are not refreshed (copy envkit's packaged {FILE} into the "
                "catalog to start from it)")
        return RefreshResult(framework="companions", file=FILE, data_dir=directory, current_text="", proposed_text="",
                             notes=(note,))
    text = path.read_text()
    raw = load_yaml(text)
    written = [(fw, str(r.get("version"))) for fw, rows in ((raw or {}).get(KEY) or {}).items() for r in rows or ()]
    if written != [(r.framework, r.version) for r in catalog.companion_rows.rows]:
        raise not_loaded_from(directory)
    reader = Reader(index, python, glibc)
    changes: dict[str, dict[Version, dict]] = {}
    entries: list[dict] = []
    for framework in frameworks:
        found = proposals(catalog, reader, framework, _new_keys(framework, results.get(framework)))
        plan = _merge(catalog, framework, found, today, reader)
        if plan:
            changes[framework] = plan
            entries.extend({"framework": framework, **copy.deepcopy(p["row"])} for p in plan.values())
    if not changes:
        return RefreshResult(framework="companions", file=FILE, data_dir=directory, current_text=text,
                             proposed_text=text, notes=tuple(reader.notes), warnings=tuple(reader.warnings),
                             reads=tuple(reader.reads))
    proposed = edit_text(text, changes)
    expected = copy.deepcopy(raw)
    body = expected.setdefault(KEY, {}) or {}
    expected[KEY] = body
    for framework, plan in changes.items():
        rows = list(body.get(framework) or [])
        for key, p in sorted(plan.items()):  # as edit_text places them: after the last older row
            keys = [catalog_key(framework, str(r["version"])) for r in rows]
            if key in keys:
                rows[keys.index(key)] = p["row"]
            else:
                older = [i for i, k in enumerate(keys) if k < key]
                rows.insert(older[-1] + 1 if older else 0, p["row"])
        body[framework] = rows
    check_parses_back(FILE, proposed, expected)
    return RefreshResult(framework="companions", file=FILE, data_dir=directory, current_text=text,
                         proposed_text=proposed, entries=tuple(entries), notes=tuple(reader.notes),
                         warnings=tuple(reader.warnings), reads=tuple(reader.reads))


def _version_text(framework: str, key: Version, catalog: Catalog) -> str:
    """The row's version as the framework file writes it ('2.10', '0.9.0.1')."""
    return next((v for v in release_rows(catalog, framework) if catalog_key(framework, v) == key), str(key))


def _merge(catalog: Catalog, framework: str, found: dict[Version, dict[str, Proposal]], today: str,
           reader: Reader) -> dict[Version, dict]:
    """key -> {"row": the row as proposed, "new": bool, "lines": {package: (spec, comment)}, "sources": [...]}"""
    plan: dict[Version, dict] = {}
    rows = {catalog_key(framework, r.version): r for r in catalog.companion_rows.rows_of(framework)}
    for key in sorted(found):
        packages = found[key]
        if not packages:
            continue
        row = rows.get(key)
        version = row.version if row is not None else _version_text(framework, key, catalog)
        if row is None:
            said = provenance(packages)
            plan[key] = {"new": True, "row": {
                "version": version, "sources": [SOURCE],
                "note": f"refreshed from the package index {today}: {said}",
                "packages": {name: p.spec for name, p in packages.items()}}}
            rules = [name for name, p in packages.items() if p.rule]
            reader.notes.append(f"{framework} {version}: new companions row: "
                                + ", ".join(f"{n} {p.spec}" for n, p in packages.items())
                                + (f" ({', '.join(rules)} paired by the same-number rule, not metadata - review)"
                                   if rules else ""))
            continue
        have = dict(row.packages)
        lines: dict[str, tuple[str, str]] = {}
        for name, p in packages.items():
            said = provenance({name: p})
            old = have.get(name)
            if old is None:
                lines[name] = (p.spec, f"refreshed from the package index {today}: {said}")
                reader.notes.append(f"{framework} {version}: adds {name} {p.spec}"
                                    + (" (the same-number rule, not metadata - review)" if p.rule else ""))
                continue
            if p.exact is not None and all(admits(old, v) for v in p.exact):
                continue
            if p.exact is None and SpecifierSet(old) == SpecifierSet(p.spec):
                continue
            ends = _widenable(old)
            if p.exact is not None and ends is not None and p.style != "series":
                spec = exact_spec([*ends, *p.exact])
                lines[name] = (spec, f"was {old}; refreshed from the package index {today}: {said}")
                reader.notes.append(f"{framework} {version}: {name} {old} -> {spec}")
            else:
                reader.warnings.append(f"{framework} {version}: the index says {name} {p.spec} ({said}); the row says "
                                       f"{old} - not changed, review by hand")
        if lines:
            new_row = {"version": row.version, "sources": list(dict.fromkeys([*row.sources, SOURCE])),
                       **({"note": row.note} if row.note is not None else {}),
                       "packages": {**have, **{n: s for n, (s, _) in lines.items()}}}
            plan[key] = {"new": False, "row": new_row, "lines": lines}
    return plan


