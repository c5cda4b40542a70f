"""Unit tests of the certification payload, envkit/certify/payload/envkit_check.py.

The payload runs inside images with only the standard library and torch, so it is
exercised here the same way: as a subprocess (``python envkit_check.py --json``)
against the host's CPU torch, and imported by path for its pure helpers.
Every subprocess runs with CUDA_VISIBLE_DEVICES="" so that results do not depend
on whether the test host has a GPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

torch = pytest.importorskip("torch")

PAYLOAD = Path(__file__).resolve().parents[2] / "envkit" / "certify" / "payload" / "envkit_check.py"
NO_CUDA_ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"}
# GPU-only checks that need no CUDA device to do their job (driver probe, the availability verdict, NVML).
DEVICELESS_GPU_CHECKS = {"nvidia_smi", "cuda_available", "telemetry"}


@pytest.fixture(scope="module")
def payload():
    spec = importlib.util.spec_from_file_location("envkit_check", PAYLOAD)
    module = importlib.util.module_from_spec(spec)
    sys.modules["envkit_check"] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("envkit_check", None)


def matching_expect() -> Dict[str, Any]:
    """An expect document that the host's torch satisfies."""
    expect: Dict[str, Any] = {"torch": str(torch.__version__).split("+")[0],
                              "python": f"{sys.version_info.major}.{sys.version_info.minor}",
                              "cuda": torch.version.cuda}
    if torch.version.cuda is None:
        expect.update(cudnn=None, nccl=None, arch_list=None)
    return expect


@dataclasses.dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    @property
    def doc(self) -> Dict[str, Any]:
        return json.loads(self.stdout)

    def checks(self) -> Dict[str, Dict[str, Any]]:
        return {c["name"]: c for c in self.doc["checks"]}


def run_payload(*args: str, timeout: float = 30) -> Run:
    proc = subprocess.run([sys.executable, str(PAYLOAD), *args], capture_output=True, text=True,
                          env=NO_CUDA_ENV, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Dict[str, Run]:
    """Every full payload run the tests need, started together (each spends seconds importing torch)."""
    folder = tmp_path_factory.mktemp("payload")
    good, wrong = folder / "good.json", folder / "wrong.json"
    good.write_text(json.dumps(matching_expect()))
    wrong.write_text(json.dumps({**matching_expect(), "torch": "1.0.0"}))
    scenarios = {
        "verify": ["--json", "--expect", str(good)],
        "wrong_torch": ["--json", "--mode", "verify", "--expect", str(wrong)],
        "certify": ["--json", "--mode", "certify", "--expect", str(good)],
        "table": ["--expect", str(good)],
        "timeout": ["--json", "--timeout", "0.3"],
    }
    procs = {name: subprocess.Popen([sys.executable, str(PAYLOAD), *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=NO_CUDA_ENV)
             for name, args in scenarios.items()}
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        done[name] = Run(proc.returncode, out, err)
    return done


def host_caused_failures(run: Run) -> set:
    """Failures that come from this host's environment, confirmed independently of the payload."""
    checks, caused = run.checks(), set()
    if checks["pip_check"]["status"] == "failed":
        host = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
        assert host.returncode != 0, checks["pip_check"]["message"]
        caused.add("pip_check")
    if checks["dataloader_cpu"]["status"] == "failed":
        st = os.statvfs("/dev/shm")
        assert st.f_frsize * st.f_blocks < 512 * 2**20, checks["dataloader_cpu"]["message"]
        caused.add("dataloader_cpu")
    return caused


# ----------------------------------------------------------------- full runs
def test_verify_mode_on_cpu_torch(runs, payload):
    run = runs["verify"]
    doc, checks = run.doc, run.checks()
    assert doc["mode"] == "verify"
    assert [c["name"] for c in doc["checks"]] == [name for name, _, _ in payload.REGISTRY]
    for name, _, gpu_only in payload.REGISTRY:
        if gpu_only:
            assert checks[name]["status"] == "skipped", checks[name]
            assert checks[name]["message"] == "no CUDA device visible"
    assert checks["cpu_train_step"]["status"] == "passed", checks["cpu_train_step"]
    value = checks["cpu_train_step"]["value"]
    assert value["last_loss"] <= 0.5 * value["first_loss"]
    for name in ("python_version", "torch_version", "cuda_runtime"):
        assert checks[name]["status"] == "passed", checks[name]
    failed = {c["name"] for c in doc["checks"] if c["status"] == "failed"}
    assert failed == host_caused_failures(run)
    if failed:
        assert (doc["status"], run.returncode) == ("failed", 1)
    else:
        assert (doc["status"], run.returncode) == ("verified", 0)
        assert checks["dataloader_cpu"]["status"] == "passed"
        assert checks["dataloader_cpu"]["value"]["batches"] == 8


def test_document_shape(runs):
    doc = runs["verify"].doc
    assert doc["schema"] == "envkit.payload/1"
    assert doc["payload"]["version"] == "1"
    assert set(doc) == {"schema", "payload", "mode", "status", "facts", "checks", "telemetry", "seconds"}
    assert set(doc["facts"]) == {"python", "torch", "cuda", "cudnn", "nccl", "arch_list", "gpus", "driver"}
    assert doc["facts"]["torch"] == str(torch.__version__)
    assert doc["facts"]["gpus"] == [] and doc["telemetry"] == []
    for c in doc["checks"]:
        assert set(c) == {"name", "status", "value", "expected", "message", "seconds"}
        assert c["status"] in ("passed", "failed", "skipped") and c["message"]
    assert doc["seconds"] > 0


def test_sha256_is_the_files(runs):
    assert runs["verify"].doc["payload"]["sha256"] == hashlib.sha256(PAYLOAD.read_bytes()).hexdigest()


def test_json_is_the_only_thing_on_stdout(runs):
    for name in ("verify", "wrong_torch", "certify", "timeout"):
        out = runs[name].stdout
        json.loads(out)  # raises on anything before or after the one document
        assert out.startswith("{") and out.endswith("}\n")


def test_wrong_torch_version_fails(runs):
    run = runs["wrong_torch"]
    assert (run.doc["status"], run.returncode) == ("failed", 1)
    check = run.checks()["torch_version"]
    assert check["status"] == "failed"
    assert check["expected"] == "1.0.0" and check["value"] == str(torch.__version__)
    assert "1.0.0" in check["message"] and str(torch.__version__) in check["message"]


def test_certify_without_gpu_fails_on_cuda_available(runs, payload):
    run = runs["certify"]
    doc, checks = run.doc, run.checks()
    assert (doc["mode"], doc["status"], run.returncode) == ("certify", "failed", 1)
    assert checks["cuda_available"]["status"] == "failed"
    assert "certify mode requested" in checks["cuda_available"]["message"]
    assert checks["cuda_available"]["value"] == {"available": False, "device_count": 0}
    for name, _, gpu_only in payload.REGISTRY:
        if gpu_only and name not in DEVICELESS_GPU_CHECKS:
            assert (checks[name]["status"], checks[name]["message"]) == ("skipped", "no CUDA device visible")


def test_table_output(runs, payload):
    run = runs["table"]
    assert run.returncode in (0, 1)
    lines = run.stdout.splitlines()
    assert "mode verify" in lines[0] and ("VERIFIED" in lines[0]) == (run.returncode == 0)
    assert any(line.startswith("CHECK") for line in lines)
    for name, _, _ in payload.REGISTRY:
        assert any(line.split()[:1] == [name] for line in lines), name


def test_watchdog_timeout_reports_failed_document(runs):
    run = runs["timeout"]
    doc = run.doc
    assert (doc["status"], run.returncode) == ("failed", 1)
    last = doc["checks"][-1]
    assert last["name"] == "timeout" and last["status"] == "failed"
    assert "--timeout 0.3" in last["message"]


@pytest.mark.parametrize("args", [["--mode", "bogus"], ["--expect", "/nonexistent/expect.json"], ["--steps", "0"],
                                  ["--timeout", "0"]])
def test_bad_usage_exits_2(args):
    run = run_payload("--json", *args)
    assert run.returncode == 2 and run.stdout == ""


def test_expect_must_be_an_object(tmp_path):
    bad = tmp_path / "expect.json"
    bad.write_text("[1, 2]")
    run = run_payload("--json", "--expect", str(bad))
    assert run.returncode == 2 and "JSON object" in run.stderr


# ------------------------------------------------------------- pure helpers
@pytest.mark.parametrize("encoded, text", [(8902, "8.9.2"), (8600, "8.6.0"), (7605, "7.6.5"), (90100, "9.1.0"),
                                           (90501, "9.5.1"), (91002, "9.10.2")])
def test_cudnn_int_decoding(payload, encoded, text):
    assert payload.decode_version_int(encoded) == text


def test_nccl_version_forms(payload):
    assert payload.nccl_version_str((2, 21, 5)) == "2.21.5"
    assert payload.nccl_version_str((2, 21, 5, "+cuda12.4")) == "2.21.5"
    assert payload.nccl_version_str(22105) == "2.21.5"
    assert payload.nccl_version_str(2708) == "2.7.8"
    assert payload.nccl_version_str(None) is None


@pytest.mark.parametrize("archs, cc, covered", [
    (["sm_80"], (8, 6), True),
    (["sm_80"], (9, 0), False),
    (["sm_86"], (8, 0), False),
    (["compute_90"], (10, 0), True),
    (["sm_90"], (10, 0), False),
    (["sm_90a"], (9, 0), True),
    (["compute_90a"], (10, 0), False),
    (["sm_100"], (10, 3), True),
    (["sm_120"], (12, 1), True),
    (["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"], (8, 9), True),
    ([], (8, 0), False),
    (["garbage", "compute_75"], (8, 6), True),
])
def test_arch_coverage_rule(payload, archs, cc, covered):
    assert payload.arch_covers(archs, cc) is covered


def test_parse_arch(payload):
    assert payload.parse_arch("sm_86") == ("sm", (8, 6), "")
    assert payload.parse_arch("compute_100a") == ("compute", (10, 0), "a")
    assert payload.parse_arch("sm_8") is None and payload.parse_arch("gfx90a") is None


def test_driver_comparison(payload):
    assert not payload.driver_meets("525.60.13", "550.54.15")
    assert payload.driver_meets("550.54.15", "525.60.13")
    assert payload.driver_meets("580.65.06", "580")
    assert not payload.driver_meets("580", "580.65.06")
    assert payload.driver_meets("580", "580.0.0")
    assert payload.driver_meets("1000.1", "999.99.99")  # numeric, not lexical


def test_same_version(payload):
    assert payload.same_version("12.4", "12.4.1", 2)
    assert payload.same_version("9.1.0", "9.1.0.70", 3)
    assert not payload.same_version("9.1.0", "9.1.1.17", 3)
    assert payload.same_version("3.11.7", "3.11", 2)


def test_clock_reason_decoding(payload):
    assert payload.decode_clock_reasons(0) == []
    assert payload.decode_clock_reasons(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert payload.decode_clock_reasons(0x100 | 0x80) == ["hw_power_brake_slowdown", "display_clock_setting"]


def test_overall_status_rule(payload):
    ok = payload.Check("passed", name="cuda_available")
    assert payload.overall_status("certify", [ok]) == "certified"
    assert payload.overall_status("certify", [payload.Check("skipped", name="cuda_available")]) == "failed"
    assert payload.overall_status("verify", [payload.Check("skipped", name="x")]) == "verified"
    assert payload.overall_status("certify", [ok, payload.Check("failed", name="x")]) == "failed"


# ---------------------------------------------------- checks called in-process
def make_ctx(payload, expect: Dict[str, Any], **facts: Any):
    base = {"python": "3.11.7", "torch": str(torch.__version__), "cuda": None, "cudnn": None, "nccl": None,
            "arch_list": None, "gpus": [], "driver": None}
    base.update(facts)
    return payload.Context(expect=expect, mode="verify", t0=0.0, torch=torch, facts=base)


def test_absent_expectations_skip_with_a_message(payload):
    ctx = make_ctx(payload, {})
    for fn in (payload.check_python, payload.check_torch, payload.check_cuda_runtime, payload.check_cudnn,
               payload.check_nccl_version, payload.check_arch_list):
        result = fn(ctx)
        assert result.status == "skipped" and "lock gives no" in result.message


def test_torch_local_suffix_ignored_but_reported(payload):
    public = str(torch.__version__).split("+")[0]
    result = payload.check_torch(make_ctx(payload, {"torch": public + "+cu124"}))
    assert result.status == "passed"
    if "+" in str(torch.__version__):
        assert "local build tag +" in result.message


@pytest.mark.parametrize("found, wanted, status", [
    ("9.1.0", "9.1.0.70", "passed"),
    ("9.1.1", "9.1.0.70", "failed"),
    (None, "9.1.0.70", "failed"),
    (None, None, "skipped"),
    ("8.9.2", None, "failed"),
])
def test_cudnn_check(payload, found, wanted, status):
    result = payload.check_cudnn(make_ctx(payload, {"cudnn": wanted}, cudnn=found))
    assert result.status == status
    assert result.message


def test_cuda_runtime_and_nccl_checks(payload):
    assert payload.check_cuda_runtime(make_ctx(payload, {"cuda": None})).status == "passed"
    assert payload.check_cuda_runtime(make_ctx(payload, {"cuda": "12.4"}, cuda="12.4")).status == "passed"
    failed = payload.check_cuda_runtime(make_ctx(payload, {"cuda": "12.4"}, cuda="12.1"))
    assert failed.status == "failed" and "12.1" in failed.message and "12.4" in failed.message
    assert payload.check_cuda_runtime(make_ctx(payload, {"cuda": "12.4"})).status == "failed"
    assert payload.check_nccl_version(make_ctx(payload, {"nccl": "2.21.5"}, nccl="2.21.5")).status == "passed"
    assert payload.check_nccl_version(make_ctx(payload, {"nccl": "2.21.5"}, nccl="2.20.5")).status == "failed"


def test_arch_list_compared_as_a_set(payload):
    archs = ["sm_80", "sm_90", "sm_50"]
    ok = payload.check_arch_list(make_ctx(payload, {"arch_list": archs}, arch_list=["sm_50", "sm_80", "sm_90"]))
    assert ok.status == "passed"
    bad = payload.check_arch_list(make_ctx(payload, {"arch_list": archs}, arch_list=["sm_80", "sm_90", "compute_90"]))
    assert bad.status == "failed" and "sm_50" in bad.message and "compute_90" in bad.message
    assert bad.value == ["sm_80", "sm_90", "compute_90"] and bad.expected == archs


def test_gpu_checks_skip_without_a_device(payload):
    ctx = make_ctx(payload, {})
    for name, fn, gpu_only in payload.REGISTRY:
        if gpu_only and name not in DEVICELESS_GPU_CHECKS:
            result = fn(ctx)
            assert (result.status, result.message) == ("skipped", "no CUDA device visible"), name
    assert payload.check_cuda_available(ctx).status == "failed"
    assert payload.check_telemetry(ctx).status == "skipped"


def test_driver_floor_through_nvidia_smi(payload, monkeypatch):
    monkeypatch.setattr(payload.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(payload, "query_nvidia_smi", lambda exe: [
        {"index": "0", "name": "NVIDIA H100", "driver_version": "525.60.13", "memory.total": "81559",
         "compute_cap": "9.0"}])
    old = payload.check_nvidia_smi(make_ctx(payload, {"driver_floor": "550.54.15"}))
    assert old.status == "failed" and "525.60.13" in old.message and "550.54.15" in old.message
    ctx = make_ctx(payload, {"driver_floor": "525"})
    assert payload.check_nvidia_smi(ctx).status == "passed"
    assert ctx.facts["driver"] == "525.60.13"


def test_no_driver_at_all_fails(payload, monkeypatch):
    monkeypatch.setattr(payload.shutil, "which", lambda name: None)
    monkeypatch.setattr(payload.Nvml, "load", classmethod(lambda cls: None))
    result = payload.check_nvidia_smi(make_ctx(payload, {}))
    assert result.status == "failed" and "no NVIDIA driver" in result.message


def test_small_shm_fails_with_the_fix(payload, monkeypatch):
    monkeypatch.setattr(payload, "shm_mib", lambda path="/dev/shm": 64.0)
    monkeypatch.setattr(payload, "loader_roundtrip", lambda *a: {"batches": 8, "samples": 512, "pinned": None,
                                                                 "intact": True})
    result = payload.check_dataloader_cpu(make_ctx(payload, {}))
    assert result.status == "failed" and "--shm-size=8g or --ipc=host" in result.message


def test_worker_bus_error_fails_with_the_fix(payload, monkeypatch):
    def crash(*args):
        raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that "
                           "dataloader's workers are out of shared memory.")
    monkeypatch.setattr(payload, "loader_roundtrip", crash)
    result = payload.check_dataloader_cpu(make_ctx(payload, {}))
    assert result.status == "failed" and "--shm-size=8g or --ipc=host" in result.message


def test_perf_floors(payload):
    ctx = make_ctx(payload, {"perf_floors": {"bf16_matmul_tflops": 600}})
    assert payload.floor_check(ctx, {"bf16_matmul_tflops": 650.0, "fp16_matmul_tflops": 640.0}, "m", "t").status == "passed"
    low = payload.floor_check(ctx, {"bf16_matmul_tflops": 420.5}, "matmul", "t")
    assert low.status == "failed" and "420.5" in low.message and low.expected == {"bf16_matmul_tflops": 600}
    assert "no floors" in payload.floor_check(make_ctx(payload, {}), {"x": 1}, "m", "t").message


def test_amp_train_loop_runs_on_cpu(payload):
    """The CUDA train step's loop (checkpointing, autocast, accumulation), shrunk and run on CPU."""
    value = payload.amp_train(torch, torch.device("cpu"), torch.bfloat16, steps=6, width=32)
    assert value["dtype"] == "bfloat16" and value["steps"] == 6 and value["micro_batches"] == 4
    assert value["last_loss"] < value["first_loss"]


def test_allreduce_plumbing_with_gloo(payload, monkeypatch):
    """The NCCL check's spawn/TCP-store/sum logic, with the gloo backend on CPU."""
    monkeypatch.syspath_prepend(str(PAYLOAD.parent))  # spawned ranks import the payload by name
    reports: List[Dict[str, Any]] = payload.run_allreduce(2, "gloo", 1 << 12, 2, timeout=60)
    assert [r["rank"] for r in reports] == [0, 1]
    assert all(r["correct"] and r["seconds"] >= 0 for r in reports)
