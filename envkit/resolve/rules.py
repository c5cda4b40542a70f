"""The resolver's rules: what rejects a candidate build for an image (an excluded release, the Python
range, the CUDA constraint, the fleet's driver floor under its policy, GPU coverage by SASS, by PTX only
when the driver can JIT it, or by a minimum compute capability), and, when nothing fits, the nearest ways
out. Pure functions of a candidate, the catalog and the fleet: ``resolve.plan`` applies them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..catalog.exclusions import exact_pin
from ..catalog.models import Arch, Catalog, vtuple
from ..catalog.releases import lists_release
from ..errors import CatalogError, ResolutionError
from ..frameworks import FRAMEWORKS
from ..index.urls import DEFAULT_INDEX
from ..spec import Spec, Target
from .candidates import Candidate, candidates, variant_index_for


@dataclass(frozen=True)
class Fleet:
    min_driver: str
    policy: str
    gpus: tuple[Arch, ...]


def covers(arches: tuple[str, ...], cc: str, *, ptx_ok: bool = True) -> bool:
    """SASS for X.y runs on X.z (z >= y); PTX for X.y JITs on any cc >= X.y, if the driver can."""
    major, minor = vtuple(cc)
    for a in arches:
        kind, _, num = a.partition("_")
        specific = num.endswith("a")
        num = re.sub(r"[af]$", "", num)
        m, n = int(num[:-1]), int(num[-1])
        if kind == "sm" and m == major and (n == minor if specific else n <= minor):
            return True
        if kind == "compute" and ptx_ok and ((m, n) == (major, minor) if specific else (m, n) <= (major, minor)):
            return True
    return False


def check_excluded_pin(spec: Spec, target: Target, catalog: Catalog, fleet: Fleet, python: str) -> None:
    """A spec pinning exactly a release the catalog excludes fails at its framework line."""
    req = Requirement(target.framework)
    pinned = exact_pin(req)
    ex = catalog.excluded(req.name.lower(), pinned) if pinned else None
    if ex is None:
        return
    cuda_spec = SpecifierSet(target.cuda) if target.cuda else None
    fits = [c.version for c in candidates(req, catalog, ignore_version=True)
            if reject_reason(c, python, catalog, fleet, cuda_spec) is None]
    assert pinned is not None  # an excluded release was found for it
    series = Version(pinned).release[:2]
    near = next((v for v in fits if Version(v).release[:2] == series), None)
    if near:
        pick = f"pick another version: {req.name}=={near} (the newest allowed {'.'.join(map(str, series))} release " \
               f"that fits this image{'' if near == fits[0] else f'; the newest overall is {fits[0]}'})"
    else:
        pick = f"pick another version: {req.name}=={fits[0]} (the newest allowed release that fits this image)" \
            if fits else f"pick another {req.name} version (none the catalog allows fits this image as it is)"
    raise ResolutionError(
        f"image {target.name!r} pins {target.framework}, which the catalog leaves out on purpose: {ex.reason} "
        f"(source: {ex.source_text})",
        location=spec.locate("images", spec.index_of(target.name), "framework"),
        hint=f"{pick}; or, if {req.name} {ex.version} is wanted after all, remove the exclusion "
             f"(its row at {ex.location})")


def reject_reason(
    c: Candidate, python: str, catalog: Catalog, fleet: Fleet, cuda_spec: SpecifierSet | None
) -> str | None:
    """Why ``c`` cannot serve this image, or None when it can."""
    ex = catalog.excluded(c.framework, c.version)
    if ex is not None:
        return ex.rejection(listed=lists_release(catalog, c.framework, c.version))
    if not c.python.admits(python):
        return f"supports Python {c.python.min}-{c.python.max}, not {python}"
    if cuda_spec is not None and not cuda_spec.contains(c.cuda, prereleases=True):
        return f"is a CUDA {c.cuda} build, outside cuda {cuda_spec}"
    try:
        floor = catalog.driver_floor_for(c.cuda, fleet.policy)
    except CatalogError as exc:  # a catalog gap for this CUDA under strict policy
        return exc.message
    if vtuple(fleet.min_driver) < vtuple(floor):
        return (f"needs driver >= {floor} for CUDA {c.cuda} (policy {fleet.policy}); "
                f"the fleet's oldest is {fleet.min_driver}")
    # PTX JIT needs a driver at least as new as the toolkit; minor-version compatibility is not enough.
    try:
        jit_floor = catalog.toolkit_floor(c.cuda)
    except CatalogError:
        jit_floor = None  # no known floor: assume the driver cannot JIT this toolkit's PTX
    ptx_ok = jit_floor is not None and vtuple(fleet.min_driver) >= vtuple(jit_floor)
    return uncovered(c, fleet, ptx_ok, jit_floor)


def uncovered(c: Candidate, fleet: Fleet, ptx_ok: bool, jit_floor: str | None) -> str | None:
    """Why a fleet GPU is not covered by ``c``'s arch list (or minimum cc), or None when all are."""
    for gpu in fleet.gpus:
        if c.min_cc is not None:
            if vtuple(gpu.cc) < vtuple(c.min_cc):
                return f"needs compute capability >= {c.min_cc}; {gpu.family} ({', '.join(gpu.models[:2])}) is {gpu.cc}"
        elif not covers(c.arches, gpu.cc, ptx_ok=ptx_ok):
            only_ptx = covers(c.arches, gpu.cc, ptx_ok=True)
            why = (
                f"only PTX covers {gpu.family} (cc {gpu.cc}) and JIT needs driver >= {jit_floor or 'an unknown floor'}"
                if only_ptx
                else f"has no kernels for {gpu.family} (cc {gpu.cc}); arch list {' '.join(c.arches)}"
            )
            return why
    return None


def ways_out(req: Requirement, python: str, catalog: Catalog, fleet: Fleet, cuda_spec: SpecifierSet | None,
             rejected: list[str]) -> str:
    """The nearest relaxations that would resolve: another version, driver, GPU list or CUDA."""
    ways = []
    other = next((c for c in candidates(req, catalog, ignore_version=True)
                  if reject_reason(c, python, catalog, fleet, cuda_spec) is None), None)
    if other:
        ways.append(f"use {req.name}=={other.version} (its {other.variant} build fits)")
    ways += _other_extra(req, python, catalog, fleet, cuda_spec)
    relaxed = replace(fleet, min_driver="9999")
    fits = [c for c in candidates(req, catalog) if reject_reason(c, python, catalog, relaxed, cuda_spec) is None]
    need = _lowest([_driver_needed(c, python, catalog, fleet, cuda_spec) for c in fits])
    if need is not None and vtuple(need) > vtuple(fleet.min_driver):
        ways.append(f"raise fleet.min_driver to >= {need}")
        if fleet.policy == "strict":
            ways.append("use policy: minor (CUDA minor-version compatibility)")

    def without(g: Arch, f: Fleet) -> Fleet:
        return replace(f, gpus=tuple(x for x in f.gpus if x != g))

    blocking = [g for g in fleet.gpus
                if any(reject_reason(c, python, catalog, without(g, fleet), cuda_spec) is None
                       for c in candidates(req, catalog))]
    if blocking:
        ways.append("drop " + ", ".join(sorted({f"{g.models[0]} (cc {g.cc})" for g in blocking}))
                    + " from fleet.gpus, or serve it with another image")
    elif not fits:  # neither alone: a newer driver and a GPU list without one model, together
        both = {g: _lowest([_driver_needed(c, python, catalog, without(g, fleet), cuda_spec)
                            for c in candidates(req, catalog)]) for g in fleet.gpus}
        both = {g: need for g, need in both.items() if need is not None}
        if both:
            ways.append("drop " + ", ".join(sorted({f"{g.models[0]} (cc {g.cc})" for g in both}))
                        + " from fleet.gpus (serve it with another image) and raise fleet.min_driver to >= "
                        + str(_lowest(list(both.values()))))
    ways += _other_python(req, python, catalog, fleet, cuda_spec)
    if cuda_spec is not None:
        ways.append(f"relax the cuda constraint {cuda_spec}")
    return rejections(rejected) + "\n  ways out:\n" + "\n".join(
        f"    - {w}" for w in ways or ["relax the requirement or the fleet"])


def unreachable_variant_ways_out(chosen: Candidate, catalog: Catalog, fleet: Fleet, python: str,
                                 cuda_spec: SpecifierSet | None, req: Requirement, variant_index: str | None,
                                 spec_index: str | None = None) -> str:
    """The ways out when the index of ``chosen`` (a non-default PyTorch build: ``chosen.index``) cannot be reached,
    as the hint's text: (a) a mirror of that index in ``build.variant_index_url`` (``variant_index``: the spec's
    template, None when the catalog's index was asked); (b) the newest default build, from the spec's own index
    (``spec_index``; None: PyPI), that passes every rule for this fleet, as a framework pin; (c) the fleet driver
    that lets the default build of ``chosen``'s release pass, when the driver is what rejects it. Pure."""
    name = req.name.lower()
    failed = chosen.index or variant_index_for(catalog, chosen.variant, variant_index)
    upstream = catalog.torch_variant_index("{variant}")  # the catalog's template, e.g. .../whl/{variant}
    if variant_index:
        ways = [f"make the mirror in build.variant_index_url answer for {chosen.variant}: {chosen.label} comes from "
                f"{failed}, which could not be reached; or point it at another mirror of {upstream}"]
    else:
        ways = [f"set build.variant_index_url to a mirror of {upstream}: {chosen.label} comes from {failed}, which "
                f'could not be reached (e.g. variant_index_url: "https://mirror.corp.example/pytorch/whl/{{variant}}")']
    from_spec = "PyPI" if not spec_index or spec_index.rstrip("/") == DEFAULT_INDEX.rstrip("/") else spec_index
    ok = [c for c in candidates(Requirement(name), catalog, ignore_version=True)
          if c.default and reject_reason(c, python, catalog, fleet, cuda_spec) is None]
    if ok:
        best = ok[0]
        pin = f"{name}=={'.'.join(best.version.split('.')[:2])}.*"
        first = next((c for c in candidates(Requirement(pin), catalog)
                      if reject_reason(c, python, catalog, fleet, cuda_spec) is None), None)
        if first is None or first.version != best.version or not first.default:
            pin = f"{name}=={best.version}"  # the series would pick a non-default build: the release itself
        ways.append(f'use framework: "{pin}": {name} {best.version}\'s default {best.variant} build, from {from_spec}, '
                    "fits this fleet")
    default = next((c for c in candidates(Requirement(f"{name}=={chosen.version}"), catalog)
                    if c.default and c.version == chosen.version), None)
    if default is not None and (why := reject_reason(default, python, catalog, fleet, cuda_spec)) is not None \
            and why.startswith("needs driver"):
        need = _driver_needed(default, python, catalog, fleet, cuda_spec)
        if need is not None and vtuple(need) > vtuple(fleet.min_driver):
            ways.append(f"a fleet driver >= {need} runs {name} {default.version}'s default {default.variant} build "
                        f"from {from_spec}: raise fleet.min_driver to >= {need}")
            if fleet.policy == "strict":
                minor = _driver_needed(default, python, catalog, replace(fleet, policy="minor"), cuda_spec)
                if minor is not None and vtuple(minor) < vtuple(need):
                    ways[-1] += f" (>= {minor} under policy: minor)"
    return "ways out:\n" + "\n".join(f"    - {w}" for w in ways)


def _driver_needed(c: Candidate, python: str, catalog: Catalog, fleet: Fleet,
                   cuda_spec: SpecifierSet | None) -> str | None:
    """The oldest driver with which ``c`` fits ``fleet`` (its GPUs as they are), or None when no driver does: its
    CUDA's floor under the policy, else the toolkit's own floor (PTX JIT), each checked by the rules again."""
    floors = []
    for floor in (lambda: catalog.driver_floor_for(c.cuda, fleet.policy), lambda: catalog.toolkit_floor(c.cuda)):
        try:
            floors.append(floor())
        except CatalogError:  # a catalog gap (no floor for this CUDA): that way is not offered
            pass
    for found in sorted({f for f in floors if f}, key=vtuple):
        driver = max(found, fleet.min_driver, key=vtuple)
        if reject_reason(c, python, catalog, replace(fleet, min_driver=driver), cuda_spec) is None:
            return driver
    return None


def _lowest(drivers: list[str | None]) -> str | None:
    found = [d for d in drivers if d is not None]
    return min(found, key=vtuple) if found else None


def _other_extra(req: Requirement, python: str, catalog: Catalog, fleet: Fleet,
                 cuda_spec: SpecifierSet | None) -> list[str]:
    """The same framework with another CUDA extra (jax[cuda12] for jax[cuda13]), when one of its builds fits."""
    name = req.name.lower()
    out = []
    for extra in sorted((FRAMEWORKS[name].extras if name in FRAMEWORKS else frozenset()) - set(req.extras)):
        if not extra.startswith("cuda"):
            continue
        alt = Requirement(f"{name}[{extra}]{req.specifier}")
        fit = next((c for c in candidates(alt, catalog) if reject_reason(c, python, catalog, fleet, cuda_spec) is None),
                   None)
        if fit is not None:
            out.append(f"use {alt} ({fit.label} fits)")
    return out


def _other_python(req: Requirement, python: str, catalog: Catalog, fleet: Fleet,
                  cuda_spec: SpecifierSet | None) -> list[str]:
    """Another Python a catalog base ships, with which a build of ``req`` fits the fleet as it is (the
    newest build first, the nearest Python for it)."""
    os_bases = [b for s in catalog.suites() if (b := catalog.os_base(s)) is not None]
    shipped = sorted({b.python for b in os_bases} - {python}, key=vtuple)
    for c in candidates(req, catalog):
        for other in sorted(shipped, key=lambda p: abs(vtuple(p)[1] - vtuple(python)[1])):
            if reject_reason(c, other, catalog, fleet, cuda_spec) is None:
                bases = " or ".join(base_for(catalog, s) for s in catalog.python_suites(other))
                return [f'use python: "{other}" with a base that ships it ({bases}): {c.label} fits']
    return []


def rejections(rejected: list[str], shown: int = 4) -> str:
    """The rejected builds, those with one reason on one line, so the reasons that differ all show."""
    by_reason: dict[str, list[str]] = {}
    for r in rejected:
        label, _, why = r.partition(": ")
        by_reason.setdefault(why, []).append(label)
    lines = []
    for why, labels in list(by_reason.items())[:shown]:
        named = ", ".join(labels[:3]) + (f" and {len(labels) - 3} more" if len(labels) > 3 else "")
        lines.append(f"    - {named}: {why}")
    if len(by_reason) > shown:
        lines.append(f"    - ... and {sum(len(v) for v in list(by_reason.values())[shown:])} more")
    return ("rejected:\n" + "\n".join(lines)) if rejected else "no build matches the requirement"


def base_for(catalog: Catalog, suite: str) -> str:
    """How a spec asks for ``suite``: Debian's are bootstrapped here; others are images (pin them by digest)."""
    distro = getattr(catalog.os_base(suite), "distro", None)
    if distro == "debian":
        return f"base: {{bootstrap: {{suite: {suite}}}}}"
    return f'base: {{image: "{distro}:{suite}@sha256:..."}}'
