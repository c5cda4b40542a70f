"""resolve/binaries.py: the catalog's binary facts (the packaged binaries.yaml) as constraints on an image's solves
and checks on its finished closure, over recorded index answers (numpy's and onnxruntime-gpu's releases as PyPI
listed them on 2026-12-07, trimmed)."""

from __future__ import annotations

import hashlib

import pytest
from packaging.version import Version

from envkit.catalog.files import load_catalog, packaged_dir
from envkit.catalog.models import PyRange
from envkit.index.closure import REQUESTED, Pin
from envkit.lock import HELD_BACK, Decision
from envkit.resolve import binaries, joint
from envkit.resolve.candidates import Candidate


@pytest.fixture(scope="module")
def catalog():
    return load_catalog(packaged_dir())


def cand(version, cuda="12.8", variant="cu128"):
    return Candidate("torch", version, variant, cuda, None, None, ("8.0",), None, PyRange(min="3.9", max="3.13"), True,
                     None, f"torch=={version}", True)


class RecordedIndex:
    url = "https://pypi.org/simple"
    RELEASES = {"numpy": ["2.4.6", "2.1.3", "2.0.2", "1.26.4", "1.24.4"],
                "onnxruntime-gpu": ["1.31.1", "1.27.0", "1.26.0", "1.19.2", "1.18.1", "1.17.1"]}

    def versions(self, project):
        return [Version(v) for v in self.RELEASES.get(project, [])]


def _pin(name, version, *via):
    return Pin(name, version, ("sha256:" + hashlib.sha256(f"{name}{version}".encode()).hexdigest(),),
               via or (REQUESTED,))


def target(*extras):
    return joint.Target("img", tuple(extras), "3.11", "2.36")


def test_constraints_follow_the_build(catalog):
    assert binaries.caps(catalog, cand("2.2.2", "12.1", "cu121")).keys() == {"numpy<2", "onnxruntime-gpu>=1.19,<1.27"}
    assert list(binaries.caps(catalog, cand("2.8.0"))) == ["onnxruntime-gpu>=1.19,<1.27"]
    assert list(binaries.caps(catalog, cand("2.0.1", "11.7", "cu117"))) == ["numpy<2", "onnxruntime-gpu<1.19"]
    assert list(binaries.caps(catalog, cand("2.11.0", "13.0", "cu130"))) == ["onnxruntime-gpu>=1.27"]
    why = binaries.caps(catalog, cand("2.2.2", "12.1", "cu121"))["numpy<2"]
    assert "torch 2.2.2 runs on numpy<2 only" in why and "pytorch_issue_107302" in why


def test_a_numpy_entry_keeps_the_builds_it_can_sit_beside(catalog):
    viable = [cand("2.8.0"), cand("2.2.2", "12.1", "cu121")]
    assert binaries.viable_beside(target("numpy==2.*"), viable, catalog, RecordedIndex()) == viable[:1]
    assert binaries.viable_beside(target("numpy"), viable, catalog, RecordedIndex()) == viable
    assert binaries.viable_beside(target("transformers"), viable, catalog, RecordedIndex()) == viable


def test_numpy_2_beside_torch_2_2_is_refused_naming_both(catalog):
    with pytest.raises(binaries.BinaryMismatch) as exc:
        binaries.viable_beside(target("numpy>=2"), [cand("2.2.2", "12.1", "cu121")], catalog, RecordedIndex())
    err = exc.value
    assert err.package == "numpy" and err.exit_code == 4
    assert err.message.startswith("'numpy>=2' (pip:) cannot be installed beside torch 2.2.2 (cu121)")
    assert "compiled using NumPy 1.x cannot be run in NumPy 2" in err.message and "torchio_pr_1183" in err.message
    assert "numpy<2" in err.hint


def test_an_onnxruntime_of_another_cuda_major_is_refused_before_the_solve(catalog):
    with pytest.raises(binaries.BinaryMismatch) as exc:
        binaries.viable_beside(target("onnxruntime-gpu==1.18.*"), [cand("2.8.0")], catalog, RecordedIndex())
    assert exc.value.package == "onnxruntime-gpu" and "onnxruntime-gpu>=1.19,<1.27" in exc.value.hint


def test_a_cuda_11_library_in_a_cuda_12_image_is_refused_at_the_entry_that_brought_it(catalog):
    pins = [_pin("torch", "2.8.0"), _pin("nvidia-cublas-cu12", "12.8.4.1", "torch"), _pin("cudf-like", "1.0"),
            _pin("cupy-cuda11x", "13.6.0", "cudf-like")]
    with pytest.raises(binaries.BinaryMismatch) as exc:
        binaries.check_closure(target("cudf-like"), cand("2.8.0"), "12.8", pins, catalog)
    err = exc.value
    assert err.package == "cudf-like"  # the pip: entry, where the refusal is placed
    assert err.message.startswith("cupy-cuda11x 13.6.0, which cudf-like (pip:) requires, is built for CUDA 11, but "
                                  "the image's CUDA is 12.8")
    assert "pypi_cupy_wheel_names" in err.message and err.hint.startswith("ask for cupy-cuda12x instead")


def test_a_closure_of_one_cuda_major_says_so_with_its_sources(catalog):
    pins = [_pin("torch", "2.2.2"), _pin("numpy", "1.26.4"), _pin("nvidia-cudnn-cu12", "8.9.2.26", "torch")]
    decisions = binaries.check_closure(target("numpy"), cand("2.2.2", "12.1", "cu121"), "12.1", pins, catalog)
    by = {d.topic: d for d in decisions}
    assert by["abi numpy"].choice == "numpy 1.26.4" and "constrained to numpy<2" in by["abi numpy"].reason
    assert by["cuda_major"].choice == "CUDA 12" and "nvidia-cudnn-cu12" in by["cuda_major"].reason
    assert "catalog binaries.yaml; sources: pypi_nvidia_cu_names" in by["cuda_major"].reason
    with pytest.raises(binaries.BinaryMismatch):  # a guard: a closure that ignored the constraint
        binaries.check_closure(target(), cand("2.2.2", "12.1", "cu121"), "12.1", [_pin("numpy", "2.1.3")], catalog)


def test_a_package_held_back_by_a_catalog_fact_says_the_fact(catalog):
    report = joint.ExtraReport("numpy", "1.26.4", "2.4.6", True,
                               Decision(topic="pip numpy", choice="1.26.4", reason=HELD_BACK + "uv says: ..."))
    (r,) = binaries.explain_held([report], binaries.caps(catalog, cand("2.2.2", "12.1", "cu121")))
    assert r.held_back and r.decision.reason.startswith(HELD_BACK + "2.4.6 is the newest release its entry admits; "
                                                        "held by the catalog: torch 2.2.2 runs on numpy<2 only")
