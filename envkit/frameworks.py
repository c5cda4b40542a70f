"""What envkit knows about each framework it locks, in one place.

The resolver treats frameworks through the catalog (``resolve/candidates.py``); everything *after* the
lock that differs between frameworks is here: whether envkit builds its images (and offline
bundles, and the devel flavour), what the in-image payload must find (``expect``, straight from
the lock, or from an image's pin labels), the framework's own pin labels, and the host's verdict
rules: which versions are compared and how, how GPU coverage is judged (a compiled arch list: the
lock's, or where the lock gives none the one the image reports; or a minimum compute capability),
and which of the payload's GPU-only checks exist and must pass for ``certified``. Before the lock, two facts of the
index are here too: where its wheel holds the compiled arch list (``ArchSource``: the resolver confirms the catalog's
list from it, ``catalog check-arches`` compares them) and what the companions' refresh reads (``Companions``).

The packages the team asked for (the spec's ``pip:`` packages, ``LockedImage.requested``) are the same
for every framework: the expect document's ``requested`` (each canonical name with its locked version),
the pin label ``io.envkit.requested``, and the payload's ``requested_imports`` check, which the host
judges per package (``certify/verdict.py``).

The payload (``payload/envkit_check/``: a registry per framework, in ``envkit_check_torch``,
``envkit_check_jax`` and ``envkit_check_tf``) cannot import envkit, so its check names are written
there too; ``tests/unit/test_frameworks.py`` holds the two in step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

from .errors import BuildError, EnvkitError
from .support.labels import PREFIX

if TYPE_CHECKING:
    from .lock import LockedImage

LABEL = PREFIX
REQUESTED = "requested"  # the expect document's key: {canonical name: locked version, or null}
REQUESTED_CHECK = "requested_imports"  # the payload's check of them (every framework's registry)
REQUESTED_LABEL = LABEL + "requested"  # "accelerate==1.1.1 torchaudio==2.5.1", on images that request any


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requested(image: LockedImage) -> dict:
    """The expect document's part for the spec's pip: packages: none when the spec asks for none (so the expect
    files of such images stay as they were), else each with the version the lock installs."""
    if not image.requested:
        return {}
    versions = {_canonical(p.name): p.version for p in image.packages}
    return {REQUESTED: {_canonical(name): versions.get(_canonical(name)) for name in image.requested}}


def requested_labels(image: LockedImage) -> dict[str, str]:
    pins = requested(image).get(REQUESTED, {})
    return {REQUESTED_LABEL: " ".join(f"{n}=={v}" if v else n for n, v in pins.items())} if pins else {}


def _requested_from_label(text: str | None) -> dict:
    if not text:
        return {}
    pins = (token.partition("==") for token in text.split())
    return {REQUESTED: {name: version or None for name, _, version in pins}}


@dataclass(frozen=True)
class Pin:
    """A version the host's verdict compares between the lock (expect) and the image (facts)."""

    key: str  # in expect and in the payload's facts
    label: str  # in messages
    parts: int | None = None  # compared on the first N numeric components; None: on every component
    public: bool = False  # a project's version: the public versions must be equal (a local tag is ignored);
    #                       not compared when the lock gives none


@dataclass(frozen=True)
class ArchSource:
    """Where a framework's wheel holds its compiled arch list (``index/wheel_arches.py`` reads it there)."""

    member: str  # the wheel's member holding it
    parser: Literal["flags_string", "build_info"]  # how it is read: ``index.wheel_arches.PARSERS``
    text: str  # what the catalog's source texts call it (check-arches)


@dataclass(frozen=True)
class Companions:
    """What the companions' refresh (``catalog/refresh/companions.py``, ``companions_read.py``) reads from the index
    for the framework's rows of companions.yaml."""

    rows: Literal["series", "version"]  # a row per series, each patch read (the refresh's entries); or per version
    #                                     (its refresh's added patches, each its own row)
    pinned: tuple[str, ...] = ()  # the packages its own wheels require on Linux (torch: triton)
    pinned_extra: str = ""  # every requirement of this extra of its own wheels (tensorflow: and-cuda)
    cuda_extras: bool = False  # per cudaNN extra of its wheel: jaxlib, the CUDA plugin, and each plugin's pjrt (JAX)
    # the companions whose own METADATA names the framework: (project, "series" (==A.B.*) | "exact" (the releases
    # read), paired by its own number when it names no framework release)
    declared: tuple[tuple[str, Literal["series", "exact"], bool], ...] = ()


@dataclass(frozen=True)
class Framework:
    name: str  # the lock's project name (its project on the package index)
    title: str
    catalog_file: str  # its releases in the catalog: envkit/catalog/data/<catalog_file>.yaml
    extras: frozenset[str]  # the extras team.yaml may ask for in the requirement (jax[cuda13])
    builds: bool  # envkit builds and verifies its images
    bundles: bool  # envkit makes offline bundles of its images (tested end to end)
    devel: bool  # the devel flavour knows it (resolve/devel.py still refuses a CUDA release it has no compiler for)
    coverage: Literal["arch_list", "min_cc"]  # how GPUs are judged covered
    pins: tuple[Pin, ...]
    gpu_checks: tuple[str, ...]  # the payload's GPU-only checks, in run order
    required_gpu_checks: tuple[str, ...]  # must pass for ``certified``: the GPU really ran the stack
    deviceless_gpu_checks: frozenset[str]  # GPU-only checks that may pass in certify mode with no usable device
    expect: Callable[[LockedImage], dict]
    labels: Callable[[LockedImage], dict[str, str]]  # the framework's own pin labels
    expect_from_labels: Callable[[dict[str, str | None]], dict]  # values: None where a label is absent/"none"
    # the framework's own verdict rules on the payload's facts (beyond pins and coverage): reasons to fail
    facts_rules: Callable[[dict, dict], list[str]] = lambda facts, expect: []
    # devel=False: why envkit makes no devel flavour of it, and what to do instead
    devel_refusal: tuple[str, str] = (
        "",
        "use flavour: runtime for it (the runtime image has the framework's CUDA libraries)",
    )
    # what the companions' refresh reads for its companions.yaml rows
    companions: Companions = Companions(rows="series")
    # coverage arch_list: where its wheel holds the compiled arch list (the resolver confirms the catalog's from it)
    arch: ArchSource | None = None


# --- PyTorch -------------------------------------------------------------------------
def _torch_expect(image: LockedImage) -> dict:
    return {"torch": image.framework_version, "cuda": image.cuda_major_minor, "cudnn": image.cudnn,
            "nccl": image.nccl, "arch_list": list(image.arch_list), "python": image.python,
            "driver_floor": image.driver_floor, **requested(image)}


def _arch_labels(image: LockedImage) -> dict[str, str]:
    return {LABEL + "arch-list": " ".join(image.arch_list)}


def _torch_from_labels(val: dict) -> dict:
    cuda = val.get("cuda")
    framework = val.get("framework") or ""
    return {"torch": framework.split("==", 1)[1] if framework.startswith("torch==") else None,
            "cuda": ".".join(cuda.split(".")[:2]) if cuda else None, "cudnn": val.get("cudnn"),
            "nccl": val.get("nccl"), "arch_list": (val.get("arch-list") or "").split() or None,
            "python": val.get("python"), "driver_floor": val.get("driver-floor")}


TORCH = Framework(
    name="torch", title="PyTorch", catalog_file="pytorch", extras=frozenset(),
    builds=True, bundles=True, devel=True, coverage="arch_list",
    # python and cuda on major.minor; torch reports cuDNN as M.m.p; torch's local tag (+cu124) is ignored
    pins=(Pin("python", "Python", 2), Pin("cuda", "CUDA runtime", 2), Pin("cudnn", "cuDNN", 3),
          Pin("nccl", "NCCL", 3), Pin("torch", "torch", public=True)),
    gpu_checks=("nvidia_smi", "cuda_available", "arch_covered", "cuda_train_step", "memory", "dataloader",
                "matmul_tflops", "h2d_d2h_bandwidth", "nccl_allreduce", "telemetry"),
    required_gpu_checks=("cuda_available", "arch_covered", "cuda_train_step"),
    deviceless_gpu_checks=frozenset({"nvidia_smi", "telemetry"}),
    expect=_torch_expect, labels=_arch_labels, expect_from_labels=_torch_from_labels,
    companions=Companions(rows="series", pinned=("triton",),
                          declared=(("torchvision", "series", False), ("torchaudio", "series", True),
                                    ("torchtext", "series", False), ("xformers", "exact", False))),
    arch=ArchSource("torch/lib/libtorch_python.so", "flags_string", "CUDA arch flags string"))


# --- JAX -----------------------------------------------------------------------------
# jax[cudaNN] installs jaxlib and a CUDA plugin (jax-cudaNN-plugin + jax-cudaNN-pjrt) whose
# version must equal jaxlib's (else jax quietly runs on the CPU). The CUDA libraries are ranges
# in the plugin's metadata; the closure pins them, so the image must hold exactly the lock's.
_JAX_PLUGIN = re.compile(r"jax-cuda\d+-plugin")


def _package(image: LockedImage, pattern: str) -> str | None:
    return next((p.version for p in image.packages if re.fullmatch(pattern, p.name)), None)


def _jax_expect(image: LockedImage) -> dict:
    expect = {"framework": "jax", "jax": image.framework_version, "jaxlib": _package(image, "jaxlib"),
              "cuda_plugin": _package(image, _JAX_PLUGIN.pattern), "cuda": image.cuda, "cudnn": image.cudnn,
              "nccl": image.nccl, "min_cc": image.min_cc, "python": image.python,
              "driver_floor": image.driver_floor}
    return {**{k: v for k, v in expect.items() if v is not None or k in ("cuda", "cudnn", "nccl")}, **requested(image)}


def _jax_labels(image: LockedImage) -> dict[str, str]:
    return {LABEL + "min-cc": image.min_cc or "none", LABEL + "jaxlib": _package(image, "jaxlib") or "none",
            LABEL + "cuda-plugin": _package(image, _JAX_PLUGIN.pattern) or "none"}


def _jax_from_labels(val: dict) -> dict:
    framework = val.get("framework") or ""
    expect = {"framework": "jax", "jax": framework.split("==", 1)[1] if framework.startswith("jax==") else None,
              "jaxlib": val.get("jaxlib"), "cuda_plugin": val.get("cuda-plugin"), "cuda": val.get("cuda"),
              "cudnn": val.get("cudnn"), "nccl": val.get("nccl"), "min_cc": val.get("min-cc"),
              "python": val.get("python"), "driver_floor": val.get("driver-floor")}
    return {k: v for k, v in expect.items() if v is not None or k in ("cuda", "cudnn", "nccl")}


JAX = Framework(
    # devel: jax[cuda13] (its closure holds the whole CUDA 13 compiler, which the plugin uses for ptxas);
    # jax[cuda12] locks a CUDA 12 release, refused by devel.check_cuda unless it is Debian's 12.4
    name="jax", title="JAX", catalog_file="jax", extras=frozenset({"cuda12", "cuda13"}),
    builds=True, bundles=True, devel=True, coverage="min_cc",
    # the CUDA libraries are read from the installed nvidia-* distributions: whole versions, exactly
    pins=(Pin("python", "Python", 2), Pin("cuda", "CUDA runtime"), Pin("cudnn", "cuDNN"), Pin("nccl", "NCCL"),
          Pin("jax", "jax", public=True), Pin("jaxlib", "jaxlib", public=True),
          Pin("cuda_plugin", "the JAX CUDA plugin", public=True)),
    # matmul_tflops and nccl_allreduce (jax.lax.psum, which XLA runs on NCCL across GPUs) share PyTorch's
    # names and value keys, so perf floors, nightly's metrics and regressions apply to both
    gpu_checks=("nvidia_smi", "gpu_devices", "cc_covered", "gpu_train_step", "matmul_tflops", "nccl_allreduce",
                "telemetry"),
    required_gpu_checks=("gpu_devices", "cc_covered", "gpu_train_step"),
    deviceless_gpu_checks=frozenset({"nvidia_smi", "telemetry"}),
    expect=_jax_expect, labels=_jax_labels, expect_from_labels=_jax_from_labels,
    companions=Companions(rows="version", cuda_extras=True))


# --- TensorFlow ----------------------------------------------------------------------
# tensorflow[and-cuda] installs the CUDA libraries as nvidia-*-cu12 wheels (ranges in its
# metadata, pinned by the closure): the image must hold exactly the lock's. Coverage is judged on
# the compute capabilities tensorflow reports it was compiled for (tf.sysconfig.get_build_info()
# ["cuda_compute_capabilities"]; 2.20.0: sm_60 sm_70 sm_80 sm_89 compute_90, read in the built
# image). The lock's arch list is the same fact, read from the wheel's build_info.py when resolving
# (envkit.index.wheel_arches; the catalog's TfRelease.arches otherwise, unconfirmed), so it is neither
# expected nor stamped on TensorFlow images: the image's own list is what coverage is judged on.
def _tf_expect(image: LockedImage) -> dict:
    return {"framework": "tensorflow", "tensorflow": image.framework_version, "cuda": image.cuda,
            "cudnn": image.cudnn, "nccl": image.nccl, "python": image.python, "driver_floor": image.driver_floor,
            **requested(image)}


def _tf_from_labels(val: dict) -> dict:
    framework = val.get("framework") or ""
    return {"framework": "tensorflow",
            "tensorflow": framework.split("==", 1)[1] if framework.startswith("tensorflow==") else None,
            "cuda": val.get("cuda"), "cudnn": val.get("cudnn"), "nccl": val.get("nccl"), "python": val.get("python"),
            "driver_floor": val.get("driver-floor")}


def _ints(text: object) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", str(text))]


def _tf_built_against(facts: dict, expect: dict) -> list[str]:
    """tensorflow runs with the CUDA runtime and cuDNN installed beside it only when they are of the
    major it was built against and not older (the payload's build_info check, re-derived from facts)."""
    if expect.get("cuda") is None:
        return []
    reasons = []
    for key, built_key, label in (("cuda", "build_cuda", "CUDA runtime"), ("cudnn", "build_cudnn", "cuDNN")):
        have, built = facts.get(key), facts.get(built_key)
        if have is None or built is None:  # a missing library is a pin's reason; a build that does not say, none
            continue
        h, b = _ints(have), _ints(built)
        if h[:1] != b[:1] or h[:len(b)] < b:
            reasons.append(f"{label}: the image has {have} but tensorflow was built against {built} "
                           "(it needs the same major, not older)")
    return reasons


TENSORFLOW = Framework(
    name="tensorflow", title="TensorFlow", catalog_file="tensorflow", extras=frozenset({"and-cuda"}),
    builds=True, bundles=True, devel=False, coverage="arch_list",
    # the CUDA libraries as for JAX: the installed nvidia-* distributions, every component
    pins=(Pin("python", "Python", 2), Pin("cuda", "CUDA runtime"), Pin("cudnn", "cuDNN"), Pin("nccl", "NCCL"),
          Pin("tensorflow", "tensorflow", public=True)),
    # matmul_tflops and nccl_allreduce (MirroredStrategy with NcclAllReduce across GPUs) keep PyTorch's value
    # keys, so perf floors, nightly's metrics and regressions apply
    gpu_checks=("nvidia_smi", "gpu_devices", "cc_covered", "gpu_train_step", "memory", "matmul_tflops",
                "nccl_allreduce", "telemetry"),
    required_gpu_checks=("gpu_devices", "cc_covered", "gpu_train_step"),
    deviceless_gpu_checks=frozenset({"nvidia_smi", "telemetry"}),
    expect=_tf_expect, labels=lambda image: {}, expect_from_labels=_tf_from_labels, facts_rules=_tf_built_against,
    companions=Companions(rows="series", pinned_extra="and-cuda", declared=(("tf-keras", "series", False),)),
    arch=ArchSource("tensorflow/python/platform/build_info.py", "build_info", "build_info cuda_compute_capabilities"),
    devel_refusal=(
        # the catalog's releases: 2.15-2.17 pin CUDA 12.2/12.3 exactly, 2.18 on ask for >= 12.5 (2.20 locks 12.9)
        "no tensorflow[and-cuda] release installs CUDA 12.4 (up to 2.17 it pins 12.2 or 12.3, from 2.18 on it "
        "asks for 12.5 or newer), and the only CUDA 12 compiler envkit can lock is Debian's 12.4 toolkit (the "
        "cu12 nvcc wheels hold no nvcc driver; see docs/images.md, the devel flavour)",
        "use flavour: runtime, and compile custom ops with a CUDA toolkit of the runtime's release on top of it; "
        "for kernels envkit can compile, use a PyTorch or JAX image with CUDA 13 and flavour: devel"))


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (TORCH, JAX, TENSORFLOW)}
NAMES: tuple[str, ...] = tuple(FRAMEWORKS)  # the frameworks envkit knows, in this order everywhere
ARCH_LISTED: tuple[str, ...] = tuple(n for n, f in FRAMEWORKS.items() if f.coverage == "arch_list")  # check-arches


def expected(image: LockedImage) -> dict:
    """What the in-image payload must find in ``image``, straight from the lock (``Framework.expect``)."""
    return framework(image.framework).expect(image)


def framework(name: str) -> Framework:
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise EnvkitError(f"envkit knows no framework {name!r}", hint=f"known: {', '.join(FRAMEWORKS)}") from None


def of_expect(expect: dict) -> Framework:
    """The framework an expect document (from the lock or the pin labels) describes.

    PyTorch's documents name none (they predate the others); every other framework's names itself."""
    return framework(str(expect.get("framework") or "torch"))


def of_labels(labels: dict[str, str]) -> Framework:
    name = (labels.get(LABEL + "framework") or "torch==").split("==", 1)[0]
    return FRAMEWORKS.get(name, TORCH)


def expect_from_labels(labels: dict[str, str]) -> dict:
    """What an image claims to hold, from the pin labels envkit stamped on it."""
    val = {k[len(LABEL):]: (None if v in ("", "none") else v) for k, v in labels.items() if k.startswith(LABEL)}
    return {**of_labels(labels).expect_from_labels(val), **_requested_from_label(val.get(REQUESTED))}


def _titles(frameworks: list[Framework]) -> str:
    """"PyTorch", "PyTorch and JAX", "PyTorch, JAX and TensorFlow"."""
    titles = [f.title for f in frameworks]
    return " and ".join(filter(None, (", ".join(titles[:-1]), titles[-1]))) if titles else "no"


def require_buildable(image: LockedImage) -> None:
    """Refuse, before anything is built, an image of a framework envkit does not build yet."""
    fw = framework(image.framework)
    if not fw.builds:
        built = _titles([f for f in FRAMEWORKS.values() if f.builds])
        raise BuildError(
            f"image {image.name!r} is locked ({image.framework} {image.framework_version}) but envkit builds only "
            f"{built} images so far; {fw.title} images resolve and lock, and building them is next",
            hint="build the others with --image, or use the lock with your own Dockerfile")


def require_bundle(image: LockedImage) -> None:
    """Refuse an offline bundle of an image whose framework's bundles envkit has not made and tested."""
    require_buildable(image)
    fw = framework(image.framework)
    if not fw.bundles:
        made = _titles([f for f in FRAMEWORKS.values() if f.bundles])
        raise BuildError(
            f"image {image.name!r} is a {fw.title} image; envkit bundles only {made} images so far "
            f"(build it online with `envkit build SPEC --image {image.name}`)",
            hint="build this one where the package index is reachable")


def require_devel(image: LockedImage) -> None:
    fw = framework(image.framework)
    if not fw.devel:
        cuda = f", CUDA {image.cuda_major_minor}" if image.cuda_major_minor else ""
        raise EnvkitError(devel_refusal(image.name, fw) + f" ({fw.title} {image.framework_version} is locked{cuda})",
                          hint=fw.devel_refusal[1])


def devel_refusal(name: str, fw: Framework) -> str:
    """Why ``name`` (an image of ``fw``) gets no devel flavour."""
    made = _titles([f for f in FRAMEWORKS.values() if f.devel])
    reason = f": {fw.devel_refusal[0]}" if fw.devel_refusal[0] else ""
    return f"image {name!r} asks for the devel flavour, which envkit makes only for {made} images{reason}"
