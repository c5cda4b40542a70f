"""The host side of certification, fed the payload document a real GPU printed.

docs/gpu-validation/2026-12-04-h200/ holds what `scripts/gpu-validate.sh` wrote on an NVIDIA H200
(driver 580.159.04, torch 2.11.0+cu130): the payload's document in certify mode and the expect
file it ran against. Everything else in the suite judges documents written by hand or by the
payload on a CPU; this one came from the GPU path, so the verdict, the certificate and the three
reports are checked against it here, on CI's CPU-only machines.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET

import pytest

from envkit.certify.certificate import certificate_from, parse_certificate
from envkit.certify.verdict import decide
from envkit.certify.report import report_html, report_json, report_junit
from tests.conftest import ROOT
from tests.unit.payload_modules import payload_module

RECORD = ROOT / "docs" / "gpu-validation" / "2026-12-04-h200"
DOC = json.loads((RECORD / "gpu-validation.json").read_text())
EXPECT = json.loads((RECORD / "expect.json").read_text())
JAX_DOC = json.loads((RECORD / "run3-gpu-validation-jax.json").read_text())
JAX_EXPECT = json.loads((RECORD / "expect-jax.json").read_text())
GPU_CHECKS = [name for name, _, gpu in payload_module("envkit_check_torch").REGISTRY if gpu]  # GPU-only checks


def certificate(doc=DOC, expect=EXPECT):
    return certificate_from(doc, expect, image="registry.example/ml/torch:gpu", image_id="sha256:" + "ab" * 32,
                            lock_hash="0" * 64, gpu_requested=True, created_at="2026-12-04T14:53:26Z",
                            envkit_version="test")


def test_the_record_is_a_certify_run_on_an_h200():
    assert DOC["mode"] == "certify" and DOC["status"] == "certified"
    assert [g["name"] for g in DOC["facts"]["gpus"]] == ["NVIDIA H200"]
    checks = {c["name"]: c for c in DOC["checks"]}
    assert all(checks[name]["status"] == "passed" for name in GPU_CHECKS)


def test_the_host_agrees_certified_with_no_reasons():
    assert decide(DOC, EXPECT, gpu_requested=True) == ("certified", ())


def test_the_records_rates_clear_the_catalogs_floors_for_the_h200():
    """The record's expect files set a bf16 floor of 0, which replaces the catalog's for that key: without it both
    of the catalog's H200 floors (perf.yaml) are judged against the measured rates, and they hold; a rate under
    one fails."""
    from envkit.catalog.perf import floors_for

    floors, _ = floors_for("NVIDIA H200")
    assert set(floors) == {"bf16_matmul_tflops", "fp16_matmul_tflops"}
    unfloored = {k: v for k, v in EXPECT.items() if k != "perf_floors"}
    for doc, expect in ((DOC, unfloored), (JAX_DOC, {k: v for k, v in JAX_EXPECT.items() if k != "perf_floors"})):
        assert decide(doc, expect, gpu_requested=True) == ("certified", ())
    slow = copy.deepcopy(DOC)
    next(c for c in slow["checks"] if c["name"] == "matmul_tflops")["value"]["bf16_matmul_tflops"] = 500.0
    status, reasons = decide(slow, unfloored, gpu_requested=True)
    assert status == "failed" and reasons[0].startswith("bf16_matmul_tflops 500 on NVIDIA H200 is below")


def test_certificate_is_keyed_by_gpu_model_and_driver_and_keeps_the_figures():
    cert = certificate()
    assert (cert.status, cert.gpu_model, cert.driver, cert.gpu_count) == ("certified", "NVIDIA H200", "580.159.04", 1)
    figures = {c.name: c.value for c in cert.checks}
    assert figures["matmul_tflops"]["bf16_matmul_tflops"] > 0.8 * 790  # the card's cuBLAS rate, docs/gpu-validation.md
    assert figures["cuda_train_step"]["last_loss"] < figures["cuda_train_step"]["first_loss"]
    assert figures["memory"]["oom_raised"] is True
    (summary,) = cert.telemetry_summary
    assert summary.samples == len(DOC["telemetry"]) and summary.max_power_w and summary.max_temp_c
    assert parse_certificate(cert.to_bytes()) == cert


def test_reports_render_the_gpu_run():
    cert = certificate()
    doc = json.loads(report_json([cert], generated_at="2026-12-04T15:00:00Z"))
    assert doc["certificates"][0]["status"] == "certified"
    suites = ET.fromstring(report_junit([cert], generated_at="2026-12-04T15:00:00Z"))
    assert suites.get("failures") == "0" and suites.get("errors") == "0"
    assert int(suites.get("tests")) == len(DOC["checks"]) + 1  # one case per check and the certificate's
    html = report_html([cert], generated_at="2026-12-04T15:00:00Z").decode()
    assert "NVIDIA H200" in html and "<svg" in html  # the telemetry plots


@pytest.mark.parametrize("change, reason", [
    (lambda d: d["facts"].update(cuda="12.8"), "CUDA"),
    (lambda d: d["facts"].update(driver="440.33.01"), "driver floor"),
    (lambda d: d["facts"]["gpus"][0].update(cc="7.0"), "7.0"),  # a V100: below the wheel's oldest arch, sm_75
])
def test_the_same_run_on_a_mismatched_image_or_host_fails(change, reason):
    doc = copy.deepcopy(DOC)
    change(doc)
    status, reasons = decide(doc, EXPECT, gpu_requested=True)
    assert status == "failed" and any(reason in r for r in reasons), reasons


def test_a_gpu_check_that_failed_fails_the_certificate():
    doc = copy.deepcopy(DOC)
    step = next(c for c in doc["checks"] if c["name"] == "cuda_train_step")
    step.update(status="failed", message="loss did not fall")
    status, reasons = decide(doc, EXPECT, gpu_requested=True)
    assert status == "failed" and reasons == ("check cuda_train_step failed: loss did not fall",)



def test_the_jax_record_is_certified_by_the_host_too():
    assert JAX_DOC["facts"]["framework"] == "jax" and JAX_DOC["facts"]["backend"] == "gpu"
    jax_gpu = [name for name, _, gpu in payload_module("envkit_check_jax").REGISTRY if gpu]
    checks = {c["name"]: c for c in JAX_DOC["checks"]}
    assert all(checks[name]["status"] == "passed" for name in jax_gpu)
    assert decide(JAX_DOC, JAX_EXPECT, gpu_requested=True) == ("certified", ())
    cert = certificate(JAX_DOC, JAX_EXPECT)
    assert (cert.status, cert.gpu_model, cert.driver) == ("certified", "NVIDIA H200", "580.159.04")


def test_a_jax_image_with_another_cudnn_fails():
    doc = copy.deepcopy(JAX_DOC)
    doc["facts"]["cudnn"] = "9.19.0.55"  # JAX locks pin every component of the distribution's version
    status, reasons = decide(doc, JAX_EXPECT, gpu_requested=True)
    assert status == "failed" and any("9.19.0.55" in r for r in reasons), reasons
