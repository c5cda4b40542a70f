"""The companions' pairings as the index tells them (for ``companions.refresh``): each framework wheel's own pins
(triton, the and-cuda nvidia-* wheels, jaxlib and the JAX plugins) and each companion release's own requirement on its
framework (torchvision, torchaudio, torchtext, xformers, tf-keras), read from wheel METADATA, as ``Proposal``s
with the ``CompanionRead``s they rest on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ...errors import PackageIndexError
from ...frameworks import framework as framework_of
from ..companions import release_key
from .common import ReadingIndex, for_extra, metadata_source, published, spec_text

if TYPE_CHECKING:
    from ...index.client import WheelFile
    from ..companions import CompanionRow


_PYTHONS = ("3.15", "3.14", "3.13", "3.12", "3.11", "3.10", "3.9", "3.8")
_CUDA_EXTRA = re.compile(r"^cuda(?P<major>\d+)$")


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
def exact_spec(versions: Iterable[str]) -> str:
    vs = sorted({Version(v) for v in versions})
    return f"=={vs[0]}" if len(vs) == 1 else f">={vs[0]},<={vs[-1]}"


def series_spec(versions: Iterable[str]) -> tuple[str, str | None]:
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


# --- reading -------------------------------------------------------------------------------------------
def _linux_wheel(index: ReadingIndex, project: str, version: Version, python: str, glibc: str) -> WheelFile | None:
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


class Reader:
    def __init__(self, index: ReadingIndex, python: str, glibc: str):
        self.index = index
        self.python = python
        self.glibc = glibc
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.reads: list[CompanionRead] = []

    def requires(self, project: str, version: Version) -> tuple[list[Requirement], str] | None:
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
    def pinned(self, framework: str, key: str, patches: Iterable[str]) -> dict[str, Proposal]:
        """What the framework's own wheels of row ``key`` (its ``patches``) pin, as ``Framework.companions`` says
        to read them."""
        how = framework_of(framework).companions
        if how.cuda_extras:
            return self._cuda_extras(framework, key)
        per: dict[str, list[tuple[str, SpecifierSet, str, str]]] = {}  # package -> (patch, spec, marker, url)
        for patch in sorted(patches, key=Version):
            got = self.requires(framework, Version(patch))
            if got is None:
                continue
            requires, url = got
            wanted = {str(canonicalize_name(r.name)): r for r in requires
                      if canonicalize_name(r.name) in how.pinned and _on_linux(r)}
            if how.pinned_extra:
                wanted.update(for_extra(requires, how.pinned_extra, self.python))
            for name, r in wanted.items():
                marker = str(r.marker) if r.marker is not None else ""
                per.setdefault(name, []).append((patch, r.specifier, marker, url))
        out: dict[str, Proposal] = {}
        for name, rows in per.items():
            out[name] = self._combine(framework, key, name, rows)
        return out

    def _combine(self, framework: str, key: str, name: str, rows: list[tuple[str, SpecifierSet, str, str]]) -> Proposal:
        owner = framework
        reads = []
        for patch, spec, marker, url in rows:
            py = re.findall(r'python_version\s*(<=?|>=?)\s*"([0-9.]+)"', marker)
            said = f"{owner} {patch}'s Requires-Dist {name}{spec_text(spec)}"
            if py:
                said += f" (only for Python {' and '.join(op + v for op, v in py)})"
            reads.append(CompanionRead(framework, key, name, None, said, url, f"{owner} {patch}"))
        self.reads.extend(reads)
        exact = [exact_of(spec) for _, spec, _, _ in rows]
        pins = [p for p in exact if p]
        if len(pins) == len(exact):
            return Proposal(exact_spec(pins), tuple(pins), "pinned", reads)
        texts = {norm_spec(spec) for _, spec, _, _ in rows}
        newest = norm_spec(rows[-1][1])
        if len(texts) > 1:
            self.warnings.append(f"{framework} {key}: its patches require {name} differently ("
                                 + "; ".join(f"{p}: {norm_spec(s)}" for p, s, _, _ in rows)
                                 + f"); the row takes {rows[-1][0]}'s - review")
        return Proposal(newest, None, "pinned", reads)

    def _cuda_extras(self, framework: str, version: str) -> dict[str, Proposal]:
        """JAX's pins: per cudaNN extra of its wheel, jaxlib and the CUDA plugin (and each plugin's pjrt)."""
        got = self.requires(framework, Version(version))
        if got is None:
            return {}
        requires, url = got
        extras = sorted({m["major"] for r in requires if r.marker is not None
                         for e in re.findall(r"""extra\s*==\s*["']([^"']+)["']""", str(r.marker))
                         if (m := _CUDA_EXTRA.match(canonicalize_name(e)))}, key=int)
        out: dict[str, Proposal] = {}
        for major in extras:
            wanted = for_extra(requires, f"cuda{major}", self.python)
            lib = wanted.get("jaxlib")
            if lib is not None:
                self._jaxlib(version, major, lib, url, out)
            plugin = f"jax-cuda{major}-plugin"
            plug = wanted.get(plugin)
            if plug is not None:
                self._jax_plugin(version, major, plug, url, out)
        return out

    def _jaxlib(self, version: str, major: str, lib: Requirement, url: str, out: dict[str, Proposal]) -> None:
        """jaxlib as jax ``version``'s cuda``major`` extra requires it, into ``out`` (the first extra's wins)."""
        spec = norm_spec(lib.specifier)
        if "jaxlib" in out:
            if out["jaxlib"].spec != spec:
                self.warnings.append(f"jax {version}: its cuda extras require jaxlib differently "
                                     f"({out['jaxlib'].spec}, {spec}); the row takes the first - review")
            return
        said = f"jax {version}'s Requires-Dist jaxlib{spec_text(lib.specifier)} (extra cuda{major})"
        read = CompanionRead("jax", version, "jaxlib", None, said, url, f"jax {version}")
        self.reads.append(read)
        exact = exact_of(lib.specifier)
        out["jaxlib"] = Proposal(spec, (exact,) if exact else None, "pinned", [read])

    def _jax_plugin(self, version: str, major: str, plug: Requirement, url: str, out: dict[str, Proposal]) -> None:
        """The CUDA plugin jax ``version``'s cuda``major`` extra requires, and the pjrt its fitting releases pin."""
        plugin = f"jax-cuda{major}-plugin"
        available = self.listing(plugin) or []
        fits = [v for v in available if plug.specifier.contains(v, prereleases=True)]
        if not fits:
            self.notes.append(f"jax {version}: no {plugin} release on the index satisfies its cuda{major} extra "
                              f"({plug}); {plugin} not paired")
            return
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

    # --- declared by the companions' own wheels -------------------------------------------------------------
    def declared(
        self, framework: str, keys: set[Version], rows: Iterable[CompanionRow]
    ) -> dict[Version, dict[str, Proposal]]:
        out: dict[Version, dict[str, Proposal]] = {}
        for project, style, same_number in framework_of(framework).companions.declared:
            name = canonicalize_name(project)
            specs = [dict(r.packages)[name] for r in rows if name in dict(r.packages)]
            versions = self.listing(project)
            if versions is None:
                continue
            admitted = [v for v in versions if any(admits(s, str(v)) for s in specs)]
            oldest = min(admitted) if admitted else None
            new = [v for v in versions if v not in admitted and (oldest is None or v >= oldest)]
            paired = self._paired(framework, project, new, keys, same_number=same_number)
            for key, got in paired.items():
                out.setdefault(key, {})[name] = self._declared_proposal(framework, project, key, style, got)
        return out

    def _paired(self, framework: str, project: str, versions: list[Version], keys: set[Version], *,
                same_number: bool) -> dict[Version, list[tuple[str, CompanionRead, bool]]]:
        """Each of ``versions`` of ``project`` by the framework release (of ``keys``) it pairs with: by its own
        Requires-Dist on the framework, else (``same_number``) by the same-number rule."""
        name = canonicalize_name(project)
        paired: dict[Version, list[tuple[str, CompanionRead, bool]]] = {}
        unpaired = []
        for v in versions:
            got = self.requires(project, v)
            if got is None:
                continue
            requires, url = got
            reqs = [r for r in requires if canonicalize_name(r.name) == canonicalize_name(framework)
                    and _on_linux(r)]
            key, rule = None, False
            if reqs:
                key = _pairing(reqs[0], framework)
                how = f"{project} {v}'s Requires-Dist {reqs[0].name}{spec_text(reqs[0].specifier)}"
            elif same_number:
                key, rule = release_key(framework, str(v)), True
                how = (f"{project} {v} names no {framework} requirement: paired with "
                       f"{framework} {key} by the same-number rule (a rule, not metadata - review)")
            if key is None:
                unpaired.append(str(v))
                continue
            if key not in keys:
                self.notes.append(f"{project} {v} pairs with {framework} {key}, which the catalog does "
                                  "not have; not paired")
                continue
            read = CompanionRead(framework, str(key), name, str(v), how, url, "" if rule else f"{project} {v}")
            paired.setdefault(key, []).append((str(v), read, rule))
        if unpaired:
            self.notes.append(f"{project} {', '.join(unpaired)}: no {framework} requirement to pair by; "
                              "not paired")
        return paired

    def _declared_proposal(self, framework: str, project: str, key: Version, style: str,
                           got: list[tuple[str, CompanionRead, bool]]) -> Proposal:
        vs = [v for v, _, _ in got]
        reads = [r for _, r, _ in got]
        self.reads.extend(reads)
        if style == "series":
            spec, warn = series_spec(vs)
            if warn:
                self.warnings.append(f"{framework} {key}: {project}: {warn}")
        else:
            spec = exact_spec(vs)
        return Proposal(spec, tuple(vs), style, reads, rule=any(rule for _, _, rule in got))


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


def admits(spec: str, version: str) -> bool:
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except (ValueError, InvalidVersion):
        return False
