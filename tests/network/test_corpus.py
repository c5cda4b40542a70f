"""Realistic team stacks resolved against the live package index (tests/network/corpus/*.yaml).

Each spec is what a team writes; the table says what a correct resolve locks, or which package a
refusal must name. Resolve only (no engine): two of these stacks (nlp, vision-lightning) are built
and verified in tests/integration/test_team_stacks.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

pytestmark = pytest.mark.network

CORPUS = Path(__file__).parent / "corpus"
ENVKIT = [sys.executable, "-m", "envkit.cli"]

# spec -> (framework version admitted, {extra: versions admitted}) for the stacks that resolve
RESOLVES = {
    "training": ("==2.8.*", {"transformers": ">=4.50,<5", "accelerate": ">=1,<2", "datasets": ">=3", "peft": ">=0.15"}),
    "vision": ("==2.6.*", {"torchvision": "==0.21.*", "torchaudio": "==2.6.*", "lightning": ">=2"}),
    "diffusion": ("==2.6.0", {"xformers": "==0.0.29.post3", "diffusers": ">=0.30"}),
    "serving": ("==2.7.1", {"vllm": "==0.10.1"}),
    "jax": (">=0.4", {"flax": ">=0.10", "optax": ">=0.2"}),
    "tensorflow": (">=2.16", {"keras": ">=3"}),
    # built and verified too (tests/integration/test_team_stacks.py)
    # the catalog's binary facts (binaries.yaml) as constraints: numpy<2 beside torch < 2.3; onnxruntime-gpu's
    # releases built for the image's CUDA major (its newest are built for CUDA 13)
    "numpy-abi-old-torch": ("==2.2.*", {"numpy": "<2", "scipy": ">=1"}),
    "onnxruntime-follows-the-cuda-major": ("==2.8.*", {"onnxruntime-gpu": ">=1.19,<1.27"}),
    "nlp": ("==2.5.1", {"transformers": ">=4.50,<5", "torchaudio": "==2.5.*"}),
    "vision-lightning": ("==2.5.1", {"torchvision": "==0.20.*", "lightning": ">=2"}),
}
# spec -> (exit code, the package the refusal names, words it says)
REFUSES = {
    "sdist-only": (4, "flash-attn", "no release of flash-attn on"),
    "no-wheel-for-python": (4, "numpy", "the newest release of numpy with a wheel for it is"),
    "unpaired-companion": (4, "torchaudio", "torchaudio==2.8.* pairs with no torch build"),
    "held-back": (4, "transformers", "far behind"),  # build.held_back: refuse
    # the only wheels for the image are 2020 dev releases: never locked unless the entry names one (PEP 440)
    "prerelease-only-wheel": (4, "deepspeed", "a pre-release (uploaded 2020-11-11"),
    # the catalog's binary facts (binaries.yaml): a NumPy the framework's ABI cannot run on, a CUDA 11 build in a
    # CUDA 12 image (from the name; from the release)
    "numpy2-beside-old-torch": (4, "numpy", "torch 2.2.2 runs on numpy<2 only"),
    "cuda11-library-in-cuda12-image": (4, "cupy-cuda11x", "is built for CUDA 11, but the image's CUDA is 12.8"),
    "onnxruntime-cuda11-in-cuda12-image": (4, "onnxruntime-gpu", "releases built for CUDA 12"),
}


def resolve(name: str, tmp_path: Path) -> tuple[int, dict]:
    proc = subprocess.run([*ENVKIT, "resolve", "--json", str(CORPUS / f"{name}.yaml"), "--lock",
                           str(tmp_path / f"{name}.lock")], capture_output=True, text=True, timeout=300)
    return proc.returncode, json.loads(proc.stdout)


def test_the_corpus_is_the_tables():
    assert {p.stem for p in CORPUS.glob("*.yaml")} == set(RESOLVES) | set(REFUSES)


@pytest.mark.parametrize("name", sorted(RESOLVES))
def test_a_team_stack_resolves_jointly(name, tmp_path):
    rc, doc = resolve(name, tmp_path)
    assert rc == 0, doc
    (image,) = doc["images"]
    framework, extras = RESOLVES[name]
    assert SpecifierSet(framework).contains(image["framework_version"].split("+")[0]), image["framework_version"]
    got = {e["name"]: e for e in image["extras"]}
    assert set(got) == set(extras) == set(image["requested"])
    for extra, admitted in extras.items():
        assert SpecifierSet(admitted).contains(got[extra]["version"].split("+")[0]), (extra, got[extra])
        assert got[extra]["reason"], extra
    lock = json.loads((tmp_path / f"{name}.lock").read_text())
    groups = {p["name"]: p["group"] for p in lock["images"][0]["packages"]}
    assert groups[image["framework"]] == "framework" and set(extras) <= set(groups)
    # keras is tensorflow's own dependency, so in its closure; the others are the extras'
    assert {e for e in extras if groups[e] == "framework"} == ({"keras"} if name == "tensorflow" else set())


@pytest.mark.parametrize("name", sorted(REFUSES))
def test_a_stack_that_cannot_be_installed_is_refused_naming_the_package(name, tmp_path):
    rc, doc = resolve(name, tmp_path)
    code, package, words = REFUSES[name]
    assert rc == code, doc
    assert package in doc["message"] and words in doc["message"], doc
    lines = (CORPUS / f"{name}.yaml").read_text().splitlines()
    row = next(i for i, text in enumerate(lines, 1) if f'"{package}' in text)
    column = lines[row - 1].index(f'"{package}') + 1  # the pip: entry that names the package
    assert doc["location"] == f"{CORPUS / name}.yaml:{row}:{column}", doc
    assert not (tmp_path / f"{name}.lock").exists()
