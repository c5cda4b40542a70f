"""resolve(spec, catalog, index) -> Lock.

Per image: pick the newest framework release that satisfies every constraint (the
requirement, the base's Python, the CUDA constraint, the fleet's oldest driver under the
spec's policy, every fleet GPU covered by the wheel's compiled arch list), confirm what
the chosen wheel bundles from its index metadata, and lock the Python closure with
hashes. Every choice and every rejected alternative is recorded with its reason.

The package index and the closure compiler are passed in, so the logic is tested with
fakes and deterministic for a given index state.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from . import __version__
from .catalog import Arch, Catalog, TorchRelease, TorchVariant, vtuple
from .closure import Pin, compile_closure
from .errors import ResolutionError, SpecError
from .index import DEFAULT_INDEX
from .lock import BaseImage, Decision, Lock, LockedImage, Package, canonical, sealed
from .spec import Base, Spec, Target

SUPPORTED_FRAMEWORKS = ("torch",)
IMAGE_SUITES = {"debian": {"12": "bookworm", "13": "trixie"}, "ubuntu": {"22.04": "jammy", "24.04": "noble"}}


class Index(Protocol):
    url: str

    def versions(self, project: str) -> list[Version]: ...
    def wheel_for(self, project: str, version: Version, python: str, glibc: str): ...
    def requires(self, wheel) -> list[Requirement]: ...


Closure = Callable[..., list[Pin]]


@dataclass
class _Trace:
    decisions: list[Decision] = field(default_factory=list)

    def add(self, topic: str, choice: str, reason: str, rejected: list[str] | None = None) -> None:
        self.decisions.append(Decision(topic=topic, choice=choice, reason=reason, rejected=tuple(rejected or ())))


def spec_digest(spec: Spec) -> str:
    return "sha256:" + hashlib.sha256(canonical(spec.model_dump(mode="json"))).hexdigest()


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
        name = Requirement(image.framework).name.lower()
        if name not in SUPPORTED_FRAMEWORKS:
            raise SpecError(
                f"unsupported framework {name!r} in images[{i}].framework",
                location=spec.locate("images", i, "framework"),
                hint=f"supported: {', '.join(SUPPORTED_FRAMEWORKS)}",
            )


def resolve(spec: Spec, catalog: Catalog, index: Index, *, closure: Closure = compile_closure,
            only: list[str] | None = None) -> Lock:
    check_frameworks(spec)
    fleet = check_gpus(spec, catalog)
    images = []
    for image in spec.images:
        if only and image.name not in only:
            continue
        images.append(resolve_image(spec, spec.effective(image), catalog, index, fleet, closure))
    return Lock(team=spec.team, spec_digest=spec_digest(spec), catalog_digest=catalog.digest,
                envkit_version=__version__, images=tuple(images))


def resolve_image(spec: Spec, target: Target, catalog: Catalog, index: Index,
                  fleet: list[Arch], closure: Closure) -> LockedImage:
    trace = _Trace()
    where = spec.locate("images", spec.index_of(target.name))
    base = _base(target.base, catalog, trace, where)
    os_base = catalog.os_base(base.suite)
    python = target.python or os_base.python
    if python != os_base.python:
        others = [b.suite for b in catalog._f.bases if b.python == python]
        raise ResolutionError(
            f"image {target.name!r} asks for Python {python} but its base ({base.distro} {base.suite}) ships {os_base.python}",
            location=where,
            hint=(f"use a {', '.join(others)} base" if others else f"use python: \"{os_base.python}\"")
                 + "; envkit uses the base's own interpreter",
        )
    trace.add("python", python, f"the interpreter of {base.distro} {base.suite}")

    req = Requirement(target.framework)
    policy = spec.fleet.policy
    cuda_spec = SpecifierSet(target.cuda) if target.cuda else None
    rejected: list[str] = []
    chosen: tuple[Version, TorchRelease, TorchVariant] | None = None
    for version in index.versions(req.name):
        if version.is_prerelease or not req.specifier.contains(version):
            continue
        why = _reject(version, python, catalog, cuda_spec, spec.fleet.min_driver, policy, fleet)
        if isinstance(why, str):
            rejected.append(f"{req.name} {version}: {why}")
            continue
        chosen = (version, *why)
        break
    if chosen is None:
        raise ResolutionError(
            f"no {req.name} release satisfies image {target.name!r} ({target.framework})",
            location=where,
            hint=_ways_out(rejected),
        )
    version, release, variant = chosen
    trace.add(req.name, str(version),
              f"newest release matching {req.specifier or 'any'} that fits Python {python}, the driver and the GPUs",
              rejected[:8])

    wheel = index.wheel_for(req.name, version, python, os_base.glibc)
    if wheel is None:
        raise ResolutionError(f"{req.name} {version} has no wheel for CPython {python} on glibc {os_base.glibc}",
                              location=where, hint="choose another Python/base or framework version")
    bundled = bundled_pins(index.requires(wheel), python)
    cuda = bundled.get("cuda")
    if cuda and ".".join(cuda.split(".")[:2]) != variant.cuda:
        raise ResolutionError(
            f"{wheel.filename} pins CUDA {cuda}, but the catalog says the index's {req.name} {version} is {variant.tag}",
            hint="run `envkit catalog refresh` to update the catalog from the index",
        )
    trace.add("variant", variant.tag, f"the index's default build of {req.name} {release.version} (read from {wheel.filename})")
    floor = catalog.driver_floor_for(variant.cuda, policy)
    trace.add("driver_floor", floor,
              f"CUDA {variant.cuda} under policy '{policy}' "
              + ("(minor-version compatibility within the major)" if policy == "minor" else "(the toolkit's own floor)"))

    fw = closure([f"{req.name}=={version}"], python=python, glibc=os_base.glibc, index_url=index.url)
    packages = [Package(name=p.name, version=p.version, hashes=p.hashes, group="framework") for p in fw]
    if target.pip:
        full = closure([f"{req.name}=={version}", *target.pip], python=python, glibc=os_base.glibc,
                       index_url=index.url, constraints=fw)
        names = {p.name for p in fw}
        packages += [Package(name=p.name, version=p.version, hashes=p.hashes, group="extra")
                     for p in full if p.name not in names]
    return sealed(LockedImage(
        name=target.name,
        framework=req.name,
        framework_version=str(version),
        variant=variant.tag,
        index_url=index.url,
        python=python,
        platform=f"x86_64-manylinux_{os_base.glibc.replace('.', '_')}",
        cuda=cuda,
        cuda_major_minor=variant.cuda,
        cudnn=bundled.get("cudnn") or variant.cudnn,
        nccl=bundled.get("nccl") or variant.nccl,
        arch_list=variant.arches,
        driver_floor=floor,
        require_cuda=catalog.require_cuda_for(variant.cuda, policy),
        policy=policy,
        base=base,
        apt=tuple(target.apt),
        flavour=target.flavour,
        packages=tuple(sorted(packages, key=lambda p: (p.group, p.name))),
        decisions=tuple(trace.decisions),
    ))


def _reject(version: Version, python: str, catalog: Catalog, cuda_spec: SpecifierSet | None,
            min_driver: str, policy: str, fleet: list[Arch]) -> str | tuple[TorchRelease, TorchVariant]:
    """A reason to reject ``version``, or its (release, default variant)."""
    release = catalog.torch_release(str(version))
    if release is None:
        return "not in the catalog (run `envkit catalog refresh`)"
    if not release.python.admits(python):
        return f"supports Python {release.python.min}-{release.python.max}, not {python}"
    variant = release.variant(release.index_default)
    if variant is None:
        return f"the catalog lacks its default variant {release.index_default}"
    if cuda_spec is not None and not cuda_spec.contains(variant.cuda + ".0", prereleases=True) \
            and not cuda_spec.contains(variant.cuda, prereleases=True):
        return f"its index build is CUDA {variant.cuda}, outside cuda {cuda_spec}"
    floor = catalog.driver_floor_for(variant.cuda, policy)
    if vtuple(min_driver) < vtuple(floor):
        return f"CUDA {variant.cuda} needs driver >= {floor} (policy {policy}); the fleet's oldest is {min_driver}"
    for arch in fleet:
        if not covers(variant.arches, arch.cc, ptx_ok=policy == "strict" or vtuple(min_driver) >= vtuple(catalog.toolkit_floor(variant.cuda))):
            return f"its {variant.tag} build has no kernels for {arch.family} (sm_{arch.cc.replace('.', '')}); arch list {variant.arch_list}"
    return release, variant


def covers(arches: tuple[str, ...], cc: str, *, ptx_ok: bool = True) -> bool:
    """SASS for X.y runs on X.z (z >= y); PTX for X.y JITs on any cc >= X.y, if the driver can."""
    major, minor = vtuple(cc)
    for a in arches:
        kind, _, num = a.partition("_")
        num = re.sub(r"[a-z]$", "", num)
        m, n = int(num[:-1]), int(num[-1])
        if kind == "sm" and m == major and n <= minor:
            return True
        if kind == "compute" and ptx_ok and (m, n) <= (major, minor):
            return True
    return False


def bundled_pins(requirements: list[Requirement], python: str) -> dict[str, str]:
    """What a framework wheel pins exactly: its CUDA runtime, cuDNN and NCCL."""
    env = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux",
           "python_version": python, "python_full_version": python + ".0"}
    out: dict[str, str] = {}
    for r in requirements:
        if r.marker and not r.marker.evaluate(env | {"extra": ""}):
            continue
        pins = [s.version for s in r.specifier if s.operator == "=="]
        if not pins:
            continue
        name = r.name.lower()
        if re.fullmatch(r"nvidia-cuda-runtime(-cu\d+)?", name) or name == "cuda-toolkit":
            out.setdefault("cuda", pins[0])
        elif re.fullmatch(r"nvidia-cudnn-cu\d+", name):
            out["cudnn"] = pins[0]
        elif re.fullmatch(r"nvidia-nccl-cu\d+", name):
            out["nccl"] = pins[0]
    return out


def _base(base: Base, catalog: Catalog, trace: _Trace, where) -> BaseImage:
    if base.bootstrap:
        b = base.bootstrap
        os_base = catalog.os_base(b.suite)
        if os_base is None or os_base.distro != "debian":
            raise ResolutionError(f"cannot bootstrap suite {b.suite!r}", location=where,
                                  hint=f"known Debian suites: {', '.join(s for s in catalog.suites() if catalog.os_base(s).distro == 'debian')}")
        recipe = {"suite": b.suite, "mirror": b.mirror, "variant": b.variant}
        rh = hashlib.sha256(canonical(recipe)).hexdigest()[:12]
        trace.add("base", f"debootstrap {b.suite}", "made locally with debootstrap + docker import (no registry needed)")
        return BaseImage(ref=f"envkit-base/debian:{b.suite}-{b.variant}-{rh}", digest=None,
                         distro="debian", suite=b.suite, bootstrap=recipe)
    ref = base.image
    name, _, digest = ref.partition("@")
    repo, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "latest")
    distro = repo.rsplit("/", 1)[-1]
    suite = IMAGE_SUITES.get(distro, {}).get(tag, tag.split("-")[0])
    if catalog.os_base(suite) is None:
        raise ResolutionError(f"cannot tell which OS release base image {ref!r} is", location=where,
                              hint=f"use a tag naming a known suite ({', '.join(catalog.suites())})")
    trace.add("base", ref, "given in the spec" + ("" if digest else " (pin it by digest for reproducible builds)"))
    return BaseImage(ref=ref, digest=digest or None, distro=catalog.os_base(suite).distro, suite=suite)


def _ways_out(rejected: list[str]) -> str:
    if not rejected:
        return "no release matches the requirement at all; check the version specifier"
    shown = "; ".join(rejected[:4])
    return f"rejected: {shown}. Relax the framework requirement, the cuda constraint, the GPU list, or raise fleet.min_driver"
