"""One joint solve of an image's framework and its extra packages.

The plan (``resolve.plan``) lists every framework build that passes the catalog's rules for the
fleet, in order of preference (newest version first, the index's default build first). Which
of them the image gets is decided together with the extras, by uv, exactly as the build
installs (binary only, the base's Python and glibc, the same indexes):

1. The extras that are a framework's companions (``Catalog.companions``: torchvision,
   torchaudio, ...) and carry a version narrow the builds to those releases they pair with.
2. A *probe* solves the extras beside the framework at any version still allowed, on the
   spec's index (which holds every release's default build): uv picks the newest framework
   version the extras admit, and backs off to an older one only when an extra requires it
   (``xformers==0.0.29.post3`` needs ``torch==2.6.0``). The builds of one framework requirement
   (``torch``; ``jax[cuda13]`` apart from ``jax[cuda12]``) form one probe; the next is tried
   only when one cannot be solved at all.
3. The preferred build of the version uv picked is the image's. A default build's probe is
   its final solve; another variant's is solved again from its own index (its wheels
   differ only in the CUDA libraries they pin), as is a solve whose companions uv paired
   otherwise than the catalog (torchaudio >= 2.9 declares no torch pin).

The framework's own closure is what the framework requires, transitively, in that one solve
(``closure.framework_group``); the rest is the extras'. A package with no wheel for the image
is refused naming it, the newest release that has one, and the ways out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..catalog.models import Catalog
from ..errors import PackageIndexError, ResolutionError
from ..index.closure import ClosureError, Pin
from ..lock import HELD_BACK, PIP_TOPIC, Decision
from .candidates import Candidate

if TYPE_CHECKING:
    from ..index.client import WheelFile

PROBE_RETRIES = 4  # versions the index has and the catalog does not, skipped one at a time


class Index(Protocol):
    """What the resolver asks of a package index (``index.client.PackageIndex``; fakes in the tests)."""
    url: str

    def versions(self, project: str) -> list[Version]: ...
    def releases(self, project: str) -> list[Version]: ...
    def wheel_for(self, project: str, version: Version, python: str, glibc: str) -> WheelFile | None: ...
    def requires(self, wheel: WheelFile) -> list[Requirement]: ...


@dataclass(frozen=True)
class Target:
    """What one image's joint solve is about (from its plan)."""
    name: str
    extras: tuple[str, ...]  # the spec's pip: requirements
    python: str
    glibc: str
    caps: Callable[[Candidate], tuple[str, ...]] = lambda c: ()  # constraints on a build's solves (strict policy's
    # CUDA runtime cap)


@dataclass(frozen=True)
class Joint:
    candidate: Candidate
    pins: tuple[Pin, ...]  # the whole closure, framework and extras
    fw_url: str  # where the framework comes from
    extra_index_url: str | None  # the spec's index, when the framework has its own
    why: str | None  # why not the plan's first build (None: it is the plan's first)
    probes: int  # uv solves it took
    constraints: tuple[str, ...] = ()  # beside the requirements in the final solve (caps, companion pairing)

    def solve_again(self, closure: Closure, t: Target, *more: str) -> list[Pin]:
        """The final solve with ``more`` requirements added (to ask uv why something was held back)."""
        return closure([self.candidate.requirement, *t.extras, *more], python=t.python, glibc=t.glibc,
                       index_url=self.fw_url, extra_index_url=self.extra_index_url,
                       extra_constraints=list(self.constraints))


class PackageRefusal(ResolutionError):
    """One package of the image's pip: cannot be had as asked (``package``: its canonical name, which the
    error's location points at)."""

    def __init__(self, message: str, *, package: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.package = package


class NoWheelError(PackageRefusal):
    """A package the image needs has no wheel for it (the build installs wheels only)."""


Closure = Callable[..., list[Pin]]


def probe_key(c: Candidate) -> str:
    """The requirement one probe asks for, less its version: 'torch', 'jax[cuda13]', 'tensorflow[and-cuda]'."""
    return c.requirement.split("==", 1)[0]


def version_spec(allowed: set[Version], known: set[Version]) -> str:
    """A specifier admitting every version in ``allowed`` and none of the other ``known`` ones between them."""
    lo, hi = min(allowed), max(allowed)
    parts = [f">={lo}", f"<={hi}"] + [f"!={v}" for v in sorted(known - allowed) if lo < v < hi]
    return ",".join(parts)


def solve(t: Target, viable: list[Candidate], catalog: Catalog, index: Index, closure: Closure,
          known: set[Version]) -> Joint:
    """The build and closure of one image with extras; ``viable``: the plan's builds, preferred first;
    ``known``: every version of the framework the catalog lists (to fence the probe's range)."""
    viable = paired(t, viable, catalog)
    groups: dict[str, list[Candidate]] = {}
    for c in viable:
        groups.setdefault(probe_key(c), []).append(c)
    failures: list[tuple[str, ClosureError]] = []
    probes = 0
    for key, group in groups.items():
        skip: set[Version] = set()
        shared = _shared_pairing(group, catalog)  # every build of the probe pairs so: asked at once, no second solve
        for _ in range(PROBE_RETRIES):
            allowed = {Version(c.version) for c in group} - skip
            if not allowed:
                break
            requirement = key + version_spec(allowed, known | skip)
            probes += 1
            try:
                pins = closure([requirement, *t.extras], python=t.python, glibc=t.glibc, index_url=index.url,
                               extra_constraints=[*t.caps(group[0]), *shared])
            except ClosureError as exc:
                if exc.no_wheel and canonicalize_name(exc.no_wheel) != canonicalize_name(group[0].framework):
                    raise no_wheel(t, exc, index) from None
                failures.append((requirement, exc))
                break
            picked = _version_of(pins, group[0].framework)
            chosen = next((c for c in group if Version(c.version) == picked), None)
            if chosen is None:  # a release the index has and the catalog does not list
                skip.add(picked)
                continue
            return _final(t, chosen, viable, pins, catalog, index, closure, probes)
    first = failures[0][1] if failures else None
    best = viable[0]
    if first is None:
        raise ResolutionError(f"no {best.framework} release the catalog lists fits image {t.name!r} with its extras",
                              hint="run `envkit catalog refresh` so the catalog knows the releases the index has")
    tried = "; ".join(f"{req} with the extras" for req, _ in failures)
    raise ClosureError(
        f"the extra packages cannot be installed beside any {best.framework} build that fits this fleet "
        f"(tried {tried}): uv said: " + " ".join(first.cause.split()),
        cause=first.cause, no_wheel=first.no_wheel,
        hint="relax the pip: requirement uv names, or the framework's version; `envkit explain SPEC IMAGE` "
             "lists the builds that fit the fleet")


def _shared_pairing(group: list[Candidate], catalog: Catalog) -> list[str]:
    """The catalog's companion pairing when every build in ``group`` has the same one (a series spec: torch==2.6.*),
    else none (the final solve pairs the chosen build's)."""
    pairings = {tuple(sorted(catalog.companions(c.framework, c.version).items())) for c in group}
    return [f"{name}{spec}" for name, spec in pairings.pop()] if len(pairings) == 1 else []


def _final(t: Target, c: Candidate, viable: list[Candidate], probe: list[Pin], catalog: Catalog, index: Index,
           closure: Closure, probes: int) -> Joint:
    why = None if c == viable[0] else _why_not_first(viable[0], c, t)
    pairing = [f"{name}{spec}" for name, spec in sorted(catalog.companions(c.framework, c.version).items())]
    by = {p.name: p for p in probe}
    # companions uv paired otherwise, and this build's own constraints (the probe was solved with its group's first)
    unpaired = [req for req in (*pairing, *t.caps(c)) if (r := Requirement(req)).name in by
                and not r.specifier.contains(Version(by[r.name].version).public, prereleases=True)]
    if c.index is None and not unpaired:
        return Joint(c, tuple(probe), index.url, None, why, probes, t.caps(c))
    fw_url = c.index or index.url
    extra = index.url if c.index else None
    try:
        pins = closure([c.requirement, *t.extras], python=t.python, glibc=t.glibc, index_url=fw_url,
                       extra_index_url=extra, extra_constraints=[*t.caps(c), *pairing])
    except ClosureError as exc:
        if exc.no_wheel:
            raise no_wheel(t, exc, index) from None
        exc.message = (f"{c.label} (the newest build the extras allow) with its companions "
                       f"{', '.join(pairing) or 'none'}: " + exc.message)
        exc.args = (exc.message, *exc.args[1:])
        raise
    return Joint(c, tuple(pins), fw_url, extra, why, probes + 1, (*t.caps(c), *pairing))


def _why_not_first(first: Candidate, c: Candidate, t: Target) -> str:
    if first.version != c.version:
        return (f"{first.label} fits the fleet, but the extras ({', '.join(t.extras)}) allow "
                f"{c.framework} {c.version} at most")
    return f"the extras ({', '.join(t.extras)}) cannot be installed beside {first.label}"


def _version_of(pins: list[Pin], name: str) -> Version:
    name = canonicalize_name(name)
    pin = next(p for p in pins if p.name == name)
    return Version(Version(pin.version).public)


# --- companions ----------------------------------------------------------------------------
def paired(t: Target, viable: list[Candidate], catalog: Catalog) -> list[Candidate]:
    """The builds whose companions (as the catalog pairs them) admit the versions the extras ask for."""
    asked = {}
    for extra in t.extras:
        req = Requirement(extra)
        if req.specifier:
            asked[canonicalize_name(req.name)] = req.specifier
    if not asked or not viable:
        return viable
    kept = [c for c in viable if all(_overlaps(catalog.companions(c.framework, c.version).get(n), s)
                                     for n, s in asked.items())]
    if kept:
        return kept
    fw = viable[0].framework
    named = [n for n in asked if n in catalog.companion_names(fw)]
    first = named[0] if named else next(iter(asked))
    raise PackageRefusal(
        f"{first}{asked[first]} pairs with no {fw} build that fits this fleet "
        f"(those that fit: {', '.join(sorted({c.version for c in viable}, key=Version, reverse=True)[:6])})",
        hint=f"ask for the {first} release that pairs with a build that fits (the catalog's companions.yaml), "
             f"or pin the framework to the release {first}{asked[first]} pairs with and let `envkit explain` "
             "say what the fleet needs for it", package=first)


def _overlaps(pairing: str | None, asked: SpecifierSet) -> bool:
    """Whether a companion pairing (``==0.21.*``, ``==3.2.0``) admits a version ``asked`` admits."""
    if pairing is None:
        return True
    try:
        spec = SpecifierSet(pairing)
    except InvalidSpecifier:
        return True
    tried = []
    for s in spec:
        if s.operator != "==":
            return True  # a range: the solve decides
        if s.version.endswith(".*"):
            stem = s.version[:-2]
            tried += [f"{stem}.{i}" for i in range(31)] + [stem]
        else:
            tried.append(s.version)
    return any(spec.contains(v, prereleases=True) and asked.contains(v, prereleases=True) for v in tried)


# --- a package without a wheel ------------------------------------------------------------------
def no_wheel(t: Target, exc: ClosureError, index: Index) -> NoWheelError:
    """uv said ``exc.no_wheel`` has no usable wheel: name it, what asked for it, the newest release that has one
    for this image, and the ways out."""
    name = exc.no_wheel or ""
    asked = next((e for e in t.extras if canonicalize_name(Requirement(e).name) == name), None)
    where = f"CPython {t.python} on x86_64 with glibc {t.glibc}"
    newest = newest_with_wheel(index, name, t.python, t.glibc)
    what = (
        f"{asked!r} (pip:)" if asked else f"{name} (required by another package: {' '.join(exc.cause.split())[:300]})"
    )
    if newest is None:
        has = f"no release of {name} on {index.url} has a wheel for {where}"
        pin = ""
    else:
        has = f"the newest release of {name} with a wheel for it is {newest}"
        pin = f"pin a release that has one (e.g. \"{name}=={newest}\"), or "
    return NoWheelError(
        f"image {t.name!r}: {name} has no wheel for the image ({where}) in the releases {what} admits; "
        f"envkit builds install wheels only: {has}",
        package=name,
        hint=pin + f"build a {name} wheel for it (cp{t.python.replace('.', '')}, manylinux, x86_64) and serve it "
                   "from the team's own index (build.index_url: a mirror that also proxies the rest); envkit "
                   "installs wheels only and does not build packages from source")


def newest_with_wheel(index: Index, name: str, python: str, glibc: str) -> str | None:
    try:
        for v in index.versions(name):
            if index.wheel_for(name, v, python, glibc) is not None:
                return str(v)
    except (PackageIndexError, InvalidVersion):
        return None
    return None


# --- what each named extra got, and why -------------------------------------------------------
@dataclass(frozen=True)
class ExtraReport:
    name: str
    version: str
    newest: str | None  # the newest release the spec's requirement admits with a wheel for the image
    held_back: bool  # far behind that newest one: a major release, or FAR_MINORS minor releases
    decision: Decision


def report_extras(t: Target, j: Joint, newest: dict[str, str | None], closure: Closure) -> list[ExtraReport]:
    """One decision per ``pip:`` package: its locked version and why; one held far behind the newest release it
    admits (``far_behind``) says what held it back, in uv's words (the final solve asked again with
    ``NAME>=NEWEST``, which fails with uv's explanation: a second solve, so only for those)."""
    by = {p.name: p.version for p in j.pins}
    out = []
    for extra in t.extras:
        req = Requirement(extra)
        name = canonicalize_name(req.name)
        locked = by.get(name)
        if locked is None:
            continue  # its marker leaves it out of this image
        top = newest.get(name)
        held = False
        if top is None:
            reason = f"what the joint solve picked for {extra!r} (the index's releases could not be listed)"
        elif Version(locked) >= Version(top):
            reason = f"the newest release {extra!r} admits with a wheel for the image"
        elif not far_behind(locked, top):
            reason = (f"{top} is the newest release {extra!r} admits; the joint solve picked {locked}, close enough "
                      f"not to ask uv why (ask for \"{name}>={top}\" to have it, or to hear what holds it back)")
        else:
            held = True
            reason = HELD_BACK + f"{top} is the newest release {extra!r} admits; " + _held_by(t, j, name, top, closure)
        out.append(ExtraReport(name, locked, top, held, Decision(topic=PIP_TOPIC + name, choice=locked, reason=reason)))
    return out


def refuse_held_back(reports: list[ExtraReport]) -> None:
    """build.held_back: refuse: the first package held far back fails the resolve, saying what held it."""
    for r in reports:
        if r.held_back:
            raise PackageRefusal(
                f"{r.name} would be locked at {r.version}, far behind {r.newest}, the newest release its pip: entry "
                f"admits, and build.held_back is 'refuse': " + r.decision.reason.removeprefix(HELD_BACK),
                package=r.name,
                hint=f"relax or drop what holds it back (uv's reason above), ask for \"{r.name}>={r.newest}\" to have "
                     f"the solve fail on the conflict itself, or pin an older {r.name} on purpose; build.held_back: "
                     "show locks it and says so")


def _held_by(t: Target, j: Joint, name: str, top: str, closure: Closure) -> str:
    try:
        j.solve_again(closure, t, f"{name}>={top}")
    except ClosureError as exc:
        return "uv says: " + " ".join(exc.cause.split())
    return (f"nothing requires the older release (uv's order of choices kept it): ask for \"{name}>={top}\" "
            "in pip: to have the newest")


FAR_MINORS = 3  # minor releases behind the newest that count as held back


def far_behind(locked: str, newest: str) -> bool:
    """A major release behind, or FAR_MINORS minor releases (transformers 4.12 beside 4.57; not 5.0 beside 5.2)."""
    old, new = (Version(v).release + (0, 0) for v in (locked, newest))
    return old[0] < new[0] or (old[0] == new[0] and new[1] - old[1] >= FAR_MINORS)


def admits(spec: SpecifierSet, version: Version) -> bool:
    """PEP 440's rule for choosing among releases: a pre-release only when ``spec`` names one (packaging >= 26's
    ``contains`` alone admits one when asked about it by itself)."""
    return spec.contains(version, prereleases=spec.prereleases is True)


def newest_admitted(index: Index, requirement: str, python: str, glibc: str, paired: str = "") -> str | None:
    """The newest release ``requirement`` admits (no pre-releases unless it names one) with a wheel for the image;
    for a companion, of those ``paired`` (the catalog's specifier) admits too. None when the index cannot list it."""
    req = Requirement(requirement)
    name = canonicalize_name(req.name)
    spec = req.specifier & SpecifierSet(paired)
    try:
        for v in index.versions(name):
            if admits(spec, v) and index.wheel_for(name, v, python, glibc) is not None:
                return str(v)
    except (PackageIndexError, InvalidVersion):
        return None
    return None
