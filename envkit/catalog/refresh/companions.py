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
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ...errors import CatalogError, PackageIndexError
from ..models import Catalog
from ..files import data_dir as default_data_dir
from ..companions import FILE, KEY, release_key
from .common import (SOURCE, RefreshIndex, RefreshResult, check_parses_back, for_extra, load_yaml, metadata_source,
                     not_loaded_from, published, q, spec_text, splice)

# the companions whose own METADATA names the framework: project -> (style, pairs by its own number)
DECLARED = {
    "torch": {"torchvision": ("series", False), "torchaudio": ("series", True), "torchtext": ("series", False),
              "xformers": ("exact", False)},
    "jax": {},
    "tensorflow": {"tf-keras": ("series", False)},
}
PROJECT = {"torch": "torch", "jax": "jax", "tensorflow": "tensorflow"}
_PYTHONS = ("3.15", "3.14", "3.13", "3.12", "3.11", "3.10", "3.9", "3.8")
_CUDA_EXTRA = re.compile(r"^cuda(?P<major>\d+)$")
_ROW = re.compile(r'^    - version: "(?P<v>[^"]+)"\s*(#.*)?$')
_SECTION = re.compile(r"^  (?P<fw>[a-z]+):\s*(?P<empty>\[\])?\s*(#.*)?$")
_SOURCES = re.compile(r"^      sources: \[(?P<keys>[^\]]*)\](?P<tail>.*)$")
_PACKAGES = re.compile(r"^      packages:\s*(#.*)?$")
_PACKAGE = re.compile(r'^        (?P<name>[A-Za-z0-9._-]+): "(?P<spec>[^"]*)"(?P<tail>.*)$')
_LINUX = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux", "os_name": "posix",
          "platform_python_implementation": "CPython", "implementation_name": "cpython"}


@dataclass(frozen=True)
class CompanionRead:
    """One fact read from the index: ``package`` (at ``version``) pairs with ``framework`` ``release``."""

    framework: str
    release: str  # the row: a torch/tensorflow series, a jax version
    package: str
    version: str | None  # the companion release read (declared), or None (pinned by the framework)
    how: str  # what the METADATA said, or the rule applied
    source: str  # the METADATA read
    by: str = ""  # whose METADATA: 'torch 2.6.0', 'torchvision 0.21.0' ('' for a rule)

    def to_json(self) -> dict:
        return {"framework": self.framework, "release": self.release, "package": self.package,
                "version": self.version, "how": self.how, "source": self.source, "by": self.by}

    @property
    def text(self) -> str:
        return f"{self.how} ({self.source})"


@dataclass
class Proposal:
    """What the index says one row's ``package`` should be."""

    spec: str
    exact: tuple[str, ...] | None  # the single releases the spec was built from, when they are all exact
    style: str  # "series" | "exact" | "pinned"
    reads: list[CompanionRead] = field(default_factory=list)
    rule: bool = False  # paired by a rule (same number), not by metadata


# --- specifiers ------------------------------------------------------------------------------------
def exact_spec(versions) -> str:
    vs = sorted({Version(v) for v in versions})
    return f"=={vs[0]}" if len(vs) == 1 else f">={vs[0]},<={vs[-1]}"


def series_spec(versions) -> tuple[str, str | None]:
    """'==A.B.*' for the newest companion series among ``versions`` (and a warning when there are several)."""
    groups = sorted({Version(v).release[:2] for v in versions})
    newest = ".".join(str(p) for p in groups[-1])
    warn = None
    if len(groups) > 1:
        warn = ("releases of several series pair with it (" + ", ".join(sorted(versions, key=Version))
                + f"); the row takes the newest series, {newest}")
    return f"=={newest}.*", warn


def norm_spec(spec: SpecifierSet) -> str:
    """'==X' for '<=X,>=X', else the catalog's spelling (lower bounds first)."""
    specs = list(spec)
    if len(specs) == 2 and {s.operator for s in specs} == {">=", "<="} and len({s.version for s in specs}) == 1:
        return f"=={specs[0].version}"
    return spec_text(spec)


def exact_of(spec: SpecifierSet) -> str | None:
    """X for '==X' (or '<=X,>=X')."""
    n = norm_spec(spec)
    return n[2:] if n.startswith("==") and "," not in n and "*" not in n else None


def _admits(spec: str, version: str) -> bool:
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except (ValueError, InvalidVersion):
        return False


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


# --- reading -------------------------------------------------------------------------------------------
def _linux_wheel(index: RefreshIndex, project: str, version: Version, python: str, glibc: str):
    """A Linux x86_64 (or pure) wheel of ``version``: the requested CPython's, else any CPython's."""
    for py in (python, *(p for p in _PYTHONS if p != python)):
        wheel = index.wheel_for(project, version, py, glibc)
        if wheel is not None:
            return wheel
    # a tag wheel_for does not read (xformers 0.0.35: py39-none-manylinux_2_28_x86_64): any Linux x86_64 or pure one
    others = [w for w in index.wheels(project) if w.version == version and not w.yanked
              and any(t.endswith("-any") or ("linux" in t and t.endswith("x86_64")) for t in w.tags)]
    return sorted(others, key=lambda w: w.filename)[-1] if others else None


def _on_linux(req: Requirement, extra: str = "") -> bool:
    """Whether ``req`` applies on Linux x86_64 for some CPython (a python_version marker does not hide a pairing)."""
    if req.marker is None:
        return not extra
    return any(req.marker.evaluate({**_LINUX, "python_version": py, "python_full_version": py + ".0", "extra": extra})
               for py in _PYTHONS)


def _pairing(req: Requirement, framework: str) -> Version | None:
    """The row a companion's requirement on the framework names: its exact pin's, else its floor's."""
    pins = [s.version for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
    floors = [s.version for s in req.specifier if s.operator == ">="]
    named = pins[0] if len(pins) == 1 else (max(floors, key=Version) if floors and not pins else None)
    if named is None:
        return None
    try:
        return release_key(framework, named)
    except InvalidVersion:
        return None


class _Reader:
    def __init__(self, index: RefreshIndex, python: str, glibc: str):
        self.index = index
        self.python = python
        self.glibc = glibc
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.reads: list[CompanionRead] = []

    def requires(self, project: str, version: Version):
        """(requirements, metadata URL) of ``version``'s Linux wheel, or None (said in a note)."""
        wheel = _linux_wheel(self.index, project, version, self.python, self.glibc)
        if wheel is None:
            self.notes.append(f"{project} {version}: no Linux x86_64 wheel on the index; not read")
            return None
        try:
            return self.index.requires(wheel), metadata_source(wheel)
        except PackageIndexError as exc:
            self.warnings.append(f"{project} {version}: cannot read its METADATA ({wheel.filename}): {exc.message}")
            return None

    def listing(self, project: str) -> list[Version] | None:
        try:
            return published(self.index, project)
        except PackageIndexError as exc:
            self.warnings.append(f"{project}: {exc.message}; its companion rows are not refreshed")
            return None

    # --- pinned by the framework's own wheels -------------------------------------------------------------
    def pinned(self, framework: str, key: str, patches) -> dict[str, Proposal]:
        if framework == "jax":
            return self._jax(key)
        per: dict[str, list[tuple[str, SpecifierSet, str, str]]] = {}  # package -> (patch, spec, marker, url)
        for patch in sorted(patches, key=Version):
            got = self.requires(PROJECT[framework], Version(patch))
            if got is None:
                continue
            requires, url = got
            if framework == "torch":
                wanted = {canonicalize_name(r.name): r for r in requires
                          if canonicalize_name(r.name) == "triton" and _on_linux(r)}
            else:
                wanted = for_extra(requires, "and-cuda", self.python)
            for name, r in wanted.items():
                marker = str(r.marker) if r.marker is not None else ""
                per.setdefault(name, []).append((patch, r.specifier, marker, url))
        out = {}
        for name, rows in per.items():
            out[name] = self._combine(framework, key, name, rows)
        return out

    def _combine(self, framework: str, key: str, name: str, rows) -> Proposal:
        owner = PROJECT[framework]
        reads = []
        for patch, spec, marker, url in rows:
            py = re.findall(r'python_version\s*(<=?|>=?)\s*"([0-9.]+)"', marker)
            said = f"{owner} {patch}'s Requires-Dist {name}{spec_text(spec)}"
            if py:
                said += f" (only for Python {' and '.join(op + v for op, v in py)})"
            reads.append(CompanionRead(framework, key, name, None, said, url, f"{owner} {patch}"))
        self.reads.extend(reads)
        pins = [exact_of(spec) for _, spec, _, _ in rows]
        if all(pins):
            return Proposal(exact_spec(pins), tuple(pins), "pinned", reads)
        texts = {norm_spec(spec) for _, spec, _, _ in rows}
        newest = norm_spec(rows[-1][1])
        if len(texts) > 1:
            self.warnings.append(f"{framework} {key}: its patches require {name} differently ("
                                 + "; ".join(f"{p}: {norm_spec(s)}" for p, s, _, _ in rows)
                                 + f"); the row takes {rows[-1][0]}'s - review")
        return Proposal(newest, None, "pinned", reads)

    def _jax(self, version: str) -> dict[str, Proposal]:
        got = self.requires("jax", Version(version))
        if got is None:
            return {}
        requires, url = got
        extras = sorted({m["major"] for r in requires if r.marker is not None
                         for e in re.findall(r"""extra\s*==\s*["']([^"']+)["']""", str(r.marker))
                         if (m := _CUDA_EXTRA.match(canonicalize_name(e)))}, key=int)
        out: dict[str, Proposal] = {}
        for major in extras:
            wanted = for_extra(requires, f"cuda{major}", self.python)
            plugin = f"jax-cuda{major}-plugin"
            lib, plug = wanted.get("jaxlib"), wanted.get(plugin)
            if lib is not None:
                spec = norm_spec(lib.specifier)
                if "jaxlib" in out:
                    if out["jaxlib"].spec != spec:
                        self.warnings.append(f"jax {version}: its cuda extras require jaxlib differently "
                                             f"({out['jaxlib'].spec}, {spec}); the row takes the first - review")
                else:
                    said = f"jax {version}'s Requires-Dist jaxlib{spec_text(lib.specifier)} (extra cuda{major})"
                    read = CompanionRead("jax", version, "jaxlib", None, said, url, f"jax {version}")
                    self.reads.append(read)
                    out["jaxlib"] = Proposal(spec, (exact_of(lib.specifier),) if exact_of(lib.specifier) else None,
                                             "pinned", [read])
            if plug is None:
                continue
            available = self.listing(plugin) or []
            fits = [v for v in available if plug.specifier.contains(v, prereleases=True)]
            if not fits:
                self.notes.append(f"jax {version}: no {plugin} release on the index satisfies its cuda{major} extra "
                                  f"({plug}); {plugin} not paired")
                continue
            said = f"jax {version}'s Requires-Dist {plugin}{spec_text(plug.specifier)} (extra cuda{major})"
            read = CompanionRead("jax", version, plugin, None, said, url, f"jax {version}")
            self.reads.append(read)
            out[plugin] = Proposal(norm_spec(plug.specifier), tuple(str(v) for v in fits)
                                   if exact_of(plug.specifier) else None, "pinned", [read])
            pjrt = f"jax-cuda{major}-pjrt"
            pins, reads = [], []
            for v in fits:
                got = self.requires(plugin, v)
                if got is None:
                    continue
                preqs, purl = got
                pin = next((exact_of(r.specifier) for r in preqs
                            if canonicalize_name(r.name) == pjrt and r.marker is None), None)
                if pin is None:
                    continue
                pins.append(pin)
                reads.append(CompanionRead("jax", version, pjrt, pin, f"{plugin} {v}'s Requires-Dist {pjrt}=={pin}",
                                           purl, f"{plugin} {v}"))
            if pins:
                self.reads.extend(reads)
                out[pjrt] = Proposal(exact_spec(pins), tuple(pins), "exact", reads)
        return out

    # --- declared by the companions' own wheels -------------------------------------------------------------
    def declared(self, framework: str, keys: set[Version], rows) -> dict[Version, dict[str, Proposal]]:
        out: dict[Version, dict[str, Proposal]] = {}
        for project, (style, same_number) in DECLARED[framework].items():
            name = canonicalize_name(project)
            specs = [dict(r.packages)[name] for r in rows if name in dict(r.packages)]
            versions = self.listing(project)
            if versions is None:
                continue
            admitted = [v for v in versions if any(_admits(s, str(v)) for s in specs)]
            oldest = min(admitted) if admitted else None
            paired: dict[Version, list[tuple[str, CompanionRead, bool]]] = {}
            unpaired = []
            for v in versions:
                if v in admitted or (oldest is not None and v < oldest):
                    continue
                got = self.requires(project, v)
                if got is None:
                    continue
                requires, url = got
                reqs = [r for r in requires if canonicalize_name(r.name) == canonicalize_name(PROJECT[framework])
                        and _on_linux(r)]
                key, rule = None, False
                if reqs:
                    key = _pairing(reqs[0], framework)
                    how = f"{project} {v}'s Requires-Dist {reqs[0].name}{spec_text(reqs[0].specifier)}"
                elif same_number:
                    key, rule = release_key(framework, str(v)), True
                    how = (f"{project} {v} names no {PROJECT[framework]} requirement: paired with "
                           f"{PROJECT[framework]} {key} by the same-number rule (a rule, not metadata - review)")
                if key is None:
                    unpaired.append(str(v))
                    continue
                if key not in keys:
                    self.notes.append(f"{project} {v} pairs with {PROJECT[framework]} {key}, which the catalog does "
                                      "not have; not paired")
                    continue
                read = CompanionRead(framework, str(key), name, str(v), how, url, "" if rule else f"{project} {v}")
                paired.setdefault(key, []).append((str(v), read, rule))
            if unpaired:
                self.notes.append(f"{project} {', '.join(unpaired)}: no {PROJECT[framework]} requirement to pair by; "
                                  "not paired")
            for key, got in paired.items():
                vs = [v for v, _, _ in got]
                reads = [r for _, r, _ in got]
                self.reads.extend(reads)
                if style == "series":
                    spec, warn = series_spec(vs)
                    if warn:
                        self.warnings.append(f"{framework} {key}: {project}: {warn}")
                else:
                    spec = exact_spec(vs)
                out.setdefault(key, {})[name] = Proposal(spec, tuple(vs), style, reads,
                                                         rule=any(rule for _, _, rule in got))
        return out


def provenance(packages: dict[str, Proposal]) -> str:
    """Where a row's facts were read, compactly: whose Requires-Dist said what, each rule, the METADATA URLs."""
    by: dict[str, list[str]] = {}
    rules: list[str] = []
    urls: list[str] = []
    for p in packages.values():
        for r in p.reads:
            prefix = f"{r.by}'s Requires-Dist "
            if r.by and r.how.startswith(prefix):
                by.setdefault(prefix, []).append(r.how[len(prefix):])
            else:
                rules.append(r.how)
            urls.append(r.source)
    parts = [prefix + ", ".join(dict.fromkeys(said)) for prefix, said in by.items()]
    return "; ".join([*parts, *rules]) + ("; METADATA read: " + ", ".join(dict.fromkeys(urls)) if urls else "")


# --- the refresh -----------------------------------------------------------------------------------------
def _new_keys(framework: str, result: RefreshResult | None) -> dict[str, list[str]]:
    """Row key -> the patches to read, for the releases the framework's refresh proposes."""
    if result is None or not result.changed:
        return {}
    if framework == "jax":
        return {v: [v] for v in result.added_patches}
    return {str(e["version"]): [str(p) for p in e["patches"]] for e in result.entries}


def proposals(catalog: Catalog, reader: _Reader, framework: str, new: dict[str, list[str]],
              *, every_row: bool = False) -> dict[Version, dict[str, Proposal]]:
    """What the index says the rows of ``framework`` should hold: for the releases in ``new`` (key ->
    patches), for catalog releases without a row, and, from the declared companions, for any release
    (``every_row``: read every release of the framework, as when a file is written afresh)."""
    rows = catalog.companion_rows.rows_of(framework)
    have = {release_key(framework, r.version) for r in rows}
    if framework == "torch":
        known = {r.version: list(r.patches) for r in catalog.torch_releases()}
    elif framework == "tensorflow":
        known = {r.version: list(r.patches) for r in catalog.tensorflow.releases}
    else:
        known = {v: [v] for v in catalog.jax.versions}
    todo = dict(new)
    for key, patches in known.items():
        if key not in todo and (every_row or release_key(framework, key) not in have):
            todo[key] = patches
    keys = {release_key(framework, k) for k in (*known, *new)}
    out: dict[Version, dict[str, Proposal]] = {}
    for key in sorted(todo, key=Version):
        pinned = reader.pinned(framework, key, todo[key])
        if pinned:
            out.setdefault(release_key(framework, key), {}).update(pinned)
    for key, packages in reader.declared(framework, keys, () if every_row else rows).items():
        out.setdefault(key, {}).update(packages)
    return out


def refresh(catalog: Catalog, index: RefreshIndex, *, today: str, results: dict[str, RefreshResult],
            frameworks, data_dir: str | Path | None = None, python: str = "3.12",
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
    reader = _Reader(index, python, glibc)
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
    proposed = _edit_text(text, changes)
    expected = copy.deepcopy(raw)
    body = expected.setdefault(KEY, {}) or {}
    expected[KEY] = body
    for framework, plan in changes.items():
        rows = list(body.get(framework) or [])
        for key, p in sorted(plan.items()):  # as _edit_text places them: after the last older row
            keys = [release_key(framework, str(r["version"])) for r in rows]
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
    if framework == "torch":
        listed = [r.version for r in catalog.torch_releases()]
    elif framework == "tensorflow":
        listed = [r.version for r in catalog.tensorflow.releases]
    else:
        listed = list(catalog.jax.versions)
    return next((v for v in listed if release_key(framework, v) == key), str(key))


def _merge(catalog: Catalog, framework: str, found: dict[Version, dict[str, Proposal]], today: str,
           reader: _Reader) -> dict[Version, dict]:
    """key -> {"row": the row as proposed, "new": bool, "lines": {package: (spec, comment)}, "sources": [...]}"""
    plan: dict[Version, dict] = {}
    rows = {release_key(framework, r.version): r for r in catalog.companion_rows.rows_of(framework)}
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
            if p.exact is not None and all(_admits(old, v) for v in p.exact):
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


# --- editing the text --------------------------------------------------------------------------------------
def render_row(row: dict, comments: dict[str, str] | None = None) -> str:
    """One row in companions.yaml's layout (block mappings, four-space list items)."""
    lines = [f"    - version: {q(row['version'])}\n", f"      sources: [{', '.join(row['sources'])}]\n"]
    if row.get("note") is not None:
        lines.append(f"      note: {q(row['note'])}\n")
    lines.append("      packages:\n")
    for name, spec in row["packages"].items():
        tail = f"  # {comments[name]}" if comments and name in comments else ""
        lines.append(f"        {name}: {q(spec)}{tail}\n")
    return "".join(lines)


def _layout(lines: list[str]) -> dict[str, dict]:
    """framework -> {"line": its section line, "empty": written '[]', "rows": [(version, first, end)], "end": int}."""
    try:
        top = next(i for i, line in enumerate(lines) if line.rstrip() == f"{KEY}:")
    except StopIteration:
        raise CatalogError(f"{FILE} has no top-level '{KEY}:' line",
                           hint="the file's layout is not the one refresh edits; add the rows by hand") from None
    out: dict[str, dict] = {}
    current = None
    for i in range(top + 1, len(lines)):
        line = lines[i].rstrip("\r\n")
        if (m := _SECTION.match(line)) is not None:
            current = out[m["fw"]] = {"line": i, "empty": bool(m["empty"]), "rows": [], "end": i + 1}
        elif (m := _ROW.match(line)) is not None and current is not None:
            current["rows"].append([m["v"], i, i + 1])
            current["end"] = i + 1
        elif line.startswith("      ") and current is not None and current["rows"]:
            current["rows"][-1][2] = i + 1
            current["end"] = i + 1
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        elif not line.startswith(" "):
            break
        else:
            raise CatalogError(f"{FILE}:{i + 1}: unexpected line under {KEY}: {line!r}",
                               hint="refresh edits rows laid out as '    - version: ...' with six-space fields; "
                                    "add the rows by hand")
    out["_end"] = {"end": max([top + 1] + [s["end"] for s in out.values()])}
    return out


def _edit_text(text: str, changes: dict[str, dict[Version, dict]]) -> str:
    lines = text.splitlines(keepends=True)
    layout = _layout(lines)
    insert: dict[int, list[str]] = {}
    replace: dict[int, list[str]] = {}
    for framework, plan in changes.items():
        section = layout.get(framework)
        blocks = [(release_key(framework, v), first, end) for v, first, end in (section or {}).get("rows", [])]
        for key, p in sorted(plan.items()):
            if p["new"]:
                text_row = render_row(p["row"])
                if section is None:
                    insert.setdefault(layout["_end"]["end"], []).append(f"  {framework}:\n{text_row}")
                    section = {"line": None, "empty": False, "rows": [], "end": layout["_end"]["end"]}
                    layout[framework] = section
                    continue
                if section["empty"]:
                    replace[section["line"]] = [f"  {framework}:\n"]
                    section["empty"] = False
                before = [b for b in blocks if b[0] < key]
                at = before[-1][2] if before else (blocks[0][1] if blocks else section["end"])
                insert.setdefault(at, []).append(text_row)
                continue
            _, first, end = next(b for b in blocks if b[0] == key)
            src = [i for i in range(first, end) if _SOURCES.match(lines[i].rstrip("\r\n"))]
            head = [i for i in range(first, end) if _PACKAGES.match(lines[i].rstrip("\r\n"))]
            if len(src) != 1 or len(head) != 1:
                raise CatalogError(f"{FILE}: the {framework} {p['row']['version']} row has no one-line "
                                   "'sources: [...]' and block 'packages:'", hint="add the companions by hand")
            m = _SOURCES.match(lines[src[0]].rstrip("\r\n"))
            replace[src[0]] = [f"      sources: [{', '.join(p['row']['sources'])}]{m['tail']}\n"]
            items = {}
            last = head[0]
            for i in range(head[0] + 1, end):
                pm = _PACKAGE.match(lines[i].rstrip("\r\n"))
                if pm is not None:
                    items[canonicalize_name(pm["name"])] = (i, pm["name"])
                    last = i
            added = []
            for name, (spec, comment) in p["lines"].items():
                if name in items:
                    i, spelled = items[name]
                    replace[i] = [f"        {spelled}: {q(spec)}  # {comment}\n"]
                else:
                    added.append(f"        {name}: {q(spec)}  # {comment}\n")
            if added:
                insert.setdefault(last + 1, []).extend(added)
    return splice(lines, insert, replace)


__all__ = ["DECLARED", "CompanionRead", "Proposal", "exact_spec", "proposals", "refresh", "render_row",
           "series_spec"]
