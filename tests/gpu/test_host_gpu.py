"""envkit's host-side readings of a GPU machine, against a real NVIDIA driver.

Marked `gpu`; skipped where there is no nvidia-smi (CI). These read nvidia-smi's real output: the
`envkit run` gate's `host_gpus`, `envkit doctor`'s GPU finding, and `harness.gpu_key` (how a nightly
GPU runner decides whether a stored certificate was made on its own GPU model and driver), which
must spell the model and driver as the payload's certificate does or a runner never reuses one.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess

import pytest

from envkit.certify.certificate import gpu_model_of
from envkit.payload.harness import gpu_key
from envkit.engine.protocol import RunResult
from envkit.errors import EngineError
from envkit.certify.gate import host_gpus, judge

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs nvidia-smi")]


class HostAsContainer:
    """An engine whose container is this host: what nvidia-smi prints inside a GPU container of an image is
    what the NVIDIA Container Toolkit's injected nvidia-smi prints on the host."""

    def run(self, ref, command, options):
        proc = subprocess.run(command, capture_output=True, text=True, timeout=options.timeout)
        return RunResult(exit_code=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)


def test_the_gate_reads_this_hosts_gpus():
    gpus, why = host_gpus()
    assert why is None and gpus
    assert all(g.name and re.fullmatch(r"\d+\.\d+(\.\d+)*", g.driver) and re.fullmatch(r"\d+\.\d+", g.cc)
               for g in gpus), gpus


def test_gpu_key_spells_model_and_driver_as_the_certificate_does():
    key = gpu_key(HostAsContainer(), "this-host")
    gpus, _ = host_gpus()
    assert key is not None
    model, driver = key
    assert driver == gpus[0].driver
    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():  # the payload's facts name each device as torch does
            names = [{"name": torch.cuda.get_device_name(i)} for i in range(torch.cuda.device_count())]
            assert model == gpu_model_of({"gpus": names})


def test_the_gate_passes_a_certificate_of_this_gpu_model_and_refuses_another_model():
    gpus, _ = host_gpus()
    model, driver = gpu_key(HostAsContainer(), "this-host")
    cert = {"status": "certified", "gpu_model": model, "driver": driver, "created_at": "2026-12-04T15:00:00Z",
            "reasons": []}
    assert judge([cert], gpus, on_gpus=True, image="t/i:1").passed
    # the gate judges by model; another driver passes, saying which driver this host runs
    newer = judge([dict(cert, driver="1.0")], gpus, on_gpus=True, image="t/i:1")
    assert newer.passed and f"this host runs driver {driver}" in newer.message
    assert not judge([dict(cert, gpu_model="NVIDIA Imaginary X1")], gpus, on_gpus=True, image="t/i:1").passed


def test_doctor_sees_the_driver_and_the_gpus():
    from envkit.ops.doctor import diagnose

    def no_engine():
        raise EngineError("no engine on this machine")

    findings = {f.name: f for f in diagnose(no_engine, offline=True)}
    gpus, _ = host_gpus()
    assert findings["gpus"].status == "ok" and gpus[0].name in findings["gpus"].value
