"""resolve(spec, catalog, index) -> Lock: ``plan.plan`` (pure: the catalog alone), then each image locked.

``resolve`` locks the plan: it confirms from the wheel's index metadata what a
PyTorch build bundles, and pins the whole Python closure with hashes. The index and the
closure compiler are passed in, so tests use fakes.
"""

from __future__ import annotations

import functools
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import __version__
from ..catalog.models import Catalog, vtuple
from ..errors import CatalogError, Location, PackageIndexError, ResolutionError, WheelReadError
from ..frameworks import framework
from ..index.client import PackageIndex, WheelFile
from ..index.closure import Pin, compile_closure, framework_group
from ..index.wheel_arches import ArchReading, read_arches, same_arches
from ..index.wheel_facts import bundled_pins, library_versions, runtime_package
from ..lock import Decision, Lock, LockedImage, Package, sealed
from ..spec import Spec
from . import binaries, devel, joint, linked, releases
from .candidates import Candidate, candidates
from .joint import Index
from .plan import ImagePlan, choose, plan, spec_digest
from .rules import uncovered

Closure = Callable[..., list[Pin]]
IndexFactory = Callable[[str], Index]
Sizes = Callable[[LockedImage], LockedImage]  # a locked image with its wheels' sizes
ArchReader = Callable[[Any, Any, str], ArchReading]  # (a MemberIndex, wheel, framework): wheel_arches.read_arches


# --- lock (index + closure) ------------------------------------------------------------
def resolve(spec: Spec, catalog: Catalog, index: Index, *, closure: Closure = compile_closure,
            index_for: IndexFactory | None = None, only: list[str] | None = None,
            arch_reader: ArchReader = read_arches, sizes: Sizes | None = None) -> Lock:
    """Plan, then lock each image: confirm bundled pins and the compiled arch list from the wheel,
    compile the closure with hashes; ``sizes`` (``index.sizes.with_sizes``) adds each wheel's bytes. The images are
    locked side by side (each mostly waits on the index and uv); the first image in the spec's order that fails is
    the error."""
    plans = plan(spec, catalog, only)
    pool = ThreadPoolExecutor(max_workers=IMAGE_WORKERS)
    try:
        def locked(p: ImagePlan) -> LockedImage:  # sizes read as soon as the image is locked, beside the others'
            image = lock_image(p, index, catalog, closure, index_for, spec.fleet.min_driver, arch_reader,
                               held_back=spec.build.held_back or "show",
                               cpu_fallback=spec.build.cpu_fallback or "warn")
            return sizes(image) if sizes is not None else image

        futures = [pool.submit(locked, p) for p in plans]
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
                            or (_pip_entry(spec, i, _named_in(spec, i, exc.message)) if extras else None)
                            or (spec.locate("images", i, "pip") if extras else None)
                            or spec.locate("images", i, "name"))
            if not exc.message.startswith(f"image {p.target.name!r}"):
                exc.message = f"image {p.target.name!r}: {exc.message}"
                exc.args = (exc.message, *exc.args[1:])
        raise


def _named_in(spec: Spec, i: int, message: str) -> str | None:
    """The first of image ``i``'s pip: packages (then defaults.pip's) that a closure's refusal names: the item the
    conflict is about, rather than the whole pip: list."""
    words = {canonicalize_name(w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._-]*", message)}
    for entry in (*spec.images[i].pip, *spec.defaults.pip):
        name = canonicalize_name(Requirement(str(entry)).name)
        if name in words:
            return name
    return None


def _pip_entry(spec: Spec, i: int, package: str | None) -> Location | None:
    """Where the spec asks for ``package`` in image ``i``'s pip: (or defaults.pip)."""
    if package is None:
        return None
    for path, entries in ((("images", i, "pip"), spec.images[i].pip), (("defaults", "pip"), spec.defaults.pip)):
        for j, entry in enumerate(entries):
            if canonicalize_name(Requirement(str(entry)).name) == package:
                return spec.locate(*path, j)
    return None


def _solve_with_extras(p: ImagePlan, t: joint.Target, catalog: Catalog, index: Index,
                       closure: Closure) -> joint.Joint:
    """The framework build and the image's pip: packages solved together."""
    known = {Version(x.version) for x in candidates(Requirement(p.chosen.framework), catalog, ignore_version=True)}
    try:
        return joint.solve(t, binaries.viable_beside(t, list(p.viable), catalog, index), catalog, index, closure, known)
    except ResolutionError as exc:
        exc.from_extras = True  # solved with the image's pip: packages, which the error is about
        raise


def _bundled(p: ImagePlan, fw_index: Index, decisions: list[Decision]) -> tuple[WheelFile, tuple[str | None, ...]]:
    """The framework's wheel and the CUDA, cuDNN and NCCL versions its metadata pins (a build with exact pins)."""
    c = p.chosen
    wheel = fw_index.wheel_for(c.framework, _v(c.version), p.python, p.os.glibc)
    if wheel is None:
        raise ResolutionError(
            f"{c.label} has no wheel for CPython {p.python} on glibc {p.os.glibc} at {fw_index.url}",
            hint="choose another Python/base or framework version",
        )
    pins = bundled_pins(fw_index.requires(wheel), p.python)
    cuda, cudnn, nccl = pins.get("cuda"), pins.get("cudnn"), pins.get("nccl")
    if cuda and ".".join(cuda.split(".")[:2]) != c.cuda:
        raise ResolutionError(
            f"{wheel.filename} pins CUDA {cuda}, but the catalog says {c.label} is CUDA {c.cuda}",
            hint="run `envkit catalog refresh` to update the catalog from the index",
        )
    decisions.append(Decision(topic="bundled", choice=f"CUDA {cuda}, cuDNN {cudnn}, NCCL {nccl}",
                              reason=f"pinned by {wheel.filename}'s metadata on {fw_index.url}"))
    return wheel, (cuda, cudnn, nccl)


def _extras_decisions(p: ImagePlan, t: joint.Target, solved: joint.Joint, newest: dict[str, Future],
                      latest: dict[str, Future], catalog: Catalog, index: Index, closure: Closure, *,
                      held_back: str) -> list[Decision]:
    """A decision per pip: package (its version against the newest it admits); a pre-release no entry names is
    refused; ``held_back='refuse'`` fails on one held far behind."""
    c = p.chosen
    pairing = catalog.companions(c.framework, c.version)
    newest_now = {n: f.result() for n, f in newest.items()}
    latest_now = {n: f.result() for n, f in latest.items()}
    for extra in t.extras:  # a companion's newest is the newest that pairs with this release (index cached)
        n = canonicalize_name(Requirement(extra).name)
        if n in pairing:
            newest_now[n] = joint.newest_admitted(index, extra, p.python, p.os.glibc, pairing[n])
            latest_now[n] = None  # the catalog's pairing decides a companion, not the index's newest
    releases.refuse_prereleases(t, solved.pins, newest_now, latest_now, index)
    reports = releases.mark_stale(t, joint.report_extras(t, solved, newest_now, closure), latest_now, index)
    reports = binaries.explain_held(reports, binaries.caps(catalog, c))
    if held_back == "refuse":
        joint.refuse_held_back(reports)
    return [r.decision for r in reports]


def lock_image(p: ImagePlan, index: Index, catalog: Catalog, closure: Closure,
               index_for: IndexFactory | None, min_driver: str, arch_reader: ArchReader = read_arches, *,
               held_back: str = "show", cpu_fallback: str = "warn") -> LockedImage:
    """Lock one planned image. ``held_back``: the spec's build.held_back ('refuse': a pip: package held far behind
    the newest release it admits fails the resolve, at its pip: entry); ``cpu_fallback``: build.cpu_fallback
    ('refuse': a CPU-only accelerator library in a GPU image fails it, resolve/linked.py)."""
    index_of = index_for or _default_index_for
    caps = functools.partial(_caps, policy=p.policy, top=catalog.max_cuda_for_driver(min_driver), catalog=catalog)
    t = joint.Target(p.target.name, tuple(p.target.pip), p.python, p.os.glibc, caps)
    newest: dict[str, Future] = {}
    latest: dict[str, Future] = {}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for extra in t.extras:  # asked of the index while uv solves
            name = canonicalize_name(Requirement(extra).name)
            newest[name] = pool.submit(joint.newest_admitted, index, extra, p.python, p.os.glibc)
            latest[name] = pool.submit(releases.newest_release, index, extra)
        solved = _solve_with_extras(p, t, catalog, index, closure) if t.extras else None
        if solved is not None and solved.candidate != p.chosen:
            p = choose(p, solved.candidate, catalog, solved.why)
        c = p.chosen
        decisions = list(p.decisions)
        fw_index = index if c.index is None else index_of(c.index)
        cuda = cudnn = nccl = wheel = None
        if c.exact_pins:
            wheel, (cuda, cudnn, nccl) = _bundled(p, fw_index, decisions)
        arches = c.arches
        if c.min_cc is None and framework(c.framework).arch is not None:
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
            decisions += _extras_decisions(p, t, solved, newest, latest, catalog, index, closure,
                                           held_back=held_back)
    packages = [Package(name=x.name, version=x.version, hashes=x.hashes,
                        group="framework" if x.name in own else "extra") for x in closed]
    fw = [x for x in closed if x.name in own]
    if not c.exact_pins:  # ranges: what the closure picked is what the image holds
        libraries = library_versions((x.name, x.version) for x in fw)
        cuda, cudnn, nccl = libraries["cuda"], libraries["cudnn"], libraries["nccl"]
        decisions.append(Decision(topic="bundled", choice=f"CUDA {cuda}, cuDNN {cudnn}, NCCL {nccl}",
                                  reason=f"what the closure pinned within {c.label}'s ranges"))
    cuda_mm = ".".join(cuda.split(".")[:2]) if cuda else c.cuda
    decisions += binaries.check_closure(t, c, cuda_mm, closed, catalog)  # the catalog's binary facts
    decisions += linked.check_linked(t, c, cuda_mm, cudnn or c.cudnn, closed, own, catalog,
                                     linked.reader(index, p.python, p.os.glibc))  # what unknown wheels link
    decisions += linked.check_cpu_fallback(c, cuda_mm, closed, catalog, cpu_fallback)
    if p.target.flavour == "devel":  # the CUDA compiler, constrained by everything above (envkit/resolve/devel.py)
        devel.check_framework(p.target.name, c.framework)
        locked = [Pin(x.name, x.version, x.hashes) for x in packages]
        added = devel.lock_packages(p.target.name, cuda_mm, locked, requirement=p.target.framework,
                                    python=p.python, glibc=p.os.glibc,
                                    index_url=fw_index.url, extra_index_url=extra_index, closure=closure,
                                    toolkits=tuple(catalog.debian_toolkits()))
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
        toolkit_deb=devel.toolkit_for(catalog, p.target.name, cuda_mm, p.base, p.target.framework)
        if p.target.flavour == "devel" else None,  # CUDA 12: Debian's toolkit .deb, pinned (the build reads it here)
        decisions=tuple(decisions)))


def confirm_arches(p: ImagePlan, catalog: Catalog, fw_index: Index, wheel: WheelFile | None, reader: ArchReader,
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
        decisions.append(
            Decision(topic="arch_list", choice=" ".join(read.flags), reason=said + "; as the catalog says")
        )
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


def _caps(c: Candidate, *, policy: str, top: str | None, catalog: Catalog) -> tuple[str, ...]:
    """Constraints on a build's solves: under strict policy, range pins keep the CUDA runtime within what the fleet's
    driver fully supports; the catalog's binary facts (``resolve.binaries.caps``: the NumPy the build's binaries run
    on, the onnxruntime-gpu releases of its CUDA major)."""
    facts = tuple(binaries.caps(catalog, c))
    if not c.exact_pins and policy == "strict" and top and vtuple(top)[0] == vtuple(c.cuda)[0]:
        return (f"{runtime_package(vtuple(c.cuda)[0])}<{vtuple(top)[0]}.{vtuple(top)[1] + 1}", *facts)
    return facts


def _v(text: str) -> Version:
    return Version(text)


def _default_index_for(url: str) -> Index:
    return PackageIndex(url)
