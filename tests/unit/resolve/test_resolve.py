"""envkit.resolve.resolver: choosing a framework build against the real catalog, with fakes.

The package indexes (the spec's, and each PyTorch variant's own) and the closure
compiler are fakes: no network, no uv. Specs are parsed from YAML text so that errors
carry real file:line locations. An autouse guard refuses every socket connection, so a
resolve that forgot ``index_for`` (and would build a real PackageIndex) fails loudly.
"""

from __future__ import annotations

import functools
import hashlib
import json
import socket
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from envkit.catalog.files import FILES, data_dir, load_catalog
from envkit.index.closure import REQUESTED, Pin
from envkit.errors import CatalogError, ResolutionError, SpecError
from envkit.index.wheel_facts import bundled_pins
from envkit.resolve.plan import check_gpus, plan
from envkit.resolve.rules import covers
from envkit.resolve.resolver import resolve
from envkit.spec import spec_from_document
from envkit.frameworks import framework as framework_of
from envkit.index.wheel_arches import ArchReading
from envkit.support.yamlsource import parse_yaml
from envkit.frameworks import expected


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("resolve tests must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


SPEC_INDEX = "https://index.example/simple"
VARIANT_INDEX = "https://download.pytorch.org/whl/"  # + tag (the catalog's variant_index)
LINUX_X86 = 'platform_system == "Linux" and platform_machine == "x86_64"'
RUNTIME = {  # the nvidia-cuda-runtime wheel of each CUDA major.minor
    "11.7": "11.7.99", "11.8": "11.8.89", "12.1": "12.1.105", "12.4": "12.4.127", "12.6": "12.6.77",
    "12.8": "12.8.90", "12.9": "12.9.79", "13.0": "13.0.96", "13.2": "13.2.2", "13.4": "13.4.1",
}


# --- fake package indexes ------------------------------------------------------------
def stack(cuda: str, cudnn: str | None, nccl: str | None, *, toolkit: bool = False) -> list[str]:
    """Requires-Dist lines pinning a CUDA runtime, cuDNN and NCCL the way torch wheels do."""
    major = cuda.split(".")[0]
    cu = "cu" + major
    if toolkit:
        out = [f"cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]=={cuda}; {LINUX_X86}"]
    elif int(major) >= 13:
        out = [f"nvidia-cuda-runtime=={cuda}; {LINUX_X86}"]
    else:
        out = [f"nvidia-cuda-runtime-{cu}=={cuda}; {LINUX_X86}"]
    if cudnn:
        out.append(f"nvidia-cudnn-{cu}=={cudnn}; {LINUX_X86}")
    if nccl:
        out.append(f"nvidia-nccl-{cu}=={nccl}; {LINUX_X86}")
    return ["filelock", "typing-extensions>=4.10.0", "sympy>=1.13.3", "networkx", "jinja2", "fsspec", *out]


# Realistic METADATA of some default builds; every other build's is made from the catalog.
TORCH_WHEELS: dict[tuple[str, str], list[str]] = {
    ("2.5.1", "cu124"): stack("12.4.127", "9.1.0.70", "2.21.5"),
    ("2.8.0", "cu128"): stack("12.8.90", "9.10.2.21", "2.27.3"),
    ("2.11.0", "cu130"): stack("13.0.96", "9.17.1.4", "2.28.9"),
    ("2.15.0", "cu132"): stack("13.2.2", "9.26.0.51", "2.30.7", toolkit=True),
    ("2.1.2", "cu121"): stack("12.1.105", "8.9.2.26", None),  # no NCCL pin: the catalog's value is used
}


@dataclass(frozen=True)
class FakeWheel:
    filename: str
    project: str
    version: Version
    tag: str


class FakeIndex:
    """A package index's answers to what resolve asks (plus ``versions``), from the catalog."""

    def __init__(self, catalog, url: str = SPEC_INDEX, *, tag: str | None = None,
                 overrides: dict | None = None, no_wheel=frozenset()):
        self.catalog, self.url, self.tag = catalog, url, tag  # tag None: each release's default build
        self.overrides = overrides or {}
        self.no_wheel = no_wheel  # {(version, python)} without a wheel
        self.calls: list[tuple] = []

    def _tag(self, version: str) -> str | None:
        release = self.catalog.torch_release(version)
        if release is None:
            return None
        tag = self.tag or release.index_default
        return tag if release.variant(tag) and version in release.patches else None

    def versions(self, project: str) -> list[Version]:
        self.calls.append(("versions", project))
        return sorted((Version(p) for r in self.catalog.torch_releases() for p in r.patches if self._tag(p)),
                      reverse=True)

    def releases(self, project: str) -> list[Version]:  # every release has a wheel here
        return sorted((Version(p) for r in self.catalog.torch_releases() for p in r.patches if self._tag(p)),
                      reverse=True)

    def wheel_for(self, project: str, version, python: str, glibc: str):
        self.calls.append(("wheel_for", project, str(version), python, glibc))
        cp = "cp" + python.replace(".", "")
        if project == "tensorflow" and any(str(version) in r.patches for r in self.catalog.tensorflow.releases):
            return FakeWheel(f"tensorflow-{version}-{cp}-{cp}-manylinux_2_17_x86_64.whl", project, version, "and-cuda")
        tag = self._tag(str(version))
        if project != "torch" or tag is None or (str(version), python) in self.no_wheel:
            return None
        local = "" if self.tag is None else f"+{tag}"
        return FakeWheel(f"torch-{version}{local}-{cp}-{cp}-manylinux_2_28_x86_64.whl", project, version, tag)

    def requires(self, wheel: FakeWheel) -> list[Requirement]:
        self.calls.append(("requires", wheel.filename))
        key = (str(wheel.version), wheel.tag)
        lines = self.overrides.get(key) or TORCH_WHEELS.get(key)
        if lines is None:
            v = self.catalog.torch_release(str(wheel.version)).variant(wheel.tag)
            lines = stack(RUNTIME[v.cuda], v.cudnn, v.nccl, toolkit=v.cuda == "13.2")
        return [Requirement(x) for x in lines]


class FakeIndexes:
    """The spec's index and, through ``index_for``, each non-default variant's own index."""

    def __init__(self, catalog, **kw):
        self.catalog, self.kw = catalog, kw
        self.main = FakeIndex(catalog, **kw)
        self.made: dict[str, FakeIndex] = {}

    def index_for(self, url: str) -> FakeIndex:
        assert url.startswith(VARIANT_INDEX), url
        if url not in self.made:
            self.made[url] = FakeIndex(self.catalog, url, tag=url.rstrip("/").rsplit("/", 1)[-1], **self.kw)
        return self.made[url]


class FakeArches:
    """Reads a wheel's compiled arch flags (``resolve``'s ``arch_reader``): the catalog's own list
    unless ``flags`` gives the wheel's ({(version, tag): flags, or an exception to raise})."""

    def __init__(self, catalog, flags: dict | None = None):
        self.catalog, self.flags = catalog, flags or {}
        self.reads: list[tuple[str, str]] = []

    def __call__(self, index, wheel, framework: str) -> ArchReading:
        self.reads.append((framework, wheel.filename))
        key = (str(wheel.version), wheel.tag)
        got = self.flags.get(key)
        if isinstance(got, Exception):
            raise got
        if got is None:
            if framework == "tensorflow":
                release = next(r for r in self.catalog.tensorflow.releases if str(wheel.version) in r.patches)
                got = self.catalog.tensorflow.arches_for(release)
            else:
                got = self.catalog.torch_release(str(wheel.version)).variant(wheel.tag).arches
        member = framework_of(framework).arch.member
        return ArchReading(framework, wheel.filename, f"{index.url}/{wheel.filename}", member, tuple(got))


# --- fake closure compiler -------------------------------------------------------------
def _h(text: str) -> tuple[str, ...]:
    return ("sha256:" + hashlib.sha256(text.encode()).hexdigest(),)


EXTRA_CLOSURE = {  # what each extra requirement pulls in
    "numpy": [("numpy", "2.1.3")],
    "requests": [("requests", "2.32.3"), ("urllib3", "2.2.3"), ("idna", "3.10"), ("certifi", "2024.8.30")],
    "pillow": [("pillow", "11.0.0")],
    "jinja2": [("jinja2", "3.1.4"), ("markupsafe", "3.0.2")],  # already in torch's closure
}
RUNTIME_CHOICES = {  # newest first: what an unconstrained closure picks within a range
    "nvidia-cuda-runtime": ["13.2.51", "13.0.96"],
    "nvidia-cuda-runtime-cu12": ["12.9.79", "12.8.90", "12.6.77", "12.5.82"],
}


class FakeClosure:
    """Same signature as envkit.index.closure.compile_closure; a small deterministic closure."""

    def __init__(self):
        self.calls: list[dict] = []

    def __call__(self, requirements, *, python, glibc, index_url, constraints=None, extra_index_url=None,
                 extra_constraints=None, machine="x86_64"):
        self.calls.append({"requirements": list(requirements), "python": python, "glibc": glibc,
                           "index_url": index_url, "constraints": constraints,
                           "extra_index_url": extra_index_url, "extra_constraints": list(extra_constraints or ())})
        fw = Requirement(requirements[0])
        # a probe asks for a range (">=2.0.0,<=2.5.1,!=2.3.0"): the newest it admits is its upper bound
        pin = next(s for s in fw.specifier if s.operator in ("==", "<="))
        limits = [Requirement(c) for c in extra_constraints or ()]

        def runtime(name: str) -> str:
            return next(v for v in RUNTIME_CHOICES[name]
                        if all(r.specifier.contains(v) for r in limits if r.name == name))

        pins = {fw.name: pin.version}
        if fw.name == "torch":
            pins |= {"filelock": "3.16.1", "jinja2": "3.1.4", "markupsafe": "3.0.2", "sympy": "1.13.3",
                     "networkx": "3.4.2", "fsspec": "2024.10.0", "typing-extensions": "4.12.2"}
        elif fw.name == "jax":
            if "cuda13" in fw.extras:
                pins |= {"jaxlib": pin.version, "jax-cuda13-plugin": pin.version,
                         "nvidia-cuda-runtime": runtime("nvidia-cuda-runtime"),
                         "nvidia-cudnn-cu13": "9.13.0.50", "nvidia-nccl-cu13": "2.27.7"}
            else:
                pins |= {"jaxlib": pin.version, "jax-cuda12-plugin": pin.version,
                         "nvidia-cuda-runtime-cu12": runtime("nvidia-cuda-runtime-cu12"),
                         "nvidia-cudnn-cu12": "9.10.2.21", "nvidia-nccl-cu12": "2.27.5"}
        elif fw.name == "tensorflow":
            pins |= {"nvidia-cuda-runtime-cu12": runtime("nvidia-cuda-runtime-cu12"),
                     "nvidia-cudnn-cu12": "9.3.0.75"}
        via = {n: {fw.name} for n in pins} | {fw.name: {REQUESTED}}
        for req in requirements[1:]:
            (top, _), *deps = EXTRA_CLOSURE[Requirement(req).name.lower()]
            pins[top] = dict(EXTRA_CLOSURE[Requirement(req).name.lower()])[top]
            via.setdefault(top, set()).add(REQUESTED)
            for name, version in deps:
                pins[name] = version
                via.setdefault(name, set()).add(top)
        return sorted((Pin(n, v, _h(f"{n}=={v}"), tuple(sorted(via[n]))) for n, v in pins.items()),
                      key=lambda p: p.name)


# --- specs from YAML text ---------------------------------------------------------------
def load(text: str):
    return spec_from_document(parse_yaml(textwrap.dedent(text).lstrip(), "team.yaml"))


def make_spec(framework: str = "torch", *, gpus=("A100", "H100"), min_driver: str = "580.95.05",
              policy: str = "minor", python: str | None = None, cuda: str | None = None,
              base: str | None = None, pip=(), defaults_pip=()) -> str:
    lines = ["version: 1", "team: vision", "fleet:", f'  min_driver: "{min_driver}"', f"  policy: {policy}"]
    lines += ["  gpus:"] + [f'    - "{g}"' for g in gpus] if gpus else ["  gpus: []"]
    if defaults_pip:
        lines += ["defaults:", "  pip:"] + [f'    - "{p}"' for p in defaults_pip]
    lines += ["images:", "  - name: img", f'    framework: "{framework}"']
    if python:
        lines.append(f'    python: "{python}"')
    if cuda:
        lines.append(f'    cuda: "{cuda}"')
    if base:
        lines.append(f'    base: {{image: "{base}"}}')
    if pip:
        lines.append("    pip: [" + ", ".join(f'"{p}"' for p in pip) + "]")
    return "\n".join(lines) + "\n"


def run(catalog, *, indexes=None, closure=None, spec=None, arches=None, **kw):
    indexes = indexes or FakeIndexes(catalog)
    return resolve(spec or load(make_spec(**kw)), catalog, indexes.main, closure=closure or FakeClosure(),
                   index_for=indexes.index_for, arch_reader=arches or FakeArches(catalog))


def run_image(catalog, **kw):
    return run(catalog, **kw).images[0]


def decision(image, topic):
    return next(d for d in image.decisions if d.topic == topic)


# --- table: what gets chosen (PyTorch) ----------------------------------------------------
CHOSEN = [
    # id, spec overrides, (version, variant, python)
    ("newest-any", {}, ("2.15.0", "cu132", "3.11")),
    ("series-2.5", {"framework": "torch==2.5.*"}, ("2.5.1", "cu124", "3.11")),
    ("exact-2.5.0", {"framework": "torch==2.5.0"}, ("2.5.0", "cu124", "3.11")),
    ("range-2.5-2.9", {"framework": "torch>=2.5,<2.9"}, ("2.8.0", "cu128", "3.11")),
    ("series-2.8", {"framework": "torch==2.8.*"}, ("2.8.0", "cu128", "3.11")),
    ("compatible-2.14.0", {"framework": "torch~=2.14.0"}, ("2.14.1", "cu130", "3.11")),
    ("below-2.6", {"framework": "torch<2.6"}, ("2.5.1", "cu124", "3.11")),
    ("exclusion", {"framework": "torch!=2.15.0"}, ("2.14.1", "cu130", "3.11")),
    ("old-2.0", {"framework": "torch==2.0.*", "gpus": ["A100", "T4"]}, ("2.0.1", "cu117", "3.11")),
    # the CUDA constraint (a non-default variant when the default does not fit)
    ("cuda-below-13", {"cuda": "<13"}, ("2.14.1", "cu126", "3.11")),
    ("cuda-13-up", {"cuda": ">=13.0"}, ("2.15.0", "cu132", "3.11")),
    ("cuda-13.0-13.1", {"cuda": ">=13.0,<13.2"}, ("2.14.1", "cu130", "3.11")),
    ("cuda-12.4-series", {"cuda": "==12.4.*"}, ("2.6.0", "cu124", "3.11")),
    ("cuda-12.8-series", {"cuda": "==12.8.*"}, ("2.11.0", "cu128", "3.11")),
    ("cuda-below-12", {"cuda": "<12", "framework": "torch>=2.5,<2.7"}, ("2.6.0", "cu118", "3.11")),
    # Python from the base
    ("trixie-3.13", {"base": "debian:trixie", "framework": "torch==2.6.*"}, ("2.6.0", "cu124", "3.13")),
    ("debian-13-tag", {"base": "debian:13"}, ("2.15.0", "cu132", "3.13")),
    ("jammy-3.10", {"base": "ubuntu:22.04", "framework": "torch==2.5.*"}, ("2.5.1", "cu124", "3.10")),
    ("noble-3.12", {"base": "ubuntu:24.04", "framework": "torch<2.6"}, ("2.5.1", "cu124", "3.12")),
    ("bookworm-slim-tag", {"base": "debian:bookworm-slim"}, ("2.15.0", "cu132", "3.11")),
    ("explicit-python-matches", {"python": "3.11", "framework": "torch==2.5.*"}, ("2.5.1", "cu124", "3.11")),
    # the fleet's driver under each policy
    ("old-driver-minor-ok", {"framework": "torch==2.5.*", "min_driver": "535.104.05"}, ("2.5.1", "cu124", "3.11")),
    ("old-driver-strict-cu121", {"framework": "torch==2.5.*", "min_driver": "535.104.05", "policy": "strict"},
     ("2.5.1", "cu121", "3.11")),  # cu124 needs 550.54.15; cu121's floor is 530.30.02
    ("old-driver-newest-cuda12", {"min_driver": "535.104.05"}, ("2.14.1", "cu126", "3.11")),
    ("driver-575-2.11-cu128", {"framework": "torch==2.11.*", "min_driver": "575.57.08"}, ("2.11.0", "cu128", "3.11")),
    ("driver-580-minor-cuda13", {"framework": "torch==2.11.*", "min_driver": "580.65.06"}, ("2.11.0", "cu130", "3.11")),
    ("strict-numeric-compare", {"framework": "torch<2.11", "policy": "strict", "min_driver": "570.124.06"},
     ("2.10.0", "cu128", "3.11")),  # needs 570.124.06, which is > "570.26" as numbers but < as strings
    ("strict-falls-back-to-cu126", {"framework": "torch<2.11", "policy": "strict", "min_driver": "570.26"},
     ("2.10.0", "cu126", "3.11")),
    ("strict-2.5-enough", {"framework": "torch==2.5.*", "policy": "strict", "min_driver": "550.54.15"},
     ("2.5.1", "cu124", "3.11")),
    # GPUs
    ("b200-needs-cu128", {"gpus": ["B200"], "framework": "torch>=2.5,<2.9"}, ("2.8.0", "cu128", "3.11")),
    ("rtx5090-needs-cu128", {"gpus": ["RTX 5090"], "framework": "torch>=2.5,<2.9"}, ("2.8.0", "cu128", "3.11")),
    ("v100-takes-a-cuda12-variant", {"gpus": ["V100"]}, ("2.14.1", "cu126", "3.11")),
    ("v100-2.10-default", {"gpus": ["V100"], "framework": "torch==2.10.*"}, ("2.10.0", "cu128", "3.11")),
    ("p100-cu126", {"gpus": ["P100"]}, ("2.14.1", "cu126", "3.11")),
    ("k80-needs-cu118", {"gpus": ["K80"]}, ("2.7.1", "cu118", "3.11")),
    ("cc-string", {"gpus": ["8.6"]}, ("2.15.0", "cu132", "3.11")),
    ("model-names-normalised", {"gpus": ["NVIDIA GeForce RTX 4090", "rtx a6000", "h100"]}, ("2.15.0", "cu132", "3.11")),
    ("b300-by-sm100-sass", {"gpus": ["B300"], "framework": "torch==2.8.*"}, ("2.8.0", "cu128", "3.11")),
    ("gb10-by-sm120-sass", {"gpus": ["GB10"], "framework": "torch==2.8.*"}, ("2.8.0", "cu128", "3.11")),
    ("no-gpus", {"gpus": []}, ("2.15.0", "cu132", "3.11")),
]


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CHOSEN], ids=[c[0] for c in CHOSEN])
def test_chosen_torch_build(catalog, overrides, expected):
    image = run_image(catalog, **overrides)
    assert (image.framework_version, image.variant, image.python) == expected
    assert image.framework == "torch"
    assert decision(image, "torch").choice == f"torch {expected[0]} ({expected[1]})"
    release = catalog.torch_release(expected[0])
    variant = release.variant(expected[1])
    assert image.arch_list == variant.arches and image.cuda_major_minor == variant.cuda
    default = expected[1] == release.index_default
    assert image.index_url == (SPEC_INDEX if default else VARIANT_INDEX + expected[1])


# --- table: why nothing fits ----------------------------------------------------------
FAILS = [
    # id, spec overrides, error class, [substrings of message + hint]
    ("python-not-on-base", {"python": "3.13"}, ResolutionError,
     ["asks for Python 3.13", "ships 3.11", "use a base that ships it: base: {bootstrap: {suite: trixie}}"]),
    ("python-on-no-base", {"python": "3.9"}, ResolutionError, ["asks for Python 3.9", 'use python: "3.11"']),
    ("release-python-range", {"base": "debian:trixie", "framework": "torch==2.5.*"}, ResolutionError,
     # one line per reason, naming the builds it rejects; and the nearest Python a base ships
     ["torch 2.5.1 (cu124), torch 2.5.1 (cu121), torch 2.5.1 (cu118) and 3 more: supports Python 3.9-3.12, not 3.13",
      "use torch==2.15.0 (its cu132 build fits)", 'use python: "3.12" with a base that ships it']),
    ("strict-driver-too-old", {"framework": "torch==2.5.*", "cuda": "==12.4", "policy": "strict",
                               "min_driver": "535.104.05"}, ResolutionError,
     ["torch 2.5.1 (cu124), torch 2.5.0 (cu124): needs driver >= 550.54.15 for CUDA 12.4 (policy strict); the fleet's "
      "oldest is 535.104.05",
      "raise fleet.min_driver to >= 550.54.15", "use policy: minor"]),
    ("cuda13-needs-580", {"framework": "torch==2.11.*", "cuda": ">=13", "min_driver": "575.57.08"}, ResolutionError,
     ["needs driver >= 580 for CUDA 13.0 (policy minor)", "raise fleet.min_driver to >= 580"]),
    ("b200-not-in-2.5", {"gpus": ["A100", "B200"], "framework": "torch==2.5.*"}, ResolutionError,
     ["torch 2.5.1 (cu124), torch 2.5.1 (cu121), torch 2.5.0 (cu124) and 1 more: has no kernels for Blackwell (cc 10.0); "
      "arch list sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
      "drop B200 (cc 10.0) from fleet.gpus", "use torch==2.15.0 (its cu132 build fits)"]),
    ("rtx5090-not-in-2.5", {"gpus": ["RTX 5090"], "framework": "torch==2.5.*"}, ResolutionError,
     ["torch 2.5.0 (cu124) and 1 more: has no kernels for Blackwell (cc 12.0)"]),
    ("v100-not-in-cuda13", {"gpus": ["V100"], "framework": "torch>=2.11", "cuda": ">=13"}, ResolutionError,
     ["torch 2.15.0 (cu132), torch 2.14.1 (cu130), torch 2.14.0 (cu130) and 4 more: has no kernels for Volta (cc 7.0)",
      "relax the cuda constraint >=13"]),
    # neither a newer driver nor a shorter GPU list alone: both, or the other CUDA extra
    ("jax-cuda13-on-v100-and-535", {"gpus": ["V100"], "framework": "jax[cuda13]>=0.10", "min_driver": "535.104.05"},
     ResolutionError, ["use jax[cuda12]>=0.10 (jax 0.10.2 (cuda12) fits)", "drop V100 (cc 7.0) from fleet.gpus (serve it "
                       "with another image) and raise fleet.min_driver to >= 580"]),
    # the driver a way out names is one the rules accept: here PTX JIT's floor, above the policy's
    ("tf-ptx-needs-the-jit-floor", {"gpus": ["H100", "K80"], "framework": "tensorflow[and-cuda]==2.16.*",
                                    "min_driver": "520.61.05"}, ResolutionError,
     ["drop K80 (cc 3.7) from fleet.gpus (serve it with another image) and raise fleet.min_driver to >= 545.23.08"]),
    ("thor-nowhere", {"gpus": ["Jetson T5000"], "framework": "torch>=2.14"}, ResolutionError,
     ["has no kernels for Blackwell (Thor) (cc 11.0)"]),
    ("cuda-constraint", {"cuda": "<11", "framework": "torch>=2.5"}, ResolutionError,
     ["is a CUDA 13.2 build, outside cuda <11", "relax the cuda constraint <11"]),
    ("not-in-catalog", {"framework": "torch==2.16.*"}, ResolutionError,
     ["no torch build satisfies image 'img' (torch==2.16.*)", "no build matches the requirement",
      "use torch==2.15.0 (its cu132 build fits)"]),
    ("nothing-matches", {"framework": "torch==3.0"}, ResolutionError, ["no build matches the requirement"]),
    ("local-version-is-not-a-variant", {"framework": "torch==2.5.1+cu121"}, ResolutionError,
     ["no build matches the requirement"]),
    ("unsupported-framework", {"framework": "mxnet==1.9.*"}, SpecError,
     ["unsupported framework 'mxnet' in images[0].framework", "supported: torch, jax, tensorflow"]),
    ("unknown-extra-torch", {"framework": "torch[cuda]"}, SpecError,
     ["unknown extra 'cuda' for torch in images[0].framework", "allowed extras: none"]),
    ("unknown-extra-jax", {"framework": "jax[cuda11]==0.4.*"}, SpecError,
     ["unknown extra 'cuda11' for jax", "allowed extras: cuda12, cuda13"]),
    ("unknown-gpu", {"gpus": ["A100", "H1000"]}, SpecError,
     ["unknown GPU 'H1000' in fleet.gpus", "did you mean 'H100'", "A100, ", " H100, ", " L40S", "'9.0'"]),
    ("unknown-cc", {"gpus": ["8.8"]}, SpecError, ["unknown GPU '8.8'"]),
    ("unknown-base-suite", {"base": "debian:sid"}, ResolutionError,
     ["cannot tell which OS release base image 'debian:sid' is", "bookworm, trixie, jammy, noble"]),
]


@pytest.mark.parametrize("overrides,error,needles", [c[1:] for c in FAILS], ids=[c[0] for c in FAILS])
def test_resolution_fails_with_reason(catalog, overrides, error, needles):
    with pytest.raises(error) as exc:
        run(catalog, **overrides)
    text = f"{exc.value.message}\n{exc.value.hint}"
    for needle in needles:
        assert needle in text


def test_plan_is_pure_and_agrees_with_resolve(catalog):
    spec = load(make_spec(framework="torch>=2.5,<2.9", gpus=["B200"]))
    (p,) = plan(spec, catalog)
    assert p.chosen.label == "torch 2.8.0 (cu128)" and p.python == "3.11" and p.driver_floor == "525.60.13"
    assert run_image(catalog, spec=spec).framework_version == p.chosen.version


def test_resolution_error_points_at_the_image(catalog):
    with pytest.raises(ResolutionError) as exc:
        run(catalog, framework="torch==3.0")
    loc = exc.value.location
    assert (loc.path, loc.line, loc.column) == ("team.yaml", 10, 5)  # the '- name: img' item



def test_a_closure_that_cannot_be_solved_names_the_image_and_its_pip_line(catalog):
    """uv's refusal comes from the image's extra packages: the error says which image, at its pip: line."""
    def refusing(requirements, **kw):
        if len(requirements) > 1:
            raise ResolutionError("the Python closure could not be solved: sympy==1.12 conflicts",
                                  hint="requirements were: ...")
        return FakeClosure()(requirements, **kw)

    with pytest.raises(ResolutionError) as exc:
        run(catalog, closure=refusing, pip=["numpy"])
    assert exc.value.message.startswith("image 'img': the Python closure could not be solved")
    loc = exc.value.location
    assert (loc.line, loc.column) == (12, 5), loc  # the image's pip: key
    # a refusal that names one of the pip: packages points at that item, not at the pip: line
    with pytest.raises(ResolutionError) as exc:
        run(catalog, closure=refusing, pip=["numpy", "sympy==1.12"])
    loc = exc.value.location
    assert loc.line == 12 and loc.column == len('    pip: ["numpy", ') + 1, loc  # at "sympy==1.12"


@pytest.mark.parametrize("where", ["image", "defaults"])
def test_the_framework_in_pip_is_refused_at_its_line(catalog, where):
    """A second pin of the framework would only fail in the closure (exit 4), after the network; name it first."""
    kw = {"pip": ["numpy", "Torch==2.4.0"]} if where == "image" else {"defaults_pip": ["torch"]}
    with pytest.raises(SpecError) as exc:
        run(catalog, framework="torch==2.5.*", **kw)
    shown = "images[0].pip[1]: 'Torch==2.4.0'" if where == "image" else "defaults.pip[0]: 'torch'"
    assert exc.value.message.startswith(shown) and "names the framework" in exc.value.message
    assert exc.value.location.line == (12 if where == "image" else 11)
    assert "framework: 'torch==2.4.0'" in exc.value.hint if where == "image" else "framework: 'torch'" in exc.value.hint

# --- JAX and TensorFlow (other candidate shapes: min_cc, range pins, PTX) ----------------
OTHER = [
    ("jax-newest-for-3.11", {"framework": "jax"}, ("jax", "0.10.2", "cuda13")),  # 0.11+ needs Python 3.12
    ("jax-trixie", {"framework": "jax", "base": "debian:trixie"}, ("jax", "0.12.0.1", "cuda13")),
    ("jax-v100-min-cc", {"framework": "jax", "gpus": ["V100"]}, ("jax", "0.10.2", "cuda12")),
    ("jax-old-driver", {"framework": "jax", "min_driver": "550.54.15"}, ("jax", "0.10.2", "cuda12")),
    ("jax-extra-cuda12", {"framework": "jax[cuda12]==0.7.*"}, ("jax", "0.7.2", "cuda12")),
    ("tf-a100", {"framework": "tensorflow", "gpus": ["A100"]}, ("tensorflow", "2.21.0", "and-cuda")),
    ("tf-h100-ptx", {"framework": "tensorflow", "gpus": ["H100"]}, ("tensorflow", "2.21.0", "and-cuda")),
    # H100 runs TensorFlow only through its compute_80 PTX: JIT needs the toolkit's own driver floor
    ("tf-h100-ptx-older-cuda", {"framework": "tensorflow", "gpus": ["H100"], "min_driver": "550.54.15"},
     ("tensorflow", "2.17.1", "and-cuda")),  # CUDA 12.5 builds need 555.42.06; 12.3 needs 545.23.08
    ("tf-h100-ptx-cuda-12.2", {"framework": "tensorflow", "gpus": ["H100"], "min_driver": "535.104.05"},
     ("tensorflow", "2.15.1", "and-cuda")),
]


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in OTHER], ids=[c[0] for c in OTHER])
def test_chosen_other_frameworks(catalog, overrides, expected):
    image = run_image(catalog, **overrides)
    assert (image.framework, image.framework_version, image.variant) == expected
    assert image.index_url == SPEC_INDEX


def test_jax_v100_rejection_names_min_cc(catalog):
    with pytest.raises(ResolutionError) as exc:
        run(catalog, framework="jax[cuda13]", gpus=["V100"], base="debian:trixie")
    assert "needs compute capability >= 7.5; Volta (V100, TITAN V) is 7.0" in exc.value.hint


def test_tf_ptx_needs_a_driver_that_can_jit(catalog):
    with pytest.raises(ResolutionError) as exc:
        run(catalog, framework="tensorflow==2.21.*", gpus=["H100"], min_driver="550.54.15")
    assert "only PTX covers Hopper (cc 9.0) and JIT needs driver >= 555.42.06" in exc.value.hint


def test_tf_release_with_its_own_arches_is_judged_by_them(catalog):
    """2.20's build reports sm_60 sm_70 sm_80 sm_89 compute_90 (catalog: envkit_image_reading), not the file's
    default list: a Maxwell fleet is refused 2.20, and an L40S (8.9) is covered by its own cubin."""
    with pytest.raises(ResolutionError) as exc:
        run(catalog, framework="tensorflow==2.20.*", gpus=["M60"])
    assert "sm_60 sm_70 sm_80 sm_89 compute_90" in str(exc.value) + exc.value.hint
    image = run_image(catalog, framework="tensorflow==2.20.*", gpus=["L40S"])
    assert image.arch_list == ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")
    # 2.16 still has Maxwell cubins (its wheel's build_info: sm_50 sm_60 sm_70 sm_80 compute_90)
    assert run_image(catalog, framework="tensorflow<2.17", gpus=["M60"]).framework_version == "2.16.2"


@pytest.mark.parametrize("policy,constraints,cuda", [  # (and binaries.yaml's: onnxruntime-gpu of CUDA 13, if any)
    ("minor", ["onnxruntime-gpu>=1.27"], "13.2.51"),  # any CUDA 13 runtime runs on 580 under minor-version compat.
    ("strict", ["nvidia-cuda-runtime<13.1", "onnxruntime-gpu>=1.27"], "13.0.96"),  # capped at what 580.95.05 runs
])
def test_range_pinned_framework_takes_cuda_from_the_closure(catalog, policy, constraints, cuda):
    closure = FakeClosure()
    image = run_image(catalog, closure=closure, framework="jax", gpus=["A100"], policy=policy)
    assert closure.calls[0]["requirements"] == ["jax[cuda13]==0.10.2"]
    assert closure.calls[0]["extra_constraints"] == constraints
    assert image.cuda == cuda and image.cuda_major_minor == cuda.rsplit(".", 1)[0]
    assert (image.cudnn, image.nccl) == ("9.13.0.50", "2.27.7")
    assert image.min_cc == "7.5" and image.arch_list == ()
    assert decision(image, "bundled").reason == "what the closure pinned within jax 0.10.2 (cuda13)'s ranges"


# --- spec errors carry their line ----------------------------------------------------------
def test_unknown_gpu_location_is_its_line(catalog):
    spec = load("""
        version: 1
        team: vision
        fleet:
          min_driver: "550.54.15"
          gpus:
            - A100
            - H1000
        images:
          - name: torch25
            framework: "torch==2.5.*"
    """)
    with pytest.raises(SpecError) as exc:
        run(catalog, spec=spec)
    loc = exc.value.location
    assert (loc.path, loc.line, loc.column) == ("team.yaml", 7, 7)
    assert "compute capability" in exc.value.hint and "A100" in exc.value.hint


def test_unsupported_framework_location_is_its_line(catalog):
    spec = load("""
        version: 1
        team: vision
        fleet: {min_driver: "550.54.15", gpus: [A100]}
        images:
          - name: ok
            framework: "torch==2.5.*"
          - name: bad
            framework: "mxnet==1.9.*"
    """)
    with pytest.raises(SpecError) as exc:
        run(catalog, spec=spec)
    assert exc.value.location.line == 8
    assert "images[1].framework" in exc.value.message


def test_check_gpus_accepts_models_and_capabilities(catalog):
    spec = load(make_spec(gpus=["8.6", "A10G", "L40S", "9.0", "GB200"]))
    assert [(a.cc, a.family) for a in check_gpus(spec, catalog)] == [
        ("8.6", "Ampere"), ("8.6", "Ampere"), ("8.9", "Ada Lovelace"), ("9.0", "Hopper"), ("10.0", "Blackwell")]


# --- the lock's fields ------------------------------------------------------------------
def test_lock_fields_minor(catalog):
    image = run_image(catalog, framework="torch==2.5.*", min_driver="550.54.15")
    assert image.framework_version == "2.5.1" and image.variant == "cu124"
    assert image.cuda == "12.4.127" and image.cuda_major_minor == "12.4"
    assert image.cudnn == "9.1.0.70" and image.nccl == "2.21.5"
    assert image.arch_list == ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
    assert image.driver_floor == "525.60.13"
    assert image.require_cuda == "cuda>=12.0"
    assert image.policy == "minor"
    assert image.platform == "x86_64-manylinux_2_36"
    assert image.python == "3.11"
    assert image.index_url == SPEC_INDEX
    assert image.base.ref.startswith("envkit-base/debian:bookworm-minbase-")
    assert (image.base.distro, image.base.suite, image.base.digest) == ("debian", "bookworm", None)
    assert image.base.bootstrap == {"suite": "bookworm", "mirror": "http://deb.debian.org/debian", "variant": "minbase"}
    assert image.hash == image.content_hash() and image.hash.startswith("sha256:")


def test_lock_fields_strict(catalog):
    image = run_image(catalog, framework="torch==2.5.*", min_driver="550.54.15", policy="strict")
    assert image.variant == "cu124"
    assert image.driver_floor == "550.54.15"
    assert image.require_cuda == "cuda>=12.4"
    assert image.policy == "strict"


def test_lock_fields_cuda13_toolkit_pin(catalog):
    image = run_image(catalog)
    assert (image.framework_version, image.variant) == ("2.15.0", "cu132")
    assert image.cuda == "13.2.2" and image.cuda_major_minor == "13.2"  # from cuda-toolkit[...]==13.2.2
    assert image.cudnn == "9.26.0.51" and image.nccl == "2.30.7"
    assert image.driver_floor == "580" and image.require_cuda == "cuda>=13.0"
    assert image.arch_list == ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")


def test_lock_fields_trixie_platform(catalog):
    image = run_image(catalog, base="debian:trixie@sha256:" + "a" * 64)
    assert image.platform == "x86_64-manylinux_2_41" and image.python == "3.13"
    assert image.base.ref == "debian:trixie@sha256:" + "a" * 64
    assert image.base.digest == "sha256:" + "a" * 64 and image.base.bootstrap is None


def test_ptx_arch_list(catalog):
    image = run_image(catalog, framework="torch==2.12.*", cuda=">=13.2")  # 2.12 cu132: release notes' +PTX, unconfirmed
    assert image.arch_list[-2:] == ("sm_120", "compute_120")


def test_unpinned_nccl_falls_back_to_the_catalog(catalog):
    image = run_image(catalog, framework="torch==2.1.2")
    assert image.cuda == "12.1.105" and image.cudnn == "8.9.2.26"
    assert image.nccl == "2.18.1"  # the catalog's row for 2.1 cu121


def test_non_default_variant_comes_from_its_own_index(catalog):
    indexes = FakeIndexes(catalog)
    closure = FakeClosure()
    image = run_image(catalog, indexes=indexes, closure=closure, cuda="<13")
    assert (image.framework_version, image.variant) == ("2.14.1", "cu126")
    url = VARIANT_INDEX + "cu126"
    assert image.index_url == url and list(indexes.made) == [url]
    assert ("wheel_for", "torch", "2.14.1", "3.11", "2.36") in indexes.made[url].calls
    assert not any(c[0] == "wheel_for" for c in indexes.main.calls)  # the spec's index lacks +cu126 builds
    assert image.cuda == "12.6.77" and image.cudnn == "9.10.2.21" and image.nccl == "2.29.3"
    call = closure.calls[0]
    assert call["requirements"] == ["torch==2.14.1+cu126"]
    assert (call["index_url"], call["extra_index_url"]) == (url, SPEC_INDEX)  # own index first
    assert (image.index_url, image.extra_index_url) == (url, SPEC_INDEX)  # and so the build's pip (render.py)
    assert next(p for p in image.packages if p.name == "torch").version == "2.14.1+cu126"
    assert "not the index's default build, so it comes from " + url in decision(image, "torch").reason


def test_wheel_cuda_must_agree_with_the_catalog(catalog):
    indexes = FakeIndexes(catalog, overrides={("2.8.0", "cu128"): stack("12.6.77", "9.10.2.21", "2.27.3")})
    with pytest.raises(ResolutionError) as exc:
        run(catalog, indexes=indexes, framework="torch==2.8.*")
    assert "pins CUDA 12.6.77" in exc.value.message and "torch 2.8.0 (cu128) is CUDA 12.8" in exc.value.message
    assert "envkit catalog refresh" in exc.value.hint


def test_missing_wheel_for_the_python(catalog):
    indexes = FakeIndexes(catalog, no_wheel={("2.5.1", "3.11")})
    with pytest.raises(ResolutionError, match="torch 2.5.1 \\(cu124\\) has no wheel for CPython 3.11 on glibc 2.36"):
        run(catalog, indexes=indexes, framework="torch==2.5.*")


def test_index_is_asked_with_the_base_python_and_glibc(catalog):
    indexes = FakeIndexes(catalog)
    run(catalog, indexes=indexes, base="ubuntu:24.04", framework="torch==2.5.*")
    assert ("wheel_for", "torch", "2.5.1", "3.12", "2.39") in indexes.main.calls


def test_fake_index_lists_versions_newest_first(catalog):
    versions = FakeIndex(catalog).versions("torch")
    assert versions[0] == Version("2.15.0") and versions == sorted(versions, reverse=True)


# --- decisions ---------------------------------------------------------------------------
def test_decisions_record_choices_and_rejections(catalog):
    image = run_image(catalog, min_driver="550.54.15")
    assert [d.topic for d in image.decisions] == ["base", "python", "torch", "driver_floor", "gpus", "bundled", "arch_list"]
    torch = decision(image, "torch")
    assert torch.choice == "torch 2.14.1 (cu126)"
    assert torch.rejected == (
        "torch 2.15.0 (cu132): needs driver >= 580 for CUDA 13.2 (policy minor); the fleet's oldest is 550.54.15",
        "torch 2.14.1 (cu130): needs driver >= 580 for CUDA 13.0 (policy minor); the fleet's oldest is 550.54.15",
        "torch 2.14.1 (cu132): needs driver >= 580 for CUDA 13.2 (policy minor); the fleet's oldest is 550.54.15",
    )
    assert decision(image, "python").reason == "the interpreter of debian bookworm"
    assert decision(image, "driver_floor").choice == "525.60.13"
    assert decision(image, "gpus").choice == "8.0 9.0"
    assert decision(image, "bundled").choice == "CUDA 12.6.77, cuDNN 9.10.2.21, NCCL 2.29.3"


def test_decisions_for_gpu_rejections(catalog):
    image = run_image(catalog, gpus=["K80"])
    rejected = decision(image, "torch").rejected
    assert rejected[0] == ("torch 2.15.0 (cu132): has no kernels for Kepler (cc 3.7); "
                           "arch list sm_75 sm_80 sm_86 sm_90 sm_100 sm_120")
    assert len(rejected) == len({r.split(":")[0] for r in rejected})  # one entry per build


def test_base_image_decision_asks_for_a_digest(catalog):
    image = run_image(catalog, base="debian:bookworm")
    assert "pin it by digest" in decision(image, "base").reason


# --- packages, hashes, determinism ------------------------------------------------------
def test_packages_grouped_framework_then_extra(catalog):
    closure = FakeClosure()
    image = run_image(catalog, closure=closure, framework="torch==2.5.*", pip=["numpy==2.1.*", "jinja2"],
                      defaults_pip=["requests>=2.31"])
    groups: dict[str, list[str]] = {}
    for p in image.packages:
        groups.setdefault(p.group, []).append(p.name)
    assert groups["framework"] == ["filelock", "fsspec", "jinja2", "markupsafe", "networkx", "sympy",
                                   "torch", "typing-extensions"]
    assert groups["extra"] == ["certifi", "idna", "numpy", "requests", "urllib3"]  # jinja2 is not repeated
    assert [p.group for p in image.packages] == sorted(p.group for p in image.packages)
    torch = next(p for p in image.packages if p.name == "torch")
    assert torch.version == "2.5.1" and torch.hashes == _h("torch==2.5.1")
    # one joint solve of the framework (any release the plan allows) and the extras; the framework's group is
    # what torch requires in it (uv's annotations), the rest the extras'
    (call,) = closure.calls
    assert call["requirements"] == ["torch>=2.5.0,<=2.5.1", "requests>=2.31", "numpy==2.1.*", "jinja2"]
    assert call["constraints"] is None
    assert (call["python"], call["glibc"], call["index_url"], call["extra_index_url"]) == ("3.11", "2.36", SPEC_INDEX, None)
    assert image.requested == ("requests", "numpy", "jinja2")


def test_no_pip_means_one_closure_call(catalog):
    closure = FakeClosure()
    image = run_image(catalog, closure=closure)
    assert len(closure.calls) == 1
    assert {p.group for p in image.packages} == {"framework"}


def test_resolving_twice_gives_identical_bytes(catalog):
    text = make_spec(framework="torch>=2.5", pip=["numpy==2.1.*"], gpus=["A100", "L40S"], cuda="<13")
    a = run(catalog, spec=load(text))
    b = run(catalog, spec=load(text))
    assert a.to_bytes() == b.to_bytes()
    assert a.spec_digest == b.spec_digest and a.catalog_digest == catalog.digest


def test_image_hash_changes_with_an_extra_package(catalog):
    plain = run_image(catalog, framework="torch==2.5.*")
    extra = run_image(catalog, framework="torch==2.5.*", pip=["pillow"])
    again = run_image(catalog, framework="torch==2.5.*")
    assert plain.hash == again.hash
    assert plain.hash != extra.hash
    assert [p.name for p in extra.packages if p.group == "extra"] == ["pillow"]


def test_image_hash_ignores_the_explanations(catalog):
    a = run_image(catalog, framework="torch==2.5.*", min_driver="550.54.15")
    b = run_image(catalog, framework="torch==2.5.*", min_driver="560.35.05")  # same stack, same floor
    assert a.hash == b.hash


def test_only_selects_images(catalog):
    spec = load("""
        version: 1
        team: vision
        fleet: {min_driver: "580.95.05", gpus: [H100]}
        images:
          - name: old
            framework: "torch==2.5.*"
          - name: new
            framework: "torch"
            base: {image: "debian:trixie"}
    """)
    lock = run(catalog, spec=spec)
    assert [(i.name, i.framework_version, i.python) for i in lock.images] == [
        ("old", "2.5.1", "3.11"), ("new", "2.15.0", "3.13")]
    indexes = FakeIndexes(catalog)
    only = resolve(spec, catalog, indexes.main, closure=FakeClosure(), index_for=indexes.index_for, only=["new"],
                   arch_reader=FakeArches(catalog))
    assert [i.name for i in only.images] == ["new"]
    assert only.images[0].hash == lock.images[1].hash


# --- bases -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ref,suite,python",
    [
        ("debian:bookworm", "bookworm", "3.11"),
        ("debian:12", "bookworm", "3.11"),
        ("debian:trixie-slim", "trixie", "3.13"),
        ("registry.local:5000/library/debian:trixie", "trixie", "3.13"),
        ("ubuntu:noble", "noble", "3.12"),
        ("ubuntu:22.04", "jammy", "3.10"),
        pytest.param("debian:12-slim", "bookworm", "3.11"),
    ],
)
def test_base_image_suite(catalog, ref, suite, python):
    image = run_image(catalog, base=ref, framework="torch==2.6.*")
    assert (image.base.suite, image.python) == (suite, python)


def test_bootstrap_of_a_non_debian_suite_is_refused(catalog):
    spec = load("""
        version: 1
        team: vision
        fleet: {min_driver: "580.95.05"}
        images:
          - name: img
            framework: "torch"
            base: {bootstrap: {suite: jammy}}
    """)
    with pytest.raises(ResolutionError) as exc:
        run(catalog, spec=spec)
    assert "cannot bootstrap suite 'jammy'" in exc.value.message
    assert exc.value.hint == "known Debian suites: bookworm, trixie"


def test_bootstrap_trixie(catalog):
    spec = load("""
        version: 1
        team: vision
        fleet: {min_driver: "580.95.05"}
        defaults:
          base: {bootstrap: {suite: trixie}}
        images:
          - name: img
            framework: "torch"
    """)
    image = run_image(catalog, spec=spec)
    assert image.base.ref.startswith("envkit-base/debian:trixie-minbase-")
    assert image.python == "3.13" and image.platform == "x86_64-manylinux_2_41"


# --- covers ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "arches,cc,ptx_ok,expected",
    [
        (("sm_80",), "8.0", True, True),
        (("sm_80",), "8.6", True, True),  # SASS runs on a newer minor of the same major
        (("sm_86",), "8.0", True, False),  # ... not on an older one
        (("sm_80",), "9.0", True, False),  # ... nor on another major
        (("sm_80", "compute_80"), "9.0", True, True),  # PTX JITs forward
        (("sm_80", "compute_80"), "9.0", False, False),  # ... when the driver can
        (("sm_75", "compute_75"), "7.0", True, False),  # PTX never runs backwards
        (("sm_120", "compute_120"), "10.0", True, False),  # compute_120 does not help a 10.0 GPU
        (("sm_90",), "10.0", True, False),
        (("sm_100",), "10.3", True, True),
        (("sm_100",), "12.0", True, False),
        (("sm_120",), "12.1", True, True),
        (("compute_90",), "12.0", True, True),
        (("compute_90",), "12.0", False, False),
        (("sm_90a",), "9.0", True, True),
        (("sm_100a",), "10.0", True, True),
        (("sm_100a",), "10.3", True, False),  # arch-specific SASS runs on exactly its cc
        (("sm_100f",), "10.3", True, True),  # family-specific SASS runs across the family
        (("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"), "8.9", False, True),  # via sm_86
        (("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"), "10.0", True, False),
        ((), "9.0", True, False),
        pytest.param(("compute_90a",), "10.0", True, False),
    ],
)
def test_covers(arches, cc, ptx_ok, expected):
    assert covers(arches, cc, ptx_ok=ptx_ok) is expected


def test_covers_with_real_variants(catalog):
    cu130 = catalog.torch_release("2.11.0").variant("cu130")
    assert not covers(cu130.arches, "7.0")  # Volta dropped from CUDA-13 builds
    assert covers(cu130.arches, "7.5")
    cu128 = catalog.torch_release("2.8.0").variant("cu128")
    assert covers(cu128.arches, "10.0") and covers(cu128.arches, "12.0") and covers(cu128.arches, "7.0")
    cu124 = catalog.torch_release("2.5.1").variant("cu124")
    assert not covers(cu124.arches, "10.0") and not covers(cu124.arches, "12.0")


# --- bundled_pins -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "lines,python,expected",
    [
        (TORCH_WHEELS[("2.5.1", "cu124")], "3.11", {"cuda": "12.4.127", "cudnn": "9.1.0.70", "nccl": "2.21.5"}),
        (TORCH_WHEELS[("2.15.0", "cu132")], "3.11", {"cuda": "13.2.2", "cudnn": "9.26.0.51", "nccl": "2.30.7"}),
        (TORCH_WHEELS[("2.11.0", "cu130")], "3.13", {"cuda": "13.0.96", "cudnn": "9.17.1.4", "nccl": "2.28.9"}),
        (['nvidia-cuda-runtime-cu12==12.8.93; platform_system == "Linux" and platform_machine == "aarch64"',
          f"nvidia-cuda-runtime-cu12==12.8.90; {LINUX_X86}",
          'nvidia-nccl-cu12==2.99.0; platform_machine == "aarch64"'],
         "3.11", {"cuda": "12.8.90"}),  # aarch64 pins ignored even when listed first
        (['nvidia-cudnn-cu12==9.1.0.70; platform_system == "Windows"'], "3.11", {}),
        (['nvidia-nccl-cu12==2.21.5; python_version < "3.13"'], "3.13", {}),
        (['nvidia-nccl-cu12==2.21.5; python_version < "3.13"'], "3.12", {"nccl": "2.21.5"}),
        (['nvidia-nccl-cu12==2.21.5; extra == "distributed"'], "3.11", {}),
        (["nvidia-cudnn-cu12>=9.1", "nvidia-nccl-cu12~=2.21"], "3.11", {}),  # not exact pins
        (["nvidia-cuda-nvrtc-cu12==12.4.127", "nvidia-cublas-cu12==12.4.5.8",
          "nvidia-cuda-cupti-cu12==12.4.127"], "3.11", {}),  # other CUDA libraries
        (['cuda-toolkit[cudart,nvrtc]==13.0.2; platform_system == "Linux"'], "3.11", {"cuda": "13.0.2"}),
        (["nvidia-cuda-runtime==13.0.96"], "3.11", {"cuda": "13.0.96"}),
        (["NVIDIA-CUDNN-CU13==9.13.0.50"], "3.11", {"cudnn": "9.13.0.50"}),
        (["nvidia-cuda-runtime-cu12==12.4.127", "cuda-toolkit==13.0.2"], "3.11", {"cuda": "12.4.127"}),
        pytest.param(["nvidia_nccl_cu12==2.21.5", "nvidia.cudnn.cu12==9.1.0.70"], "3.11",
                     {"nccl": "2.21.5", "cudnn": "9.1.0.70"}),
    ],
)
def test_bundled_pins(lines, python, expected):
    assert bundled_pins([Requirement(x) for x in lines], python) == expected


# --- a small fake catalog ----------------------------------------------------------------
SRC = ["s1"]


def _variant(tag, cuda, arch_list):
    return {"tag": tag, "cuda": cuda, "status": "stable", "cudnn": "9.1.0.70", "nccl": "2.21.5", "arch_list": arch_list}


def _release(version, variants, *, index_default=None, python=("3.9", "3.12"), sources=("s1",)):
    return {"version": version, "patches": [version + ".0"], "python": {"min": python[0], "max": python[1]},
            "index_default": index_default or variants[0]["tag"], "verified": True, "sources": list(sources),
            "variants": variants}


def _fake_files(releases=None):
    return {
        "sources": {"sources": {"s1": "a test source"}},
        "cuda": {
            "minor_version_compat": [{"major": 12, "linux_min": "525.60.13", "verified": True, "sources": SRC},
                                     {"major": 13, "linux_min": "580", "verified": True, "sources": SRC}],
            "toolkits": [{"version": "12.4.1", "linux_min": "550.54.15", "verified": True, "sources": SRC},
                         {"version": "12.6.3", "linux_min": "560.35.05", "verified": True, "sources": SRC},
                         {"version": "13.4.1", "linux_min": None, "verified": False, "sources": SRC}],
        },
        "gpus": {"architectures": [
            {"cc": "8.0", "family": "Ampere", "models": ["A100"], "first_cuda": "11.0", "last_cuda_major": None,
             "verified": True, "sources": SRC},
            {"cc": "9.0", "family": "Hopper", "models": ["H100"], "first_cuda": "11.8", "last_cuda_major": None,
             "verified": True, "sources": SRC}]},
        "os": {"bases": [{"distro": "debian", "suite": "bookworm", "python": "3.11", "glibc": "2.36",
                          "verified": True, "sources": SRC}]},
        "pytorch": {"releases": releases if releases is not None else
                    [_release("2.5", [_variant("cu124", "12.4", "8.0+PTX")])]},
    }


def write_catalog(directory: Path, releases=None) -> Path:
    """The minimal files above (same schema as envkit/catalog/data). Any other catalog file or
    top-level key (the catalog grows: other frameworks, the variant index URL) is taken from the
    real data, with the real sources kept so that those entries still validate."""
    directory.mkdir(parents=True, exist_ok=True)
    mine = _fake_files(releases)
    for name in FILES:
        real = _real_data(name)
        if name in mine:
            body = {**real, **mine[name]}
            if name == "sources":
                body["sources"] = {**real["sources"], **mine["sources"]["sources"]}
            text = yaml.dump({"version": 1, **body}, Dumper=_Dumper, sort_keys=False)
        else:
            text = (data_dir() / f"{name}.yaml").read_text()
        (directory / f"{name}.yaml").write_text(text)
    return directory


_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@functools.lru_cache(maxsize=None)
def _real_data_cached(name: str) -> str:
    return json.dumps(yaml.load((data_dir() / f"{name}.yaml").read_text(),
                                Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def _real_data(name: str) -> dict:
    data = json.loads(_real_data_cached(name))  # a fresh copy each time
    data.pop("version", None)
    return data


def test_fake_catalog_loads(tmp_path, catalog):
    cat = load_catalog(write_catalog(tmp_path))
    assert cat.suites() == ["bookworm"] and cat.gpu("a100").cc == "8.0"
    assert [r.version for r in cat.torch_releases()] == ["2.5"]
    assert cat.digest.startswith("sha256:") and cat.digest != catalog.digest


def test_fake_catalog_unknown_source_is_a_catalog_error(tmp_path):
    d = write_catalog(tmp_path, [_release("2.5", [_variant("cu124", "12.4", "8.0")], sources=("s1", "nowhere"))])
    with pytest.raises(CatalogError) as exc:
        load_catalog(d)
    assert "unknown sources: nowhere" in exc.value.message
    assert "sources.yaml" in exc.value.hint


def test_fake_catalog_without_version_is_a_catalog_error(tmp_path):
    d = write_catalog(tmp_path)
    (d / "gpus.yaml").write_text((d / "gpus.yaml").read_text().replace("version: 1\n", ""))
    with pytest.raises(CatalogError, match="expected a mapping with 'version: 1'"):
        load_catalog(d)


def test_fake_catalog_unknown_key_is_a_catalog_error(tmp_path):
    d = write_catalog(tmp_path)
    (d / "os.yaml").write_text((d / "os.yaml").read_text().replace("glibc:", "libc:"))
    with pytest.raises(CatalogError) as err:
        load_catalog(d)
    assert err.value.message.startswith("catalog entry bases.0.glibc: Field required")
    assert err.value.location.path == str(d / "os.yaml")  # the file (a fake catalog with anchors: no line)


def test_a_catalog_entry_error_names_its_file_line_and_field(tmp_path):
    """A team's exported catalog, hand-edited: the error says where, not pydantic's dump of every model."""
    from envkit.catalog.files import export_catalog

    d = export_catalog(tmp_path / "team-catalog")
    text = (d / "gpus.yaml").read_text()
    (d / "gpus.yaml").write_text(text.replace("family:", "famly:", 1))
    with pytest.raises(CatalogError) as err:
        load_catalog(d)
    line = text[:text.index("family:")].count("\n") + 1
    assert err.value.message == "catalog entry architectures.0.family: Field required (and 1 more)"
    assert (err.value.location.path, err.value.location.line) == (str(d / "gpus.yaml"), line)


def test_fake_catalog_release_absent_from_the_catalog(tmp_path):
    """Only catalog releases are candidates: a version the catalog lacks matches no build."""
    cat = load_catalog(write_catalog(tmp_path))
    with pytest.raises(ResolutionError) as exc:
        run(cat, framework="torch==3.0.*", gpus=["A100"])
    assert "no build matches the requirement" in exc.value.hint
    assert "use torch==2.5.0 (its cu124 build fits)" in exc.value.hint  # the nearest way out


def test_fake_catalog_default_variant_first_then_others(tmp_path):
    rel = _release("2.5", [_variant("cu124", "12.4", "8.0"), _variant("cu126", "12.6", "8.0;9.0")])
    cat = load_catalog(write_catalog(tmp_path, [rel]))
    assert run_image(cat, gpus=["A100"]).variant == "cu124"  # the default fits
    image = run_image(cat, gpus=["A100", "H100"])  # only the other variant has sm_90
    assert image.variant == "cu126" and image.index_url == VARIANT_INDEX + "cu126"
    assert decision(image, "torch").rejected == (
        "torch 2.5.0 (cu124): has no kernels for Hopper (cc 9.0); arch list sm_80",)


@pytest.mark.parametrize(
    "policy,min_driver,error",
    [
        ("strict", "550.54.15", None),  # the driver meets the toolkit floor, so PTX JITs
        ("minor", "550.54.15", None),  # minor, and the driver happens to meet the toolkit floor too
        ("minor", "535.104.05", "only PTX covers Hopper (cc 9.0) and JIT needs driver >= 550.54.15"),
        ("strict", "535.104.05", "needs driver >= 550.54.15 for CUDA 12.4 (policy strict)"),
    ],
)
def test_fake_catalog_ptx_counts_only_when_the_driver_can_jit(tmp_path, policy, min_driver, error):
    """A 9.0 GPU and an arch list '8.0+PTX': covered only through PTX."""
    cat = load_catalog(write_catalog(tmp_path))
    if error is None:
        image = run_image(cat, gpus=["H100"], policy=policy, min_driver=min_driver)
        assert image.arch_list == ("sm_80", "compute_80")
    else:
        with pytest.raises(ResolutionError) as exc:
            run(cat, gpus=["H100"], policy=policy, min_driver=min_driver)
        assert error in exc.value.hint


def test_fake_catalog_strict_without_a_driver_floor_is_a_rejection(tmp_path):
    cat = load_catalog(write_catalog(tmp_path, [_release("2.5", [_variant("cu134", "13.4", "8.0;9.0")])]))
    with pytest.raises(ResolutionError) as exc:
        run(cat, gpus=["H100"], policy="strict", min_driver="610.43.02")
    assert "torch 2.5.0 (cu134): the catalog has no driver floor for CUDA 13.4" in exc.value.hint


def test_fake_catalog_minor_needs_no_toolkit_floor(tmp_path):
    cat = load_catalog(write_catalog(tmp_path, [_release("2.5", [_variant("cu134", "13.4", "8.0;9.0")])]))
    image = run_image(cat, gpus=["H100"], policy="minor", min_driver="610.43.02")
    assert image.variant == "cu134" and image.driver_floor == "580" and image.cuda == "13.4.1"


def test_fake_catalog_only_ptx_without_a_toolkit_floor_is_a_rejection(tmp_path):
    cat = load_catalog(write_catalog(tmp_path, [_release("2.5", [_variant("cu134", "13.4", "8.0+PTX")])]))
    with pytest.raises(ResolutionError) as exc:
        run(cat, gpus=["H100"], policy="minor", min_driver="610.43.02")
    assert "only PTX covers Hopper (cc 9.0)" in exc.value.hint


# --- the compiled arch list, confirmed from the wheel --------------------------------------
def test_arch_list_confirmed_from_the_wheel_is_locked(catalog):
    reader = FakeArches(catalog)
    image = run_image(catalog, arches=reader)
    assert reader.reads == [("torch", f"torch-{image.framework_version}-cp311-cp311-manylinux_2_28_x86_64.whl")]
    d = decision(image, "arch_list")
    assert d.choice == " ".join(image.arch_list) and "as the catalog says" in d.reason
    assert "torch/lib/libtorch_python.so" in d.reason


def test_wheel_that_disagrees_wins_when_it_still_covers_the_fleet(catalog):
    base = run_image(catalog)
    wheel = ("sm_80", "sm_90", "compute_90")  # covers A100 and H100, unlike the catalog's list
    assert set(wheel) != set(base.arch_list)
    image = run_image(catalog, arches=FakeArches(catalog, {(base.framework_version, base.variant): wheel}))
    assert image.arch_list == wheel
    assert image.hash != base.hash  # the arch list is part of what the image is checked against
    assert "the catalog says" in decision(image, "arch_list").reason
    assert "sm_80 sm_90 compute_90 (the wheel's)" in decision(image, "gpus").reason
    assert expected(image)["arch_list"] == list(wheel)  # what the payload compares inside the image


def test_wheel_that_does_not_cover_a_fleet_gpu_is_refused_with_its_line(catalog):
    base = run_image(catalog)
    wheel = ("sm_80", "sm_86")  # no Hopper
    with pytest.raises(ResolutionError) as exc:
        run_image(catalog, arches=FakeArches(catalog, {(base.framework_version, base.variant): wheel}))
    err = exc.value
    assert "has no kernels for Hopper (cc 9.0)" in err.message and "sm_80 sm_86" in err.message
    assert "not the catalog's " + " ".join(base.arch_list) in err.message
    assert "check-arches --apply" in err.hint
    assert err.location is not None and err.location.line == 10  # images[0] in make_spec's text


def test_unreadable_wheel_keeps_the_catalog_list_and_says_so(catalog):
    from envkit.errors import WheelReadError

    base = run_image(catalog)
    boom = WheelReadError("torch-x.whl has no member torch/lib/libtorch_python.so")
    image = run_image(catalog, arches=FakeArches(catalog, {(base.framework_version, base.variant): boom}))
    assert image.arch_list == base.arch_list and image.hash == base.hash
    assert "not confirmed from the wheel: torch-x.whl has no member" in decision(image, "arch_list").reason


def test_tensorflow_arches_confirmed_from_its_wheel(catalog):
    base = run_image(catalog, framework="tensorflow[and-cuda]", gpus=("A100",))
    wheel = ("sm_80", "compute_80")
    reader = FakeArches(catalog, {(base.framework_version, "and-cuda"): wheel})
    image = run_image(catalog, framework="tensorflow[and-cuda]", gpus=("A100",), arches=reader)
    assert reader.reads[0][0] == "tensorflow" and image.arch_list == wheel
    assert "tensorflow/python/platform/build_info.py" in decision(image, "arch_list").reason


def test_jax_is_judged_by_min_cc_and_reads_no_wheel(catalog):
    reader = FakeArches(catalog)
    image = run_image(catalog, framework="jax[cuda12]", arches=reader)
    assert reader.reads == [] and image.min_cc is not None


def test_an_error_that_names_its_image_is_not_prefixed_twice_nor_sent_to_pip(catalog):
    """Only the joint solve with the extra packages points at pip:; an image without extras, named after
    anything, gets its name: line; a message that already names the image is left as it is."""
    def refusing(requirements, **kw):
        raise ResolutionError("image 'closure-lab' locks the CUDA runtime, but its closure pins another nvcc")

    spec = load(make_spec().replace("name: img", "name: closure-lab"))
    with pytest.raises(ResolutionError) as exc:
        run(catalog, closure=refusing, spec=spec)
    assert exc.value.message.count("closure-lab") == 1 and str(exc.value).count("closure-lab") == 1
    assert exc.value.location.line == 10  # its name: line (no extras: the framework's own closure failed)


def test_an_image_named_as_a_base_mirror_is_refused_at_its_name(catalog):
    """nightly --registry mirrors each base to TEAM_PATH/base-DISTRO-SUITE: an image of that name would share
    the repository, so the plan refuses it where the name is written, and says what to do."""
    base = plan(load(make_spec()), catalog)[0].base
    text = make_spec().replace("  - name: img", f"  - name: img\n    framework: \"torch\"\n  - name: base-{base.distro}-{base.suite}", 1)
    with pytest.raises(SpecError) as err:
        plan(load(text), catalog)
    assert f"image name 'base-{base.distro}-{base.suite}' is the registry repository envkit mirrors" in err.value.message
    assert err.value.location.line == text.splitlines().index(f"  - name: base-{base.distro}-{base.suite}") + 1
    assert err.value.hint == f"rename the image (e.g. {base.distro}-{base.suite}-base)"
    plan(load(make_spec().replace("name: img", "name: base-cuda")), catalog)  # other base-* names are fine


def test_sizes_are_asked_for_each_locked_image_and_keep_its_hash(catalog):
    seen = []

    def sizes(image):  # index.sizes.with_sizes, as the app passes it
        seen.append(image.name)
        return image.model_copy(update={"packages": tuple(p.model_copy(update={"size": 7}) for p in image.packages)})

    plain = run_image(catalog, framework="torch==2.5.*")
    sized = resolve(load(make_spec(framework="torch==2.5.*")), catalog, FakeIndexes(catalog).main,
                    closure=FakeClosure(), index_for=FakeIndexes(catalog).index_for, arch_reader=FakeArches(catalog),
                    sizes=sizes).images[0]
    assert seen == ["img"] and {p.size for p in sized.packages} == {7}
    assert {p.size for p in plain.packages} == {None}  # no sizes asked: none recorded
    assert sized.hash == plain.hash == sized.content_hash()
