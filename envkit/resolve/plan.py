"""``plan(spec, catalog)`` is pure: from the catalog alone it picks, per image, the newest framework build that
satisfies every constraint (the requirement, the base's Python, the CUDA constraint, the fleet's oldest driver under
the spec's policy, every fleet GPU covered by compiled SASS, or by PTX only when the driver can JIT it) and records
each choice and each rejected alternative with its reason. When nothing fits it names the colliding constraints and
the nearest ways out. The rules themselves are ``rules``; the spec checks that need the catalog are here too."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from ..catalog.models import Arch, Catalog, OsBase, vtuple
from ..devel import WHEELS_ONLY_FROM
from ..errors import Location, ResolutionError, SpecError
from ..frameworks import FRAMEWORKS
from ..lock import BaseImage, Decision, canonical
from ..spec import Base, Spec, Target
from . import devel
from .candidates import Candidate, candidates
from .rules import Fleet, base_for, check_excluded_pin, reject_reason, ways_out

IMAGE_SUITES = {"debian": {"12": "bookworm", "13": "trixie"}, "ubuntu": {"22.04": "jammy", "24.04": "noble"}}


@dataclass
class ImagePlan:
    target: Target
    base: BaseImage
    os: OsBase
    python: str
    chosen: Candidate
    driver_floor: str
    require_cuda: str
    policy: str
    decisions: list[Decision] = field(default_factory=list)
    fleet: Fleet | None = None
    where: Location | None = None  # the image in the spec
    viable: tuple[Candidate, ...] = ()  # every build that fits the fleet, preferred first (chosen: the extras')
    rejected: tuple[str, ...] = ()  # the builds rejected before the first that fits, with their reasons
    flavour_where: Location | None = None  # the image's flavour: line


# --- spec checks that need the catalog ------------------------------------------------
def spec_digest(spec: Spec) -> str:
    """The digest a lock keeps of its spec. ``fleet.gpus`` counts as a set: their order and repeats decide nothing;
    ``dispatch`` (where the fleet's GPUs are reached) decides nothing the lock holds, so it is left out."""
    body = spec.model_dump(mode="json", exclude={"dispatch"})
    body["fleet"]["gpus"] = sorted(set(body["fleet"]["gpus"]))
    return _sha256(body)


def spec_digests(spec: Spec) -> set[str]:
    """Every digest that still means ``spec``: today's, and the one locks written before 2026-12-04 kept (the GPUs
    in their order), so that such locks stay current and ``--locked`` runs keep passing until the next resolve."""
    return {spec_digest(spec), _sha256(spec.model_dump(mode="json", exclude={"dispatch"}))}


def _sha256(body: object) -> str:
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def check_gpus(spec: Spec, catalog: Catalog) -> list[Arch]:
    """The fleet's GPU architectures; an unknown GPU is a spec error with its line."""
    arches = []
    for i, name in enumerate(spec.fleet.gpus):
        arch = catalog.gpu(name)
        if arch is None:
            raise SpecError(
                f"unknown GPU {name!r} in fleet.gpus",
                location=spec.locate("fleet", "gpus", i),
                hint=catalog.unknown_gpu_hint(name),
            )
        arches.append(arch)
    return arches


def check_frameworks(spec: Spec) -> None:
    for i, image in enumerate(spec.images):
        req = Requirement(image.framework)
        name = req.name.lower()
        where = spec.locate("images", i, "framework")
        if name not in FRAMEWORKS:
            raise SpecError(f"unsupported framework {name!r} in images[{i}].framework", location=where,
                            hint=f"supported: {', '.join(FRAMEWORKS)}")
        bad = set(req.extras) - FRAMEWORKS[name].extras
        if bad:
            allowed = ", ".join(sorted(FRAMEWORKS[name].extras)) or "none"
            raise SpecError(f"unknown extra {sorted(bad)[0]!r} for {name} in images[{i}].framework",
                            location=where, hint=f"allowed extras: {allowed}")
        # the framework in pip: too would be a second, conflicting pin, found only by the closure (exit 4)
        listed: list[tuple[tuple[str, tuple[str | int, ...]], str]] = [
            ((f"images[{i}].pip[{j}]", ("images", i, "pip", j)), r) for j, r in enumerate(image.pip)]
        listed += [((f"defaults.pip[{j}]", ("defaults", "pip", j)), r) for j, r in enumerate(spec.defaults.pip)]
        for (shown, path), entry in listed:
            req_pip = Requirement(str(entry))
            if canonicalize_name(req_pip.name) == canonicalize_name(name):
                extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
                wanted = f"{req.name}{extras}{req_pip.specifier}"
                raise SpecError(f"{shown}: {str(entry)!r} names the framework, which "
                                f"images[{i}].framework ({image.framework!r}) already pins",
                                location=spec.locate(*path),
                                hint=f"pin the framework in framework: alone (e.g. framework: {wanted!r}); "
                                     "pip: is for extra packages")


# --- plan (pure) ---------------------------------------------------------------------
def plan(spec: Spec, catalog: Catalog, only: list[str] | None = None) -> list[ImagePlan]:
    check_frameworks(spec)
    fleet = Fleet(spec.fleet.min_driver, spec.fleet.policy, tuple(check_gpus(spec, catalog)))
    plans = [plan_image(spec, spec.effective(i), catalog, fleet) for i in spec.images if not only or i.name in only]
    check_mirror_names(spec, plans)
    return plans


def check_mirror_names(spec: Spec, plans: list[ImagePlan]) -> None:
    """An image named as a base mirror (``base-debian-bookworm``) would share its registry repository with the
    mirror `nightly --registry` pushes there: refused at the image's name, before anything is built."""
    mirrors = {p.base.mirror_name: p for p in plans}
    for i, image in enumerate(spec.images):
        if image.name in mirrors:
            base = mirrors[image.name].base
            raise SpecError(
                f"image name {image.name!r} is the registry repository envkit mirrors the "
                f"{base.distro} {base.suite} base to (nightly --registry pushes it to TEAM_PATH/{image.name})",
                location=spec.locate("images", i, "name"),
                hint=f"rename the image (e.g. {image.name.removeprefix('base-')}-base)",
            )


def plan_image(spec: Spec, target: Target, catalog: Catalog, fleet: Fleet) -> ImagePlan:
    decisions: list[Decision] = []
    where = spec.locate("images", spec.index_of(target.name))
    base, os_base = _base(target.base, catalog, decisions, where)
    python = target.python or os_base.python
    if python != os_base.python:
        suites = catalog.python_suites(python)
        raise ResolutionError(
            f"image {target.name!r} asks for Python {python} but its base ({base.distro} {base.suite}) "
            f"ships {os_base.python}",
            location=where,
            hint=(
                f"use a base that ships it: {' or '.join(base_for(catalog, s) for s in suites)}"
                if suites
                else f'use python: "{os_base.python}"'
            )
            + "; envkit uses the base's own interpreter",
        )
    decisions.append(Decision(topic="python", choice=python, reason=f"the interpreter of {base.distro} {base.suite}"))

    check_excluded_pin(spec, target, catalog, fleet, python)
    req = Requirement(target.framework)
    cuda_spec = SpecifierSet(target.cuda) if target.cuda else None
    rejected: list[str] = []  # the builds rejected before the first that fits (newer, or preferred)
    viable: list[Candidate] = []  # every build that fits, preferred first: the extras choose among them at resolve
    for c in candidates(req, catalog, variant_index=spec.build.variant_index_url):
        why = reject_reason(c, python, catalog, fleet, cuda_spec)
        if why is None:
            viable.append(c)
        elif not viable:
            rejected.append(f"{c.label}: {why}")
    if not viable:
        raise ResolutionError(
            f"no {req.name} build satisfies image {target.name!r} ({target.framework}) on this fleet",
            location=where, hint=ways_out(req, python, catalog, fleet, cuda_spec, rejected))
    p = ImagePlan(target, base, os_base, python, viable[0], "", "", fleet.policy, decisions, fleet, where,
                  tuple(viable), tuple(rejected), spec.locate("images", spec.index_of(target.name), "flavour"))
    return choose(p, viable[0], catalog)


def choose(p: ImagePlan, chosen: Candidate, catalog: Catalog, why: str | None = None) -> ImagePlan:
    """``p`` with ``chosen`` as its build: the decisions that follow from the build made again. ``why``: why not
    the plan's first build (the extras' joint solve said so)."""
    decisions = [d for d in p.decisions if d.topic in ("base", "python")]
    reason = "newest build that fits every constraint"
    if why:
        reason = "newest build that fits every constraint and the extras: " + why
    if not chosen.default:
        reason += "; not the index's default build, so it comes from " + (chosen.index or "its own index")
    decisions.append(Decision(topic=Requirement(p.target.framework).name, choice=chosen.label, reason=reason,
                              rejected=p.rejected))
    fleet = p.fleet
    assert fleet is not None  # plan_image gives every plan its fleet
    floor = catalog.driver_floor_for(chosen.cuda, fleet.policy)
    decisions.append(
        Decision(
            topic="driver_floor",
            choice=floor,
            reason=f"CUDA {chosen.cuda} under policy '{fleet.policy}' "
            + (
                "(minor-version compatibility within the major)"
                if fleet.policy == "minor"
                else "(the toolkit's own floor)"
            ),
        )
    )
    if p.target.flavour == "devel":
        decisions.append(_devel_plan(p.target, chosen, p.flavour_where, tuple(catalog.debian_toolkits())))
    if fleet.gpus:
        decisions.append(Decision(topic="gpus", choice=" ".join(sorted({g.cc for g in fleet.gpus}, key=vtuple)),
                                  reason="every fleet GPU is covered by " + (
                                      f"compute capability >= {chosen.min_cc}" if chosen.min_cc else
                                      "the arch list " + " ".join(chosen.arches))))
    else:
        decisions.append(Decision(topic="gpus", choice="not checked",
                                  reason="fleet.gpus lists no GPU, so no compute capability was checked against the "
                                         "build's arch list; list the fleet's models to have it checked"))
    return replace(
        p,
        chosen=chosen,
        driver_floor=floor,
        require_cuda=catalog.require_cuda_for(chosen.cuda, fleet.policy),
        decisions=decisions,
    )


def _devel_plan(target: Target, c: Candidate, where: Location | None, toolkits: tuple[str, ...]) -> Decision:
    """The devel flavour, judged when planning (explain, and resolve before the network) where the catalog
    knows enough: a framework envkit makes no devel image of, or an exactly pinned CUDA it has no compiler for,
    is refused at the image's flavour: line, as is a CUDA 12 range starting above Debian's toolkits (jax[cuda12]:
    12.9 on). Any other range-pinned CUDA is judged on what the closure locks."""
    try:
        devel.check_framework(target.name, c.framework)
        newest_toolkit = max((vtuple(t) for t in toolkits), default=(0,))  # (the catalog's debian_toolkits)
        if c.exact_pins or (c.cuda and vtuple(c.cuda)[0] < WHEELS_ONLY_FROM and vtuple(c.cuda) > newest_toolkit):
            # a range from above every CUDA 12 compiler
            devel.check_cuda(target.name, c.cuda, target.framework, toolkits=toolkits)
    except ResolutionError as exc:
        exc.location = exc.location or where
        raise
    return Decision(topic="flavour", choice=f"devel: the CUDA {c.cuda} compiler" if c.exact_pins else
                    f"devel: the compiler of the CUDA release the closure locks (CUDA {c.cuda} or newer)",
                    reason=devel.source(c.cuda) if c.exact_pins else
                    "locked at resolve, constrained by the framework's closure (see docs/images.md, the devel flavour)")


def _base(base: Base, catalog: Catalog, decisions: list[Decision], where: Location | None) -> tuple[BaseImage, OsBase]:
    if base.bootstrap:
        b = base.bootstrap
        os_base = catalog.os_base(b.suite)
        debian = [s for s in catalog.suites() if getattr(catalog.os_base(s), "distro", None) == "debian"]
        if os_base is None or os_base.distro != "debian":
            raise ResolutionError(f"cannot bootstrap suite {b.suite!r}", location=where,
                                  hint=f"known Debian suites: {', '.join(debian)}")
        recipe = {"suite": b.suite, "mirror": b.mirror, "variant": b.variant}
        rh = hashlib.sha256(canonical(recipe)).hexdigest()[:12]
        decisions.append(Decision(topic="base", choice=f"debootstrap {b.suite}",
                                  reason="made locally with debootstrap + docker import (no registry needed)"))
        return BaseImage(ref=f"envkit-base/debian:{b.suite}-{b.variant}-{rh}", digest=None,
                         distro="debian", suite=b.suite, bootstrap=recipe), os_base
    ref = base.image
    if ref is None:  # the spec's base is bootstrap or image, one of them (spec.Base)
        raise ResolutionError("the base names neither a bootstrap nor an image", location=where)
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    repo, tag = (name.rsplit(":", 1) if ":" in last else (name, "latest"))
    distro = repo.rsplit("/", 1)[-1]
    release = tag.split("-")[0]  # "12-slim" -> "12", "bookworm-slim" -> "bookworm"
    suite = IMAGE_SUITES.get(distro, {}).get(release, release)
    os_base = catalog.os_base(suite)
    if os_base is None:
        raise ResolutionError(f"cannot tell which OS release base image {ref!r} is", location=where,
                              hint=f"use a tag naming a known suite ({', '.join(catalog.suites())})")
    decisions.append(
        Decision(
            topic="base",
            choice=ref,
            reason="given in the spec" + ("" if digest else " (pin it by digest for reproducible builds)"),
        )
    )
    return BaseImage(ref=ref, digest=digest or None, distro=os_base.distro, suite=suite), os_base
