"""catalog/binaries.py: binaries.yaml's facts (the NumPy a framework release runs on, the CUDA major a distribution
targets), read through their questions, validated at load with their sources, and part of the digest."""

from __future__ import annotations

import pytest

from envkit.catalog.files import load_catalog, packaged_dir
from envkit.errors import CatalogError
from tests.unit.refreshfake import copy_catalog


@pytest.fixture(scope="module")
def facts():
    return load_catalog(packaged_dir()).binaries


@pytest.mark.parametrize("version, numpy", [("2.0.1", "<2"), ("2.2.2", "<2"), ("2.2.2+cu118", "<2"), ("2.3.0", None),
                                            ("2.8.0", None)])
def test_torch_before_2_3_runs_on_numpy_1_only(facts, version, numpy):
    row = facts.numpy_for("torch", version)
    assert (row.numpy if row else None) == numpy
    if row:
        assert "pytorch_builder_pr_1770" in row.sources
    assert facts.numpy_for("jax", "0.4.26") is None


@pytest.mark.parametrize("name, version, major, fits_12", [
    ("nvidia-cublas-cu11", "11.11.3.6", 11, "nvidia-cublas-cu12"),
    ("nvidia-cuda-runtime-cu12", "12.8.90", 12, "nvidia-cuda-runtime-cu12"),
    ("nvidia_cudnn_cu13", "9.13.0.50", 13, "nvidia-cudnn-cu12"),  # named as a lock or a wheel may spell it
    ("cupy-cuda11x", "13.6.0", 11, "cupy-cuda12x"),
    ("cupy-cuda117", "10.6.0", 11, "cupy-cuda12x"),  # the older one-release packages
    ("jax-cuda13-plugin", "0.7.2", 13, "jax-cuda12-plugin"),
    ("onnxruntime-gpu", "1.18.1", 11, "onnxruntime-gpu>=1.19,<1.27"),
    ("onnxruntime-gpu", "1.26.0", 12, "onnxruntime-gpu>=1.19,<1.27"),
    ("onnxruntime-gpu", "1.31.1", 13, "onnxruntime-gpu>=1.19,<1.27"),
])
def test_the_cuda_major_a_distribution_targets(facts, name, version, major, fits_12):
    got, row = facts.cuda_major(name, version)
    assert got == major and row.sources
    assert facts.fits(name, row, 12) == fits_12


@pytest.mark.parametrize("name", ["numpy", "torch", "nvidia-nvtx", "cupy", "onnxruntime"])
def test_packages_without_a_known_cuda_major(facts, name):
    assert facts.cuda_major(name, "1.0") is None


def test_the_file_is_in_the_digest_and_optional(tmp_path):
    cat = copy_catalog(tmp_path)
    before = load_catalog(cat).digest
    path = cat / "binaries.yaml"
    path.write_text(path.read_text().replace('releases: "<2.3"', 'releases: "<2.2"'))
    changed = load_catalog(cat)
    assert changed.digest != before and changed.binaries.numpy_for("torch", "2.2.2") is None
    path.unlink()  # a team copy made before the file: no binary facts known
    bare = load_catalog(cat)
    assert bare.binaries.numpy_for("torch", "2.0.1") is None and bare.binaries.cuda_major("cupy-cuda11x", "1") is None


@pytest.mark.parametrize("old, new, words", [
    ("sources: [pypi_cupy_wheel_names]\n  - pattern", "sources: [no_such_source]\n  - pattern", "no_such_source"),
    ('pattern: "cupy-cuda(?P<major>[0-9]+)x"', 'pattern: "cupy-cuda([0-9]+)x"', "no (?P<major>...) group"),
    ('numpy: "<2"', 'numpy: "two"', "not a PEP 440 version specifier"),
    ("major: 11", "major: eleven", "cuda_releases"),
    ("version: 1", "version: 1\nextra_key: 1", "extra_key"),
])
def test_a_bad_row_is_refused_naming_it(tmp_path, old, new, words):
    cat = copy_catalog(tmp_path)
    path = cat / "binaries.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(CatalogError) as exc:
        load_catalog(cat)
    assert words in exc.value.message and "binaries.yaml" in exc.value.message
