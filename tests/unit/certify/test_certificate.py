"""Certificates: the host-side verdict over payload documents.

These tests fake the DEVICE FACTS only (payload documents as the in-image payload would print
them); the outcome is always computed by ``decide``. The payload's own ``status`` is set to
what the payload would claim, so a test also shows the host does not simply copy it.
"""

from __future__ import annotations

import copy
import json

import pytest

from envkit.certify import certificate as C
from envkit.certify.verdict import GPU_CHECKS, NO_GPU_REQUESTED, decide
from envkit.certify.certificate import (Certificate, certificate_from, certificate_label, certify_image,
                                        load_certificate, parse_certificate)
from envkit.engine.protocol import ImageInfo
from envkit.errors import VerificationError

from tests.unit.lockfixtures import make_image
from tests.unit.payload_modules import payload_module
from envkit.frameworks import expected

WHEN = "2025-06-01T12:00:00Z"
EXPECT = expected(make_image())  # torch 2.5.1, CUDA 12.4, cuDNN 9.1.0.70, NCCL 2.21.5, sm_50..sm_90, floor 525.60.13
STATIC = ("python_version", "torch_version", "cuda_runtime", "cudnn_version", "nccl_version", "arch_list",
          "pip_check", "cpu_train_step", "dataloader_cpu")
H200 = {"index": 0, "name": "NVIDIA H200", "cc": "9.0", "memory_gib": 139.8}
B200 = {"index": 0, "name": "NVIDIA B200", "cc": "10.0", "memory_gib": 178.4}


def check(name, status="passed", message="ok", value=None, expected=None, seconds=0.25):
    return {"name": name, "status": status, "value": value, "expected": expected, "message": message,
            "seconds": seconds}


def gpu_doc(gpus=(H200,), driver="570.124.06", **facts):
    """What the payload prints in certify mode on a healthy GPU host (facts overridable)."""
    base = {"python": "3.11.2", "torch": "2.5.1+cu124", "cuda": "12.4", "cudnn": "9.1.0", "nccl": "2.21.5",
            "arch_list": list(EXPECT["arch_list"]), "gpus": [dict(g) for g in gpus], "driver": driver}
    base.update(facts)
    samples = [{"t": round(0.2 * i, 3), "gpu": g["index"], "util_pct": min(100, 10 * i), "mem_used_mib": 1000.0 + 50 * i,
                "power_w": 100.0 + 20 * i, "temp_c": 40 + i,
                "clock_event_reasons": ["sw_power_cap"] if i == 5 else []} for i in range(12) for g in gpus]
    return {"schema": "envkit.payload/1", "payload": {"version": "1", "sha256": "f" * 64}, "mode": "certify",
            "status": "certified", "facts": base,
            "checks": [check(n) for n in STATIC] + [check(n) for n in GPU_CHECKS],
            "telemetry": samples, "seconds": 42.5}


def cpu_doc(**facts):
    """What the payload prints in verify mode with no GPU visible."""
    doc = gpu_doc(gpus=(), driver=None, **facts)
    doc.update(mode="verify", status="verified", telemetry=[])
    doc["checks"] = [check(n) for n in STATIC] + [check(n, "skipped", "no CUDA device visible") for n in GPU_CHECKS]
    return doc


def set_check(doc, name, status, message="", **fields):
    doc = copy.deepcopy(doc)
    for c in doc["checks"]:
        if c["name"] == name:
            c.update(status=status, message=message, **fields)
    return doc


def build(doc, gpu_requested=True, expect=EXPECT):
    return certificate_from(doc, expect, image="vision/torch25:2.5.1-cu124-py3.11-abcd1234",
                            image_id="sha256:" + "e" * 64, lock_hash="sha256:" + "d" * 64,
                            gpu_requested=gpu_requested, created_at=WHEN, envkit_version="0.1.0")


# ------------------------------------------------------------------------- outcomes
def test_certified_on_h200_with_every_gpu_check_passed():
    status, reasons = decide(gpu_doc(), EXPECT, gpu_requested=True)
    assert (status, reasons) == ("certified", ())
    cert = build(gpu_doc())
    assert cert.status == "certified" and cert.reasons == ()
    assert cert.gpu_model == "NVIDIA H200" and cert.driver == "570.124.06" and cert.gpu_count == 1
    assert cert.key == ("sha256:" + "e" * 64, "NVIDIA H200", "570.124.06")


@pytest.mark.parametrize("fact, value, words", [
    ("cudnn", "8.9.7", ["cuDNN", "9.1.0.70", "8.9.7"]),
    ("nccl", "2.20.5", ["NCCL", "2.21.5", "2.20.5"]),
    ("cuda", "12.1", ["CUDA", "12.4", "12.1"]),
    ("torch", "2.4.1+cu124", ["torch", "2.5.1", "2.4.1+cu124"]),
    ("cuda", None, ["CUDA", "12.4", "none"]),
])
def test_failed_when_the_image_libraries_differ_from_the_lock(fact, value, words):
    # The payload's own checks are left "passed": the host must catch the mismatch from the facts.
    status, reasons = decide(gpu_doc(**{fact: value}), EXPECT, gpu_requested=True)
    assert status == "failed"
    assert any(all(w in r for w in words) for r in reasons), reasons


def test_cudnn_compared_on_three_components_and_torch_ignores_local_tag():
    doc = gpu_doc(cudnn="9.1.0", torch="2.5.1+cu124")  # lock says 9.1.0.70 and 2.5.1
    assert decide(doc, EXPECT, gpu_requested=True) == ("certified", ())
    assert decide(gpu_doc(cudnn="9.1.1"), EXPECT, gpu_requested=True)[0] == "failed"


def test_failed_when_the_arch_list_has_no_kernels_for_the_visible_gpu():
    status, reasons = decide(gpu_doc(gpus=(B200,)), EXPECT, gpu_requested=True)
    assert status == "failed"
    assert f"arch list {' '.join(EXPECT['arch_list'])} has no kernels for NVIDIA B200 (cc 10.0)" in reasons


def test_ptx_in_the_arch_list_covers_a_newer_gpu():
    arches = [*EXPECT["arch_list"], "compute_90"]
    doc = gpu_doc(gpus=(B200,), arch_list=arches)
    assert decide(doc, {**EXPECT, "arch_list": arches}, gpu_requested=True) == ("certified", ())


def test_failed_when_the_compiled_arch_list_differs_from_the_lock():
    status, reasons = decide(gpu_doc(arch_list=["sm_80", "sm_90"]), EXPECT, gpu_requested=True)
    assert status == "failed" and any("arch list" in r and "sm_80 sm_90" in r for r in reasons)


@pytest.mark.parametrize("driver, ok", [("470.256.02", False), ("525.60.12", False), ("525.60.13", True),
                                        ("525.105.17", True), ("580", True)])
def test_driver_floor(driver, ok):
    status, reasons = decide(gpu_doc(driver=driver), EXPECT, gpu_requested=True)
    if ok:
        assert status == "certified"
    else:
        assert status == "failed"
        assert f"driver {driver} is below the lock's driver floor 525.60.13" in reasons


def test_verified_with_no_gpu_and_gpu_checks_skipped():
    cert = build(cpu_doc(), gpu_requested=False)
    assert (cert.status, cert.reasons) == ("verified", ())
    assert cert.gpu_model == "none" and cert.driver == "none" and cert.telemetry == ()
    assert all(c.status == "skipped" for c in cert.checks if c.name in GPU_CHECKS)


def test_failed_when_a_gpu_check_claims_passed_with_no_gpu():
    doc = set_check(cpu_doc(), "cuda_train_step", "passed", "loss fell")
    doc["status"] = "verified"  # what a lying or buggy payload would say
    status, reasons = decide(doc, EXPECT, gpu_requested=False)
    assert status == "failed"
    assert "claims GPU check cuda_train_step passed with no GPU visible" in reasons


def test_failed_when_a_gpu_was_requested_but_none_is_visible():
    # certify mode on a host where the container sees no device: the payload fails cuda_available.
    doc = set_check(cpu_doc(), "cuda_available", "failed",
                    "certify mode requested but no CUDA device visible (torch.cuda.is_available() is False)")
    doc.update(mode="certify", status="failed")
    status, reasons = decide(doc, EXPECT, gpu_requested=True)
    assert status == "failed" and NO_GPU_REQUESTED in reasons
    # Even a document that claims to be a clean verify run fails when a GPU was asked for.
    assert decide(cpu_doc(), EXPECT, gpu_requested=True) == ("failed", (NO_GPU_REQUESTED,))


def test_driver_probe_may_pass_without_a_cuda_device_in_certify_mode():
    doc = set_check(cpu_doc(), "nvidia_smi", "passed", "driver 570.124.06 (via nvidia-smi)")
    doc = set_check(doc, "cuda_available", "failed", "certify mode requested but no CUDA device visible")
    doc["mode"] = "certify"
    _, reasons = decide(doc, EXPECT, gpu_requested=True)
    assert not any("nvidia_smi" in r for r in reasons)


def test_a_failed_check_fails_the_certificate_with_its_message():
    doc = set_check(gpu_doc(), "dataloader", "failed", "/dev/shm is 64 MiB; run with --shm-size=8g or --ipc=host")
    doc["status"] = "certified"  # the host does not copy the payload's status
    status, reasons = decide(doc, EXPECT, gpu_requested=True)
    assert status == "failed"
    assert reasons == ("check dataloader failed: /dev/shm is 64 MiB; run with --shm-size=8g or --ipc=host",)


def test_gpu_visible_but_train_step_skipped_is_not_certified():
    doc = set_check(gpu_doc(), "cuda_train_step", "skipped", "no CUDA device visible")
    status, reasons = decide(doc, EXPECT, gpu_requested=True)
    assert status == "failed" and any("cuda_train_step did not pass (skipped)" in r for r in reasons)


def test_payload_failed_status_is_never_upgraded():
    doc = gpu_doc()
    doc["status"] = "failed"
    assert decide(doc, EXPECT, gpu_requested=True)[0] == "failed"


def test_wrong_schema_fails():
    doc = gpu_doc()
    doc["schema"] = "something/2"
    assert decide(doc, EXPECT, gpu_requested=True)[0] == "failed"


def test_cpu_only_build_verifies_against_a_cpu_lock():
    expect = {**EXPECT, "cuda": None, "cudnn": None, "nccl": None, "arch_list": [], "driver_floor": None}
    doc = cpu_doc(cuda=None, cudnn=None, nccl=None, arch_list=None, torch="2.5.1+cpu")
    assert decide(doc, expect, gpu_requested=False) == ("verified", ())


def test_gpu_check_names_match_the_payload_registry():
    registry = payload_module("envkit_check_torch").REGISTRY
    assert tuple(name for name, _, gpu_only in registry if gpu_only) == GPU_CHECKS


# ------------------------------------------------------------- content and files
def test_telemetry_summary_per_gpu():
    second = {**H200, "index": 1}
    cert = build(gpu_doc(gpus=(H200, second)))
    assert [s.gpu for s in cert.telemetry_summary] == [0, 1]
    s = cert.telemetry_summary[0]
    assert (s.samples, s.max_util_pct, s.max_mem_used_mib, s.max_power_w, s.max_temp_c) == (12, 100, 1550.0, 320.0, 51)
    assert s.clock_event_reasons == ("sw_power_cap",)
    assert cert.gpu_model == "NVIDIA H200" and cert.gpu_count == 2


def test_telemetry_is_thinned_but_maxima_use_every_sample():
    doc = gpu_doc()
    doc["telemetry"] = [{"t": i * 0.2, "gpu": 0, "util_pct": 50, "mem_used_mib": 1.0, "power_w": 1.0 * i, "temp_c": 30,
                         "clock_event_reasons": []} for i in range(2000)]
    cert = build(doc)
    assert len(cert.telemetry) == C.MAX_SAMPLES_PER_GPU
    assert cert.telemetry[-1].t == pytest.approx(1999 * 0.2)
    assert cert.telemetry_summary[0].max_power_w == 1999.0 and cert.telemetry_summary[0].samples == 2000


def test_round_trip_to_bytes_and_back(tmp_path):
    cert = build(gpu_doc())
    data = cert.to_bytes()
    assert json.loads(data) == json.loads(json.dumps(json.loads(data), sort_keys=True))
    assert list(json.loads(data)) == sorted(json.loads(data))  # sorted keys
    path = tmp_path / "cert.json"
    path.write_bytes(data)
    again = load_certificate(path)
    assert again == cert and again.to_bytes() == data and again.key == cert.key


def test_certificate_is_frozen_and_strict():
    cert = build(gpu_doc())
    with pytest.raises(Exception):
        cert.status = "failed"
    body = json.loads(cert.to_bytes())
    body["surprise"] = 1
    with pytest.raises(VerificationError):
        parse_certificate(json.dumps(body))


def test_unknown_version_is_refused_with_a_hint(tmp_path):
    body = json.loads(build(gpu_doc()).to_bytes())
    body["version"] = 2
    path = tmp_path / "cert.json"
    path.write_text(json.dumps(body))
    with pytest.raises(VerificationError) as err:
        load_certificate(path)
    assert "unsupported certificate version 2" in err.value.message and err.value.hint
    with pytest.raises(VerificationError):
        load_certificate(tmp_path / "missing.json")
    path.write_text("{not json")
    with pytest.raises(VerificationError):
        load_certificate(path)


def test_created_at_must_be_utc():
    with pytest.raises(Exception):
        certificate_from(gpu_doc(), EXPECT, image="x", image_id="y", lock_hash="z", gpu_requested=True,
                         created_at="2025-06-01T12:00:00+02:00", envkit_version="0.1.0")


def test_certificate_label():
    assert certificate_label(build(gpu_doc())) == {"io.envkit.certified.nvidia-h200": "certified 570.124.06 2025-06-01"}
    assert certificate_label(build(cpu_doc(), gpu_requested=False)) == {"io.envkit.certified.none": "verified none 2025-06-01"}


# --------------------------------------------------------------- certify_image
class FakeEngine:
    """Only the engine: the payload document still goes through run_payload's parsing."""

    def __init__(self, doc):
        self.doc, self.runs = doc, []

    def inspect(self, ref):
        return ImageInfo(id="sha256:" + "a" * 64, tags=(ref,), size=1, labels={"io.envkit.lock-hash": "sha256:lockhash"},
                         env={}, user="envkit")

    def run(self, ref, command, options):
        from envkit.engine.protocol import RunResult

        self.runs.append((ref, command, options))
        return RunResult(exit_code=0, stdout=json.dumps(self.doc), stderr="")


def test_certify_image_runs_the_payload_in_certify_mode_with_gpus():
    engine = FakeEngine(gpu_doc())
    cert = certify_image(engine, "vision/torch25:tag", EXPECT, gpus=True, created_at=WHEN)
    ref, command, options = engine.runs[0]
    assert options.gpus is True and command[command.index("--mode") + 1] == "certify"
    # the container researchers' jobs get (`envkit run`): shared memory, and NCCL's locked memory and stack
    from envkit.engine.protocol import RUN_SHM_SIZE

    assert options.shm_size == RUN_SHM_SIZE and options.ulimits == {"memlock": -1, "stack": 67108864}
    assert cert.status == "certified" and cert.image_id == "sha256:" + "a" * 64 and cert.lock_hash == "sha256:lockhash"
    assert cert.created_at == WHEN and cert.image == "vision/torch25:tag"


def test_certify_image_without_gpus_verifies():
    engine = FakeEngine(cpu_doc())
    cert = certify_image(engine, "vision/torch25:tag", EXPECT, gpus=False, created_at=WHEN)
    assert engine.runs[0][1][engine.runs[0][1].index("--mode") + 1] == "verify"
    assert cert.status == "verified"


def test_certify_image_missing_image():
    engine = FakeEngine(cpu_doc())
    engine.inspect = lambda ref: None
    with pytest.raises(VerificationError):
        certify_image(engine, "nope:tag", EXPECT, gpus=False, created_at=WHEN)


def test_a_run_stopped_at_its_time_limit_says_so_and_not_that_every_later_fact_is_missing():
    """The payload's watchdog reports what finished and a failed ``timeout`` check; the facts it never gathered
    are not mismatches ("the lock expects 2.5.1 but the image has none" was each a false reason)."""
    doc = cpu_doc()
    doc["facts"] = {"python": "3.11.2"}
    doc["checks"] = [check("python_version"), check("timeout", "failed", "payload exceeded --timeout 10 s",
                                                     value={"timeout_s": 10, "running": "torch_version"})]
    doc["status"] = "failed"
    status, reasons = decide(doc, EXPECT, gpu_requested=False)
    assert status == "failed" and not any("has none" in r for r in reasons)
    assert reasons[-1].startswith("the payload stopped at its time limit while running torch_version")
    assert "longer --timeout" in reasons[-1]


# --------------------------------------------------------------- pipeline.certify: where results go
@pytest.fixture
def certify_here(monkeypatch):
    """pipeline.certify against a fake engine (the payload document faked, the outcome computed)."""
    from envkit.app import certify as pipeline

    engine = FakeEngine(cpu_doc())
    monkeypatch.setattr(pipeline, "expectations",
                        lambda eng, ref, lock_path: (eng.inspect(ref), "sha256:lockhash", EXPECT))

    def go(out_dir, store_url):
        return pipeline.certify(engine, "vision/torch25:tag", lock_path=None, gpus=False, out_dir=out_dir,
                                store_url=str(store_url))
    return engine, go


def test_certify_writes_the_certificate_and_reports_as_one_set_then_the_store(certify_here, tmp_path):
    from envkit.store.history import Store

    engine, go = certify_here
    cert, paths = go(tmp_path / "r", tmp_path / "s.sqlite")
    assert cert.status == "verified"
    assert {k: p.name for k, p in paths.items()} == {"json": "report.json", "junit": "report.junit.xml",
                                                    "html": "report.html", "certificate": "certificate-cpu-only.json"}
    assert json.loads(paths["certificate"].read_text())["status"] == "verified"
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == sorted(p.name for p in paths.values())
    with Store.open_existing(str(tmp_path / "s.sqlite")) as store:
        assert [i[0] for i in store.images()] == ["sha256:" + "a" * 64]


@pytest.mark.parametrize("bad", ["out", "store"])
def test_certify_tries_its_output_and_its_store_before_the_payload_runs(certify_here, tmp_path, bad):
    """A path that cannot be used fails before minutes of payload, and leaves no certificate anywhere (it used to
    run the payload, record a certificate in the store, then fail writing the reports)."""
    from envkit.errors import StoreError

    engine, go = certify_here
    (tmp_path / "file").write_text("x")
    out, store = tmp_path / "r", tmp_path / "s.sqlite"
    if bad == "out":
        out = tmp_path / "file" / "r"
    else:
        store = "mysql://db/x"
    with pytest.raises(OSError if bad == "out" else StoreError) as err:
        go(out, store)
    assert engine.runs == []
    if bad == "out":
        assert str(tmp_path / "file") in str(err.value) and not (tmp_path / "s.sqlite").exists()
    else:
        assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_a_report_that_cannot_be_replaced_leaves_the_old_set_and_no_certificate_in_the_store(certify_here, tmp_path):
    from envkit.store.history import Store

    engine, go = certify_here
    out = tmp_path / "r"
    out.mkdir()
    (out / "report.json").write_text("old\n")
    (out / "report.junit.xml").mkdir()  # a directory where a report goes: the rename refuses
    with pytest.raises(OSError) as err:
        go(out, tmp_path / "s.sqlite")
    assert str(out / "report.junit.xml") in str(err.value)  # the target, not a staged name beside it
    assert (out / "report.json").read_text() == "old\n"
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.junit.xml"]
    with Store.open_existing(str(tmp_path / "s.sqlite")) as store:
        assert list(store.images()) == []


def test_no_python_in_the_expectations_is_no_comparison_not_a_cpu_only_build():
    """An image without its Python pin label gives expect python None: nothing to compare (it read "the lock
    expects none (CPU-only build)"); a CUDA library found where the lock gives none is still refused."""
    status, reasons = decide(cpu_doc(), {**EXPECT, "python": None}, gpu_requested=False)
    assert (status, reasons) == ("verified", ())
    status, reasons = decide(cpu_doc(), {**EXPECT, "cuda": None}, gpu_requested=False)
    assert status == "failed" and any("CUDA runtime: the lock expects none (CPU-only build)" in r for r in reasons)


# ------------------------------------------------- verify: the payload's verdict judged again by the host
def _verify(doc, monkeypatch):
    from envkit.app import certify as pipeline

    engine = FakeEngine(doc)
    monkeypatch.setattr(pipeline, "expectations", lambda engine, ref, lock_path: (engine.inspect(ref), "h", EXPECT))
    return pipeline.verify_image(engine, "vision/torch25:tag")


def test_verify_keeps_a_healthy_verdict(monkeypatch):
    v = _verify(cpu_doc(), monkeypatch)
    assert (v.status, v.mismatches) == ("verified", [])


def test_verify_fails_a_document_the_host_cannot_accept(monkeypatch):
    """A payload that says verified while claiming a GPU check passed with no GPU (a broken or foreign payload
    in the image's place) is refused by verify as certify refuses it, with the host's reason."""
    v = _verify(set_check(cpu_doc(), "matmul_tflops", "passed", "fast"), monkeypatch)
    assert v.status == "failed" and v.mismatches == ["claims GPU check matmul_tflops passed with no GPU visible"]


def test_verify_lists_a_failed_check_once(monkeypatch):
    doc = set_check(cpu_doc(), "pip_check", "failed", "broken requirements")
    doc["status"] = "failed"
    v = _verify(doc, monkeypatch)
    assert v.status == "failed" and v.mismatches == ["pip_check: broken requirements"]


# ------------------------------------------ the catalog's performance floors (catalog/data/perf.yaml)
def _measured(doc, bf16, fp16=400.0):
    return set_check(doc, "matmul_tflops", "passed", "measured",
                     value={"bf16_matmul_tflops": bf16, "fp16_matmul_tflops": fp16})


def test_a_matmul_rate_below_the_catalogs_floor_for_the_model_fails_the_certificate():
    status, reasons = decide(_measured(gpu_doc(), 500.0, 600.0), EXPECT, gpu_requested=True)
    assert status == "failed" and len(reasons) == 1
    assert reasons[0].startswith("bf16_matmul_tflops 500 on NVIDIA H200 is below the catalog's floor 539 for that "
                                 "model (perf.yaml, from envkit_h200_2026_12_04)")


def test_rates_at_or_above_the_floor_and_models_without_one_pass():
    assert decide(_measured(gpu_doc(), 674.6, 653.3), EXPECT, gpu_requested=True) == ("certified", ())
    for other in (dict(H200, name="NVIDIA H100 80GB HBM3"), dict(H200, name="NVIDIA H200 NVL")):  # no floor (a variant
        # is not the model measured)
        assert decide(_measured(gpu_doc(gpus=(other,)), 100.0, 90.0), EXPECT, gpu_requested=True) == ("certified", ())
    assert decide(gpu_doc(), EXPECT, gpu_requested=True) == ("certified", ())  # nothing measured: nothing compared


def test_the_locks_own_floor_replaces_the_catalogs_for_its_key():
    expect = {**EXPECT, "perf_floors": {"bf16_matmul_tflops": 400}}
    assert decide(_measured(gpu_doc(), 500.0, 600.0), expect, gpu_requested=True) == ("certified", ())
    status, reasons = decide(_measured(gpu_doc(), 500.0, 450.0), expect, gpu_requested=True)  # fp16: still 516
    assert status == "failed" and reasons[0].startswith("fp16_matmul_tflops 450 on NVIDIA H200")


def test_the_floors_file_is_checked_and_a_team_catalog_may_bring_its_own(tmp_path, monkeypatch):
    from envkit.catalog import perf
    from envkit.errors import CatalogError

    assert perf.load_perf().floors[0].models == ("H200",)
    bad = tmp_path / "perf.yaml"
    bad.write_text("version: 1\nsources: {s: x}\nfloors:\n  - {models: [H200], bf16_matmul_tflops: -5, "
                   "verified: true, sources: [s]}\n")
    with pytest.raises(CatalogError) as err:
        perf.load_perf(bad)
    assert str(bad) in err.value.message and "floors.0.bf16_matmul_tflops" in err.value.message
    assert "positive, finite" in err.value.message
    bad.write_text("version: 1\nsources: {}\nfloors:\n  - {models: [H200], verified: true, sources: [nowhere]}\n")
    with pytest.raises(CatalogError, match="unknown sources: nowhere"):
        perf.load_perf(bad)

    team = tmp_path / "team-catalog"
    team.mkdir()
    monkeypatch.setenv("ENVKIT_CATALOG", str(team))
    assert perf.floors_for("NVIDIA H200")[0]["bf16_matmul_tflops"] == 539  # no perf.yaml there: envkit's own
    (team / "perf.yaml").write_text("version: 1\nsources: {ours: our own runs}\nfloors:\n"
                                    "  - {models: [H200], bf16_matmul_tflops: 650, verified: true, sources: [ours]}\n")
    assert perf.floors_for("nvidia h200") == ({"bf16_matmul_tflops": 650}, ("ours",))
