"""resolve(spec, catalog) -> Lock, in two steps.

``plan`` is pure: from the catalog alone it picks, per image, the newest framework build
that satisfies every constraint (the requirement, the base's Python, the CUDA
constraint, the fleet's oldest driver under the spec's policy, every fleet GPU covered by
compiled SASS, or by PTX only when the driver can JIT it) and records each choice and
each rejected alternative with its reason. When nothing fits it names the colliding
constraints and the nearest ways out. The rules themselves are ``rules.py``.

``resolve`` then locks the plan: it confirms from the wheel's index metadata what a
PyTorch build bundles, and pins the whole Python closure with hashes. The index and the
closure compiler are passed in, so tests use fakes.
"""

from __future__ import annotations

import functools
import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Protocol

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import __version__
from . import devel, joint
from .candidates import Candidate, candidates
from ..catalog.models import Arch, Catalog, OsBase, vtuple
from ..index.closure import Pin, compile_closure, framework_group
from ..errors import CatalogError, Location, PackageIndexError, ResolutionError, SpecError, WheelReadError
from ..lock import BaseImage, Decision, Lock, LockedImage, Package, canonical, sealed
from ..spec import Base, Spec, Target
from .rules import (Fleet, base_for, check_excluded_pin, covers, reject_reason, uncovered, ways_out)  # noqa: F401  (covers: tests)
from ..index.wheel_arches import READERS, ArchReading, read_arches, same_arches
from ..frameworks import FRAMEWORKS
from ..index.wheel_facts import bundled_pins, library_versions, runtime_package

IMAGE_SUITES = {"debian": {"12": "bookworm", "13": "trixie"}, "ubuntu": {"22.04": "jammy", "24.04": "noble"}}


class Index(Protocol):
    url: str

    def wheel_for(self, project: str, version, python: str, glibc: str): ...
    def requires(self, wheel) -> list[Requirement]: ...


Closure = Callable[..., list[Pin]]
IndexFactory = Callable[[str], Index]
ArchReader = Callable[[Index, object, str], ArchReading]  # (index, wheel, framework): wheel_arches.read_arches


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
    """The digest a lock keeps of its spec. ``fleet.gpus`` counts as a set: their order and repeats decide nothing."""
    body = spec.model_dump(mode="json")
    body["fleet"]["gpus"] = sorted(set(body["fleet"]["gpus"]))
    return _sha256(body)


def spec_digests(spec: Spec) -> set[str]:
    """Every digest that still means ``spec``: today's, and the one locks written before 2026-12-04 kept (the GPUs
    in their order), so that such locks stay current and ``--locked`` runs keep passing until the next resolve."""
    return {spec_digest(spec), _sha256(spec.model_dump(mode="json"))}


def _sha256(body) -> str:
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
                hint="give a model the catalog knows (e.g. " + ", ".join(catalog.gpu_names()[:12])
                     + ", ...) or a compute capability like '9.0'",
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
        listed = [((f"images[{i}].pip[{j}]", ("images", i, "pip", j)), r) for j, r in enumerate(image.pip)]
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
            raise SpecError(f"image name {image.name!r} is the registry repository envkit mirrors the "
                            f"{base.distro} {base.suite} base to (nightly --registry pushes it to TEAM_PATH/{image.name})",
                            location=spec.locate("images", i, "name"),
                            hint=f"rename the image (e.g. {image.name.removeprefix('base-')}-base)")


def plan_image(spec: Spec, target: Target, catalog: Catalog, fleet: Fleet) -> ImagePlan:
    decisions: list[Decision] = []
    where = spec.locate("images", spec.index_of(target.name))
    base, os_base = _base(target.base, catalog, decisions, where)
    python = target.python or os_base.python
    if python != os_base.python:
        suites = catalog.python_suites(python)
        raise ResolutionError(
            f"image {target.name!r} asks for Python {python} but its base ({base.distro} {base.suite}) ships {os_base.python}",
            location=where,
            hint=(f"use a base that ships it: {' or '.join(base_for(catalog, s) for s in suites)}" if suites
                  else f"use python: \"{os_base.python}\"")
                 + "; envkit uses the base's own interpreter")
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
    floor = catalog.driver_floor_for(chosen.cuda, fleet.policy)
    decisions.append(Decision(
        topic="driver_floor", choice=floor,
        reason=f"CUDA {chosen.cuda} under policy '{fleet.policy}' " + (
            "(minor-version compatibility within the major)" if fleet.policy == "minor" else "(the toolkit's own floor)")))
    if p.target.flavour == "devel":
        decisions.append(_devel_plan(p.target, chosen, p.flavour_where))
    if fleet.gpus:
        decisions.append(Decision(topic="gpus", choice=" ".join(sorted({g.cc for g in fleet.gpus}, key=vtuple)),
                                  reason="every fleet GPU is covered by " + (
                                      f"compute capability >= {chosen.min_cc}" if chosen.min_cc else
                                      "the arch list " + " ".join(chosen.arches))))
    else:
        decisions.append(Decision(topic="gpus", choice="not checked",
                                  reason="fleet.gpus lists no GPU, so no compute capability was checked against the "
                                         "build's arch list; list the fleet's models to have it checked"))
    return replace(p, chosen=chosen, driver_floor=floor, require_cuda=catalog.require_cuda_for(chosen.cuda, fleet.policy),
                   decisions=decisions)


def _devel_plan(target: Target, c, where: Location | None) -> Decision:
    """The devel flavour, judged when planning (explain, and resolve before the network) where the catalog
    knows enough: a framework envkit makes no devel image of, or an exactly pinned CUDA it has no compiler for,
    is refused at the image's flavour: line, as is a CUDA 12 range starting above Debian's toolkits (jax[cuda12]:
    12.9 on). Any other range-pinned CUDA is judged on what the closure locks."""
    try:
        devel.check_framework(target.name, c.framework)
        newest_toolkit = max(vtuple(t) for t in devel.DEBIAN_TOOLKITS)
        if c.exact_pins or (c.cuda and vtuple(c.cuda)[0] < devel.WHEELS_ONLY_FROM and vtuple(c.cuda) > newest_toolkit):
            devel.check_cuda(target.name, c.cuda, target.framework)  # a range from above every CUDA 12 compiler
    except ResolutionError as exc:
        exc.location = exc.location or where
        raise
    return Decision(topic="flavour", choice=f"devel: the CUDA {c.cuda} compiler" if c.exact_pins else
                    f"devel: the compiler of the CUDA release the closure locks (CUDA {c.cuda} or newer)",
                    reason=devel.source(c.cuda) if c.exact_pins else
                    "locked at resolve, constrained by the framework's closure (see docs/images.md, the devel flavour)")


def _base(base: Base, catalog: Catalog, decisions: list[Decision], where) -> tuple[BaseImage, OsBase]:
    if base.bootstrap:
        b = base.bootstrap
        os_base = catalog.os_base(b.suite)
        debian = [s for s in catalog.suites() if catalog.os_base(s).distro == "debian"]
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
    decisions.append(Decision(topic="base", choice=ref,
                              reason="given in the spec" + ("" if digest else " (pin it by digest for reproducible builds)")))
    return BaseImage(ref=ref, digest=digest or None, distro=os_base.distro, suite=suite), os_base


# --- lock (index + closure) ------------------------------------------------------------
def resolve(spec: Spec, catalog: Catalog, index: Index, *, closure: Closure = compile_closure,
            index_for: IndexFactory | None = None, only: list[str] | None = None,
            arch_reader: ArchReader = read_arches) -> Lock:
    """Plan, then lock each image: confirm bundled pins and the compiled arch list from the wheel,
    compile the closure with hashes. The images are locked side by side (each mostly waits on the index and
    uv); the first image in the spec's order that fails is the error."""
    plans = plan(spec, catalog, only)
    pool = ThreadPoolExecutor(max_workers=IMAGE_WORKERS)
    try:
        futures = [pool.submit(lock_image, p, index, catalog, closure, index_for, spec.fleet.min_driver, arch_reader,
                               held_back=spec.build.held_back or "show") for p in plans]
        images = [_locked(spec, p, f) for p, f in zip(plans, futures)]
    finally:  # interrupted or failed: start nothing more, and wait for the solves already running to end
        pool.shutdown(wait=True, cancel_futures=True)
    return Lock(team=spec.team, spec_digest=spec_digest(spec), catalog_digest=catalog.digest,
                envkit_version=__version__, images=tuple(images))


IMAGE_WORKERS = 4  # images locked at once


def _locked(spec: Spec, p: ImagePlan, future: Future) -> LockedImage:
    """One image's lock, or its error named after the image and placed at its line in the spec."""
    try:
        return future.result()
    except (ResolutionError, PackageIndexError) as exc:  # which image, and where the spec gives it
        if exc.location is None:
            i = spec.index_of(p.target.name)
            extras = getattr(exc, "from_extras", False)  # the closure failed only with the extra packages
            exc.location = (_pip_entry(spec, i, getattr(exc, "package", None))
                            or (spec.locate("images", i, "pip") if extras else None)
                            or spec.locate("images", i, "name"))
            if not exc.message.startswith(f"image {p.target.name!r}"):
                exc.message = f"image {p.target.name!r}: {exc.message}"
                exc.args = (exc.message, *exc.args[1:])
        raise


def _pip_entry(spec: Spec, i: int, package: str | None) -> Location | None:
    """Where the spec asks for ``package`` in image ``i``'s pip: (or defaults.pip)."""
    if package is None:
        return None
    for path, entries in ((("images", i, "pip"), spec.images[i].pip), (("defaults", "pip"), spec.defaults.pip)):
        for j, entry in enumerate(entries):
            if canonicalize_name(Requirement(str(entry)).name) == package:
                return spec.locate(*path, j)
    return None


def lock_image(p: ImagePlan, index: Index, catalog: Catalog, closure: Closure,
               index_for: IndexFactory | None, min_driver: str, arch_reader: ArchReader = read_arches, *,
               held_back: str = "show") -> LockedImage:
    """Lock one planned image. ``held_back``: the spec's build.held_back ('refuse': a pip: package held far behind
    the newest release it admits fails the resolve, at its pip: entry)."""
    index_of = index_for or _default_index_for
    caps = functools.partial(_caps, policy=p.policy, top=catalog.max_cuda_for_driver(min_driver))
    t = joint.Target(p.target.name, tuple(p.target.pip), p.python, p.os.glibc, caps)
    newest: dict[str, Future] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for extra in t.extras:  # asked of the index while uv solves
            newest[canonicalize_name(Requirement(extra).name)] = pool.submit(
                joint.newest_admitted, index, extra, p.python, p.os.glibc)
        solved = None
        if t.extras:
            known = {Version(x.version) for x in candidates(Requirement(p.chosen.framework), catalog, ignore_version=True)}
            try:
                solved = joint.solve(t, list(p.viable), catalog, index, closure, index_of, known)
            except ResolutionError as exc:
                exc.from_extras = True  # solved with the image's pip: packages, which the error is about
                raise
            if solved.candidate != p.chosen:
                p = choose(p, solved.candidate, catalog, solved.why)
        c = p.chosen
        decisions = list(p.decisions)
        fw_index = index if c.index is None else index_of(c.index)
        cuda = cudnn = nccl = wheel = None
        if c.exact_pins:
            wheel = fw_index.wheel_for(c.framework, _v(c.version), p.python, p.os.glibc)
            if wheel is None:
                raise ResolutionError(f"{c.label} has no wheel for CPython {p.python} on glibc {p.os.glibc} at {fw_index.url}",
                                      hint="choose another Python/base or framework version")
            pins = bundled_pins(fw_index.requires(wheel), p.python)
            cuda, cudnn, nccl = pins.get("cuda"), pins.get("cudnn"), pins.get("nccl")
            if cuda and ".".join(cuda.split(".")[:2]) != c.cuda:
                raise ResolutionError(f"{wheel.filename} pins CUDA {cuda}, but the catalog says {c.label} is CUDA {c.cuda}",
                                      hint="run `envkit catalog refresh` to update the catalog from the index")
            decisions.append(Decision(topic="bundled", choice=f"CUDA {cuda}, cuDNN {cudnn}, NCCL {nccl}",
                                      reason=f"pinned by {wheel.filename}'s metadata on {fw_index.url}"))
        arches = c.arches
        if c.min_cc is None and c.framework in READERS:
            wheel = wheel or fw_index.wheel_for(c.framework, _v(c.version), p.python, p.os.glibc)
            arches = confirm_arches(p, catalog, fw_index, wheel, arch_reader, decisions)
        extra_index = index.url if c.index else None
        if solved is None:
            closed = closure([c.requirement], python=p.python, glibc=p.os.glibc, index_url=fw_index.url,
                             extra_index_url=extra_index, extra_constraints=list(caps(c)))
            own = {x.name for x in closed}
        else:
            closed = list(solved.pins)
            own = framework_group(closed, c.framework)  # the framework's closure, as the extras allowed it
            pairing = catalog.companions(c.framework, c.version)
            newest_now = {n: f.result() for n, f in newest.items()}
            for extra in t.extras:  # a companion's newest is the newest that pairs with this release (index cached)
                n = canonicalize_name(Requirement(extra).name)
                if n in pairing:
                    newest_now[n] = joint.newest_admitted(index, extra, p.python, p.os.glibc, pairing[n])
            reports = joint.report_extras(t, solved, newest_now, closure)
            if held_back == "refuse":
                joint.refuse_held_back(reports)
            decisions += [r.decision for r in reports]
    packages = [Package(name=x.name, version=x.version, hashes=x.hashes,
                        group="framework" if x.name in own else "extra") for x in closed]
    fw = [x for x in closed if x.name in own]
    if not c.exact_pins:  # ranges: what the closure picked is what the image holds
        libraries = library_versions((x.name, x.version) for x in fw)
        cuda, cudnn, nccl = libraries["cuda"], libraries["cudnn"], libraries["nccl"]
        decisions.append(Decision(topic="bundled", choice=f"CUDA {cuda}, cuDNN {cudnn}, NCCL {nccl}",
                                  reason=f"what the closure pinned within {c.label}'s ranges"))
    cuda_mm = ".".join(cuda.split(".")[:2]) if cuda else c.cuda
    if p.target.flavour == "devel":  # the CUDA compiler, constrained by everything above (envkit/devel.py)
        devel.check_framework(p.target.name, c.framework)
        locked = [Pin(x.name, x.version, x.hashes) for x in packages]
        added = devel.lock_packages(p.target.name, cuda_mm, locked, requirement=p.target.framework,
                                    python=p.python, glibc=p.os.glibc,
                                    index_url=fw_index.url, extra_index_url=extra_index, closure=closure)
        packages += added
        decisions.append(Decision(topic="devel", choice=", ".join(f"{x.name} {x.version}" for x in added),
                                  reason=devel.source(cuda_mm)))
    return sealed(LockedImage(
        name=p.target.name, framework=c.framework, framework_version=c.version, variant=c.variant,
        index_url=fw_index.url, extra_index_url=extra_index, python=p.python,
        platform=f"x86_64-manylinux_{p.os.glibc.replace('.', '_')}",
        cuda=cuda, cuda_major_minor=cuda_mm, cudnn=cudnn or c.cudnn, nccl=nccl or c.nccl,
        arch_list=arches, min_cc=c.min_cc, driver_floor=p.driver_floor, require_cuda=p.require_cuda,
        policy=p.policy, base=p.base, apt=tuple(p.target.apt),
        flavour=p.target.flavour, packages=tuple(sorted(packages, key=lambda x: (x.group, x.name))),
        requested=tuple(dict.fromkeys(canonicalize_name(Requirement(x).name) for x in p.target.pip)),
        decisions=tuple(decisions)))


def confirm_arches(p: ImagePlan, catalog: Catalog, fw_index: Index, wheel, reader: ArchReader,
                   decisions: list[Decision]) -> tuple[str, ...]:
    """The arch list to lock: the wheel's own (read by range requests), else the catalog's, said unconfirmed.

    A wheel that disagrees with the catalog wins; the fleet's GPUs are judged again on its list and
    an image they are not covered by is refused."""
    c = p.chosen
    try:
        if wheel is None:
            raise WheelReadError(f"no {c.framework} {c.version} wheel for CPython {p.python} on {fw_index.url}")
        read = reader(fw_index, wheel, c.framework)
    except WheelReadError as exc:
        decisions.append(Decision(topic="arch_list", choice=" ".join(c.arches),
                                  reason=f"the catalog's list, not confirmed from the wheel: {exc.message}"))
        return c.arches
    said = f"read from {read.member} in {read.wheel} on {fw_index.url}"
    if same_arches(read.flags, c.arches):
        decisions.append(Decision(topic="arch_list", choice=" ".join(read.flags), reason=said + "; as the catalog says"))
        return read.flags
    catalog_list = " ".join(c.arches)
    if p.fleet is not None and p.fleet.gpus:
        try:
            jit_floor = catalog.toolkit_floor(c.cuda)
        except CatalogError:
            jit_floor = None
        ptx_ok = jit_floor is not None and vtuple(p.fleet.min_driver) >= vtuple(jit_floor)
        why = uncovered(replace(c, arches=read.flags), p.fleet, ptx_ok, jit_floor)
        if why is not None:
            raise ResolutionError(
                f"image {p.target.name!r}: {c.label} {why} - the list {read.wheel} holds ({read.member}, "
                f"on {fw_index.url}), not the catalog's {catalog_list}",
                location=p.where,
                hint="correct the catalog from the wheels (`envkit catalog check-arches --apply`) and resolve again: "
                     "the plan then picks a build that covers the fleet or names the ways out; or serve that GPU "
                     "with another image")
        gpus_reason = "every fleet GPU is covered by the arch list " + " ".join(read.flags) + " (the wheel's)"
        decisions[:] = [d.model_copy(update={"reason": gpus_reason}) if d.topic == "gpus" else d for d in decisions]
    decisions.append(Decision(topic="arch_list", choice=" ".join(read.flags),
                              reason=f"{said}; the catalog says {catalog_list} - the wheel's list is locked "
                                     "(`envkit catalog check-arches` corrects the catalog)"))
    return read.flags


def _caps(c: Candidate, *, policy: str, top: str | None) -> tuple[str, ...]:
    """Range pins under strict policy: the CUDA runtime kept within what the fleet's driver fully supports."""
    if not c.exact_pins and policy == "strict" and top and vtuple(top)[0] == vtuple(c.cuda)[0]:
        return (f"{runtime_package(vtuple(c.cuda)[0])}<{vtuple(top)[0]}.{vtuple(top)[1] + 1}",)
    return ()


def _v(text: str) -> Version:
    return Version(text)


def _default_index_for(url: str) -> Index:
    from ..index.client import PackageIndex
    return PackageIndex(url)
