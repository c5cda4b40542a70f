"""The certification gate `envkit run` puts before a job: certificates against this host's GPUs (pure
logic on the certificates' documents; the run itself is tests/integration/test_pipeline.py)."""

from __future__ import annotations

import pytest

from envkit.certify.gate import HostGpu, host_gpus, judge, model_key

H200 = HostGpu("NVIDIA H200", "570.124.06", "9.0")
A100 = HostGpu("NVIDIA A100-SXM4-80GB", "570.124.06", "8.0")


def cert(status="certified", model="NVIDIA H200", driver="570.124.06", when="2026-12-01T00:00:00Z", reasons=()):
    return {"status": status, "gpu_model": model, "driver": driver, "created_at": when, "reasons": list(reasons)}


def test_certified_on_this_hosts_model_passes_whatever_the_spelling():
    v = judge([cert(model="nvidia  H200")], [H200, H200], on_gpus=True, image="t/i:1")
    assert v.passed and "certified on nvidia  H200, driver 570.124.06, 2026-12-01" in v.message
    assert model_key("NVIDIA H200") == model_key(" nvidia h200") == "h200"


def test_certified_elsewhere_only_is_named_with_where_it_was():
    v = judge([cert(model="NVIDIA H100")], [H200], on_gpus=True, image="t/i:1")
    assert not v.passed and "not certified on NVIDIA H200 (certified on NVIDIA H100)" in v.message
    assert "envkit certify t/i:1" in v.hint and ":certified" in v.hint


def test_the_newest_certificate_on_the_model_decides():
    older_ok = cert(when="2026-11-01T00:00:00Z", driver="560.35.03")
    newer_failed = cert(status="failed", when="2026-12-01T00:00:00Z", reasons=("cuDNN: the lock expects 9.1 but the image has 9.0",))
    v = judge([older_ok, newer_failed], [H200], on_gpus=True, image="t/i:1")
    assert not v.passed and "is failed: cuDNN: the lock expects 9.1" in v.message
    v = judge([newer_failed, cert(when="2026-12-02T00:00:00Z")], [H200], on_gpus=True, image="t/i:1")
    assert v.passed


def test_every_model_on_the_host_must_be_covered():
    v = judge([cert()], [H200, A100], on_gpus=True, image="t/i:1")
    assert not v.passed and "not certified on NVIDIA A100-SXM4-80GB" in v.message
    assert judge([cert(), cert(model="NVIDIA A100-SXM4-80GB")], [H200, A100], on_gpus=True, image="t/i:1").passed


@pytest.mark.parametrize("gpus", [[], [H200]])
def test_a_run_without_gpus_needs_a_certificate_that_passed(gpus):
    on_gpus = False
    assert judge([cert(status="verified", model="none", driver="none")], gpus, on_gpus=on_gpus, image="t/i:1").passed
    assert judge([cert()], gpus, on_gpus=on_gpus, image="t/i:1").passed
    v = judge([cert(status="failed", reasons=("NCCL differs",))], gpus, on_gpus=on_gpus, image="t/i:1")
    assert not v.passed and "it failed on NVIDIA H200" in v.message and "NCCL differs" in v.message
    v = judge([], gpus, on_gpus=on_gpus, image="t/i:1")
    assert not v.passed and v.message == "t/i:1 has no certificate that passed (none at all)"


def test_host_gpus_reads_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 570.124.06, 9.0'\necho 'NVIDIA H200, 570.124.06, 9.0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert host_gpus() == ([H200, H200], None)
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n")
    gpus, why = host_gpus()
    assert gpus == [] and "could not communicate" in why
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert host_gpus() == ([], "no nvidia-smi on this host (no NVIDIA driver)")


def test_unreadable_gpus_are_said_not_taken_for_a_cpu_run(monkeypatch):
    """The engine offers GPUs but nvidia-smi answers nothing here: a certified certificate (any model) is needed,
    and the verdict says the models were not checked."""
    from envkit.app import researchers as pipeline

    certs = [cert(status="verified", model="none", driver="none")]
    monkeypatch.setattr(pipeline, "show_image", lambda engine, ref, store_url, trusted_keys=None: {"certificates": certs})
    monkeypatch.setattr("envkit.app.researchers.host_gpus", lambda: ([], "nvidia-smi did not answer"))
    v = pipeline.certification_gate(None, "t/i:1", on_gpus=True, store_url=None)
    assert not v.passed  # verified without a GPU is not enough for a GPU run
    assert "has no certified certificate (a GPU run needs one) (its newest is verified on no GPU" in v.message
    assert "this host's GPUs could not be read (nvidia-smi did not answer)" in v.message
    certs.append(cert())
    v = pipeline.certification_gate(None, "t/i:1", on_gpus=True, store_url=None)
    assert v.passed and "this host's GPU models could not be checked against it" in v.message
