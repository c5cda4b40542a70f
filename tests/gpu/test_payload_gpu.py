"""The certification payload on a real NVIDIA GPU, run natively (no image, no Docker).

Marked `gpu`; each test is skipped where its framework cannot reach a GPU (torch sees no CUDA device;
jax has no CUDA plugin), as on CI's machines: it runs on a
GPU workstation or the project's lent GPU machine (`python3 -m pytest tests/gpu`). What it
asserts is what certification needs from the GPU path: every GPU check passes on a GPU, with
the figures the checks promise, and the host's verdict of the document is `certified`.
The committed record of such a run is judged on CI by tests/unit/payload/test_gpu_record.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.unit.payload_modules import payload_module

pytestmark = pytest.mark.gpu


def torch_sees_a_gpu() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


needs_torch_gpu = pytest.mark.skipif(not torch_sees_a_gpu(), reason="needs an NVIDIA GPU that torch can use")

PAYLOAD = ROOT / "envkit" / "payload" / "envkit_check"
GPU_CHECKS = [name for name, _, gpu in payload_module("envkit_check_torch").REGISTRY if gpu]  # GPU-only checks


def gpu_expect():
    spec = importlib.util.spec_from_file_location("gpu_expect", ROOT / "scripts" / "gpu_expect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def certify(expect: dict, tmp_path) -> dict:
    """The payload's document in certify mode against `expect`, run as images run it."""
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(expect))
    proc = subprocess.run([sys.executable, str(PAYLOAD), "--mode", "certify", "--expect", str(path), "--json",
                           "--timeout", "150"], capture_output=True, text=True, timeout=200,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.stdout, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    expect = gpu_expect().installed_expect()
    return expect, certify(expect, tmp_path_factory.mktemp("gpu"))


@needs_torch_gpu
def test_every_gpu_check_passes(run):
    _, doc = run
    checks = {c["name"]: c for c in doc["checks"]}
    failed = {n: (checks.get(n) or {}).get("message", "not reported") for n in GPU_CHECKS
              if (checks.get(n) or {}).get("status") != "passed"}
    assert not failed, failed


@needs_torch_gpu
def test_the_checks_measure_what_they_promise(run):
    _, doc = run
    v = {c["name"]: c["value"] for c in doc["checks"]}
    assert v["cuda_train_step"]["last_loss"] < v["cuda_train_step"]["first_loss"]
    assert v["cuda_train_step"]["dtype"] in ("bfloat16", "float16")
    assert v["memory"]["oom_raised"] is True and v["memory"]["fitted_mib"] > 0
    assert v["dataloader"]["pinned"] is True and v["dataloader"]["intact"] is True
    assert v["matmul_tflops"]["fp16_matmul_tflops"] > 0
    assert v["h2d_d2h_bandwidth"]["h2d_pinned_gbps"] > 0
    assert v["telemetry"]["samples"] > 0 and doc["telemetry"]


@needs_torch_gpu
def test_the_host_certifies_the_document(run):
    from envkit.certify.verdict import decide

    expect, doc = run
    checks = {c["name"]: c for c in doc["checks"]}
    # pip_check and dataloader_cpu judge this machine's own Python and /dev/shm, which are not an image's
    host = {n for n in ("pip_check", "dataloader_cpu") if checks.get(n, {}).get("status") == "failed"}
    if host:
        pytest.skip(f"this machine's environment fails {sorted(host)}: {[checks[n]['message'] for n in host]}")
    assert decide(doc, expect, gpu_requested=True) == ("certified", ())


def jax_cuda_plugin() -> str | None:
    from importlib import metadata

    for name in ("jax-cuda13-plugin", "jax-cuda12-plugin"):
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            pass
    return None


@pytest.mark.skipif(importlib.util.find_spec("jax") is None or jax_cuda_plugin() is None,
                    reason="needs jax with its CUDA plugin")
def test_the_jax_path_certifies_too(tmp_path):
    from envkit.certify.verdict import decide

    expect = gpu_expect().installed_jax_expect()
    doc = certify(expect, tmp_path)
    checks = {c["name"]: c for c in doc["checks"]}
    jax_gpu = [name for name, _, gpu in payload_module("envkit_check_jax").REGISTRY if gpu]
    failed = {n: (checks.get(n) or {}).get("message", "not reported") for n in jax_gpu
              if (checks.get(n) or {}).get("status") != "passed"}
    assert not failed, failed
    step = checks["gpu_train_step"]["value"]
    assert step["last_loss"] < step["first_loss"] and checks["matmul_tflops"]["value"]["fp16_matmul_tflops"] > 0
    if checks.get("pip_check", {}).get("status") != "failed":  # this machine's Python, not an image's
        assert decide(doc, expect, gpu_requested=True) == ("certified", ())
