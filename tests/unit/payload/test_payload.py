"""Unit tests of the certification payload, the directory envkit/payload/envkit_check/
(its core, NVML, runner and PyTorch modules here; JAX and TensorFlow: test_payload_jax/_tf.py).

The payload runs inside images with only the standard library and torch, so it is
exercised here the same way: as a subprocess (``python envkit_check --json``)
against the host's CPU torch, and its modules imported by name for their helpers.
Every subprocess runs with CUDA_VISIBLE_DEVICES="" so that results do not depend
on whether the test host has a GPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from envkit.payload import contents
from tests.unit.payload_modules import PAYLOAD_DIR, payload_module

torch = pytest.importorskip("torch")

PAYLOAD = PAYLOAD_DIR  # run as `python3 PAYLOAD`, as images run /opt/envkit/envkit_check
core, nvml, runner = (payload_module(f"envkit_check_{m}") for m in ("core", "nvml", "main"))
tmod, tcuda = payload_module("envkit_check_torch"), payload_module("envkit_check_torch_cuda")
NO_CUDA_ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"}
# GPU-only checks that need no CUDA device to do their job (driver probe, the availability verdict, NVML).
DEVICELESS_GPU_CHECKS = {"nvidia_smi", "cuda_available", "telemetry"}


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
def test_verify_mode_on_cpu_torch(runs):
    run = runs["verify"]
    doc, checks = run.doc, run.checks()
    assert doc["mode"] == "verify"
    assert [c["name"] for c in doc["checks"]] == [name for name, _, _ in tmod.REGISTRY]
    for name, _, gpu_only in tmod.REGISTRY:
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
    assert doc["payload"]["version"] == core.PAYLOAD_VERSION == "2"
    assert set(doc) == {"schema", "payload", "mode", "status", "facts", "checks", "telemetry", "seconds"}
    assert set(doc["facts"]) == {"python", "torch", "cuda", "cudnn", "nccl", "arch_list", "gpus", "driver"}
    assert doc["facts"]["torch"] == str(torch.__version__)
    assert doc["facts"]["gpus"] == [] and doc["telemetry"] == []
    for c in doc["checks"]:
        assert set(c) == {"name", "status", "value", "expected", "message", "seconds"}
        assert c["status"] in ("passed", "failed", "skipped") and c["message"]
    assert doc["seconds"] > 0


def payload_identity(directory: Path) -> str:
    """docs/payload.md's rule, written out: sha256 over the *.py files in name order, each fed as its
    name, a NUL byte and the sha256 digest of its bytes."""
    h = hashlib.sha256()
    for path in sorted(directory.glob("*.py"), key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def test_sha256_is_the_files(runs):
    reported = runs["verify"].doc["payload"]["sha256"]
    assert reported == payload_identity(PAYLOAD_DIR) == contents.payload_sha256() == core.payload_sha256()
    assert set(contents.payload_files()) == {p.name for p in PAYLOAD_DIR.glob("*.py")}


def test_sha256_covers_every_module_and_nothing_else(tmp_path):
    """A copy hashes the same; byte-compiled files and other files beside the modules do not count;
    a change to any module, or a module added, changes it."""
    copy = tmp_path / "envkit_check"
    shutil.copytree(PAYLOAD_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "envkit_check_core.cpython-311.pyc").write_bytes(b"\0")
    (copy / "notes.txt").write_text("not part of the payload")
    assert core.payload_sha256(str(copy)) == payload_identity(PAYLOAD_DIR)
    with open(copy / "envkit_check_tf.py", "a") as f:
        f.write("\n")
    changed = core.payload_sha256(str(copy))
    assert changed != payload_identity(PAYLOAD_DIR)
    (copy / "envkit_check_extra.py").write_text("")
    assert core.payload_sha256(str(copy)) not in (changed, payload_identity(PAYLOAD_DIR))


def test_module_names_cannot_shadow_what_an_image_imports():
    """The payload's directory goes first on sys.path when it runs: only __main__.py and envkit_check_* there."""
    names = {p.name for p in PAYLOAD_DIR.iterdir() if p.name != "__pycache__"}
    assert "__main__.py" in names
    assert all(n == "__main__.py" or (n.startswith("envkit_check_") and n.endswith(".py")) for n in names), names


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


def test_certify_without_gpu_fails_on_cuda_available(runs):
    run = runs["certify"]
    doc, checks = run.doc, run.checks()
    assert (doc["mode"], doc["status"], run.returncode) == ("certify", "failed", 1)
    assert checks["cuda_available"]["status"] == "failed"
    assert "certify mode requested" in checks["cuda_available"]["message"]
    assert checks["cuda_available"]["value"] == {"available": False, "device_count": 0}
    for name, _, gpu_only in tmod.REGISTRY:
        if gpu_only and name not in DEVICELESS_GPU_CHECKS:
            assert (checks[name]["status"], checks[name]["message"]) == ("skipped", "no CUDA device visible")


def test_table_output(runs):
    run = runs["table"]
    assert run.returncode in (0, 1)
    lines = run.stdout.splitlines()
    assert "mode verify" in lines[0] and ("VERIFIED" in lines[0]) == (run.returncode == 0)
    assert any(line.startswith("CHECK") for line in lines)
    for name, _, _ in tmod.REGISTRY:
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
def test_cudnn_int_decoding(encoded, text):
    assert tmod.decode_version_int(encoded) == text


def test_nccl_version_forms():
    assert tmod.nccl_version_str((2, 21, 5)) == "2.21.5"
    assert tmod.nccl_version_str((2, 21, 5, "+cuda12.4")) == "2.21.5"
    assert tmod.nccl_version_str(22105) == "2.21.5"
    assert tmod.nccl_version_str(2708) == "2.7.8"
    assert tmod.nccl_version_str(None) is None


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
def test_arch_coverage_rule(archs, cc, covered):
    assert core.arch_covers(archs, cc) is covered


def test_parse_arch():
    assert core.parse_arch("sm_86") == ("sm", (8, 6), "")
    assert core.parse_arch("compute_100a") == ("compute", (10, 0), "a")
    assert core.parse_arch("sm_8") is None and core.parse_arch("gfx90a") is None


def test_driver_comparison():
    assert not core.driver_meets("525.60.13", "550.54.15")
    assert core.driver_meets("550.54.15", "525.60.13")
    assert core.driver_meets("580.65.06", "580")
    assert not core.driver_meets("580", "580.65.06")
    assert core.driver_meets("580", "580.0.0")
    assert core.driver_meets("1000.1", "999.99.99")  # numeric, not lexical


def test_same_version():
    assert core.same_version("12.4", "12.4.1", 2)
    assert core.same_version("9.1.0", "9.1.0.70", 3)
    assert not core.same_version("9.1.0", "9.1.1.17", 3)
    assert core.same_version("3.11.7", "3.11", 2)


def test_clock_reason_decoding():
    assert nvml.decode_clock_reasons(0) == []
    assert nvml.decode_clock_reasons(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert nvml.decode_clock_reasons(0x100 | 0x80) == ["hw_power_brake_slowdown", "display_clock_setting"]


def test_overall_status_rule():
    ok = core.Check("passed", name="cuda_available")
    assert runner.overall_status("certify", [ok]) == "certified"
    assert runner.overall_status("certify", [core.Check("skipped", name="cuda_available")]) == "failed"
    assert runner.overall_status("verify", [core.Check("skipped", name="x")]) == "verified"
    assert runner.overall_status("certify", [ok, core.Check("failed", name="x")]) == "failed"


# ---------------------------------------------------- checks called in-process
def make_ctx(expect: Dict[str, Any], **facts: Any):
    base = {"python": "3.11.7", "torch": str(torch.__version__), "cuda": None, "cudnn": None, "nccl": None,
            "arch_list": None, "gpus": [], "driver": None}
    base.update(facts)
    return core.Context(expect=expect, mode="verify", t0=0.0, torch=torch, facts=base)


def test_absent_expectations_skip_with_a_message():
    ctx = make_ctx({})
    for fn in (core.check_python, tmod.check_torch, tmod.check_cuda_runtime, tmod.check_cudnn,
               tmod.check_nccl_version, tmod.check_arch_list):
        result = fn(ctx)
        assert result.status == "skipped" and "lock gives no" in result.message


def test_torch_local_suffix_ignored_but_reported():
    public = str(torch.__version__).split("+")[0]
    result = tmod.check_torch(make_ctx({"torch": public + "+cu124"}))
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
def test_cudnn_check(found, wanted, status):
    result = tmod.check_cudnn(make_ctx({"cudnn": wanted}, cudnn=found))
    assert result.status == status
    assert result.message


def test_cuda_runtime_and_nccl_checks():
    assert tmod.check_cuda_runtime(make_ctx({"cuda": None})).status == "passed"
    assert tmod.check_cuda_runtime(make_ctx({"cuda": "12.4"}, cuda="12.4")).status == "passed"
    failed = tmod.check_cuda_runtime(make_ctx({"cuda": "12.4"}, cuda="12.1"))
    assert failed.status == "failed" and "12.1" in failed.message and "12.4" in failed.message
    assert tmod.check_cuda_runtime(make_ctx({"cuda": "12.4"})).status == "failed"
    assert tmod.check_nccl_version(make_ctx({"nccl": "2.21.5"}, nccl="2.21.5")).status == "passed"
    assert tmod.check_nccl_version(make_ctx({"nccl": "2.21.5"}, nccl="2.20.5")).status == "failed"


def test_arch_list_compared_as_a_set():
    archs = ["sm_80", "sm_90", "sm_50"]
    ok = tmod.check_arch_list(make_ctx({"arch_list": archs}, arch_list=["sm_50", "sm_80", "sm_90"]))
    assert ok.status == "passed"
    bad = tmod.check_arch_list(make_ctx({"arch_list": archs}, arch_list=["sm_80", "sm_90", "compute_90"]))
    assert bad.status == "failed" and "sm_50" in bad.message and "compute_90" in bad.message
    assert bad.value == ["sm_80", "sm_90", "compute_90"] and bad.expected == archs


def test_gpu_checks_skip_without_a_device():
    ctx = make_ctx({})
    for name, fn, gpu_only in tmod.REGISTRY:
        if gpu_only and name not in DEVICELESS_GPU_CHECKS:
            result = fn(ctx)
            assert (result.status, result.message) == ("skipped", "no CUDA device visible"), name
    assert tcuda.check_cuda_available(ctx).status == "failed"
    assert nvml.check_telemetry(ctx).status == "skipped"


def test_driver_floor_through_nvidia_smi(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(nvml, "query_nvidia_smi", lambda exe: [
        {"index": "0", "name": "NVIDIA H100", "driver_version": "525.60.13", "memory.total": "81559",
         "compute_cap": "9.0"}])
    old = nvml.check_nvidia_smi(make_ctx({"driver_floor": "550.54.15"}))
    assert old.status == "failed" and "525.60.13" in old.message and "550.54.15" in old.message
    ctx = make_ctx({"driver_floor": "525"})
    assert nvml.check_nvidia_smi(ctx).status == "passed"
    assert ctx.facts["driver"] == "525.60.13"


def test_no_driver_at_all_fails(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(nvml.Nvml, "load", classmethod(lambda cls: None))
    result = nvml.check_nvidia_smi(make_ctx({}))
    assert result.status == "failed" and "no NVIDIA driver" in result.message


def test_small_shm_fails_with_the_fix(monkeypatch):
    monkeypatch.setattr(tcuda, "shm_mib", lambda path="/dev/shm": 64.0)
    monkeypatch.setattr(tcuda, "loader_roundtrip", lambda *a: {"batches": 8, "samples": 512, "pinned": None,
                                                                 "intact": True})
    result = tmod.check_dataloader_cpu(make_ctx({}))
    assert result.status == "failed" and "--shm-size=8g or --ipc=host" in result.message


def test_worker_bus_error_fails_with_the_fix(monkeypatch):
    def crash(*args):
        raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Bus error. It is possible that "
                           "dataloader's workers are out of shared memory.")
    monkeypatch.setattr(tcuda, "loader_roundtrip", crash)
    result = tmod.check_dataloader_cpu(make_ctx({}))
    assert result.status == "failed" and "--shm-size=8g or --ipc=host" in result.message


def test_perf_floors():
    ctx = make_ctx({"perf_floors": {"bf16_matmul_tflops": 600}})
    assert core.floor_check(ctx, {"bf16_matmul_tflops": 650.0, "fp16_matmul_tflops": 640.0}, "m", "t").status == "passed"
    low = core.floor_check(ctx, {"bf16_matmul_tflops": 420.5}, "matmul", "t")
    assert low.status == "failed" and "420.5" in low.message and low.expected == {"bf16_matmul_tflops": 600}
    assert "no floors" in core.floor_check(make_ctx({}), {"x": 1}, "m", "t").message


def test_amp_train_loop_runs_on_cpu():
    """The CUDA train step's loop (checkpointing, autocast, accumulation), shrunk and run on CPU."""
    value = tcuda.amp_train(torch, torch.device("cpu"), torch.bfloat16, steps=6, width=32)
    assert value["dtype"] == "bfloat16" and value["steps"] == 6 and value["micro_batches"] == 4
    assert value["last_loss"] < value["first_loss"]


def test_allreduce_plumbing_with_gloo(monkeypatch):
    """The NCCL check's spawn/TCP-store/sum logic, with the gloo backend on CPU."""
    monkeypatch.syspath_prepend(str(PAYLOAD_DIR))  # spawned ranks import the payload's modules by name
    reports: List[Dict[str, Any]] = tcuda.run_allreduce(2, "gloo", 1 << 12, 2, timeout=60)
    assert [r["rank"] for r in reports] == [0, 1]
    assert all(r["correct"] and r["seconds"] >= 0 for r in reports)


def test_spawned_ranks_find_the_modules_when_the_payload_runs_as_a_directory(tmp_path):
    """As in an image: `python3 <dir>` (the directory first on sys.path, __main__ not re-run by spawn);
    the ranks torch.multiprocessing spawns import envkit_check_torch_cuda from the sys.path they inherit."""
    copy = tmp_path / "envkit_check"
    shutil.copytree(PAYLOAD_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "__main__.py").write_text("import json\nimport envkit_check_torch_cuda as c\n"
                                      "print(json.dumps(c.run_allreduce(2, 'gloo', 1 << 12, 2, timeout=60)))\n")
    proc = subprocess.run([sys.executable, str(copy)], capture_output=True, text=True, env=NO_CUDA_ENV, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [(r["rank"], r["correct"]) for r in reports] == [(0, True), (1, True)]


# ------------------------------------------- GPU code paths against fake devices
# These fake what a device *is* (clocks, memory, NVML readings, nvidia-smi output); the
# payload's own code decides what to measure and what to report.
class FakeGpu:
    """A device clock that kernels advance and events read; throughput is slow until clocks ramp up."""

    def __init__(self, flops: float, ramp_s: float = 0.1, ramp_factor: float = 0.4):
        self.now, self.flops, self.ramp_s, self.ramp_factor = 0.0, flops, ramp_s, ramp_factor

    def run(self, flop: float) -> None:
        self.now += flop / (self.flops * (self.ramp_factor if self.now < self.ramp_s else 1.0))


class FakeEvent:
    def __init__(self, gpu: FakeGpu):
        self.gpu, self.t, self.completed = gpu, None, False

    def record(self) -> None:
        self.t, self.completed = self.gpu.now, False

    def synchronize(self) -> None:
        self.completed = True

    def elapsed_time(self, end: "FakeEvent") -> float:
        if self.t is None or not end.completed:  # CUDA raises cudaErrorNotReady here
            raise RuntimeError("CUDA error: device not ready")
        return (end.t - self.t) * 1000.0


@dataclasses.dataclass
class FakeMatrix:
    n: int


def fake_matmul_torch(gpu: FakeGpu, cc=(9, 0), bf16_reported: bool = True):
    from types import SimpleNamespace

    def matmul(a, b, out=None):
        gpu.run(2 * a.n ** 3)
        return out

    cuda = SimpleNamespace(Event=lambda enable_timing=False: FakeEvent(gpu), synchronize=lambda *a: None,
                           get_device_capability=lambda index=0: cc,
                           is_bf16_supported=lambda *a, **k: bf16_reported)  # torch >= 2.3: True when emulated
    return SimpleNamespace(cuda=cuda, version=SimpleNamespace(cuda="12.4", hip=None), bfloat16="bf16",
                           float16="fp16", device=lambda *a: a, randn=lambda n, m, **k: FakeMatrix(n),
                           empty=lambda n, m, **k: FakeMatrix(n), matmul=matmul)


def gpu_ctx(fake_torch, expect=None):
    ctx = make_ctx(expect or {})
    ctx.torch, ctx.cuda_ok, ctx.mode = fake_torch, True, "certify"
    return ctx


def test_matmul_rate_is_measured_after_clocks_ramp_up():
    """A GPU slow for its first 0.1 s of work: the probe reports the steady 700 TFLOP/s, counting 2*n^3 flops."""
    result = tcuda.check_matmul(gpu_ctx(fake_matmul_torch(FakeGpu(700e12)),
                                          {"perf_floors": {"bf16_matmul_tflops": 632}}))
    assert result.status == "passed", result.message
    assert result.value["bf16_matmul_tflops"] == pytest.approx(700, rel=0.01)
    assert result.value["fp16_matmul_tflops"] == pytest.approx(700, rel=0.01)


def test_matmul_below_floor_fails():
    result = tcuda.check_matmul(gpu_ctx(fake_matmul_torch(FakeGpu(400e12)),
                                          {"perf_floors": {"bf16_matmul_tflops": 632}}))
    assert result.status == "failed" and "bf16_matmul_tflops 400.0 < floor 632" in result.message


def test_emulated_bf16_is_not_native():
    """torch >= 2.3 says is_bf16_supported() on a V100 (bf16 emulated): no bf16 probe, fp16 train step."""
    volta = fake_matmul_torch(FakeGpu(100e12), cc=(7, 0), bf16_reported=True)
    assert tcuda.bf16_native(volta) is False
    assert tcuda.bf16_native(fake_matmul_torch(FakeGpu(1e12), cc=(8, 0))) is True
    assert set(tcuda.check_matmul(gpu_ctx(volta)).value) == {"fp16_matmul_tflops"}


class FakeOutOfMemoryError(RuntimeError):
    pass


FakeOutOfMemoryError.__name__ = "OutOfMemoryError"


class FakeAllocator:
    """A caching allocator over `total` bytes: freed blocks stay cached (reserved) until empty_cache()."""

    def __init__(self, total: int, context: int, oversubscribe: bool = False):
        self.total, self.context, self.oversubscribe = total, context, oversubscribe
        self.in_use = self.cached = self.peak = 0

    def empty(self, size, dtype=None, device=None):
        if size > self.total - self.context - self.in_use and not self.oversubscribe:
            raise FakeOutOfMemoryError(f"CUDA out of memory. Tried to allocate {size / 2**30:.2f} GiB")
        allocator = self
        self.cached = max(0, self.cached - size)
        self.in_use += size
        self.peak = max(self.peak, self.in_use)

        class Block:
            def zero_(self):
                return self

            def __del__(self):
                allocator.in_use -= size
                allocator.cached += size
        return Block()

    def empty_cache(self):
        self.cached = 0

    def reset_peak(self, device=None):
        self.peak = self.in_use

    def torch(self):
        from types import SimpleNamespace
        cuda = SimpleNamespace(OutOfMemoryError=FakeOutOfMemoryError, synchronize=lambda *a: None,
                               get_device_properties=lambda d: SimpleNamespace(total_memory=self.total),
                               memory_allocated=lambda d=None: self.in_use,
                               memory_reserved=lambda d=None: self.in_use + self.cached,
                               max_memory_allocated=lambda d=None: self.peak, empty_cache=self.empty_cache,
                               reset_peak_memory_stats=self.reset_peak)
        return SimpleNamespace(cuda=cuda, device=lambda *a: a, uint8="uint8", empty=self.empty)


def test_memory_check_ooms_then_fits_and_leaves_nothing_cached():
    gib = 2**30
    alloc = FakeAllocator(total=141 * gib, context=gib)
    alloc.peak = 300 * 2**20  # the train step's, before the check
    result = tcuda.check_memory(gpu_ctx(alloc.torch()))
    assert result.status == "passed", result.message
    assert result.value["oom_raised"] is True
    assert result.value["fitted_mib"] == 141 * 1024 / 2  # 2x and 1x failed, the half fitted
    assert result.value["peak_mib"] == 300 and result.value["batch_peak_mib"] == 141 * 1024 / 2
    assert result.message.endswith("batch succeeded (the train step's peak: 300.0 MiB)")
    assert alloc.in_use == 0 and alloc.cached == 0  # later probes get the whole device back


def test_memory_check_fails_when_nothing_raises():
    alloc = FakeAllocator(total=2**30, context=0, oversubscribe=True)
    result = tcuda.check_memory(gpu_ctx(alloc.torch()))
    assert result.status == "failed" and "did not raise" in result.message


def test_arch_covered_against_device_capabilities():
    from types import SimpleNamespace
    cuda = SimpleNamespace(device_count=lambda: 2, get_device_name=lambda i: "NVIDIA H200",
                           get_device_capability=lambda i: (9, 0))
    ctx = gpu_ctx(SimpleNamespace(cuda=cuda))
    ctx.facts["arch_list"] = ["sm_80", "sm_90"]
    ok = tcuda.check_arch_covered(ctx)
    assert ok.status == "passed" and ok.value["devices"][1]["cc"] == "9.0"
    ctx.facts["arch_list"] = ["sm_80", "sm_86"]
    bad = tcuda.check_arch_covered(ctx)
    assert bad.status == "failed" and "device 1 (NVIDIA H200, cc 9.0)" in bad.message


def test_nccl_bus_bandwidth_formula(monkeypatch):
    """8 ranks, 256 MiB, 10 all-reduces in 20 ms on the slowest rank: nccl-tests' busbw = algbw * 2(n-1)/n."""
    from types import SimpleNamespace
    import torch.distributed as dist
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    monkeypatch.setattr(tcuda, "run_allreduce", lambda world, backend, numel, iters, timeout=180: [
        {"rank": r, "correct": True, "seconds": 0.02 if r == 3 else 0.019} for r in range(world)])
    ctx = gpu_ctx(SimpleNamespace(cuda=SimpleNamespace(device_count=lambda: 8)))
    result = tcuda.check_nccl_allreduce(ctx)
    size = 256 * 2**20
    assert result.status == "passed", result.message
    assert result.value["algbw_gbps"] == round(size * 10 / 0.02 / 1e9, 1)
    assert result.value["nccl_busbw_gbps"] == round(size * 10 / 0.02 / 1e9 * 2 * 7 / 8, 1)
    monkeypatch.setattr(tcuda, "run_allreduce", lambda world, *a, **k: [
        {"rank": r, "correct": r != 5, "seconds": 0.02} for r in range(world)])
    assert tcuda.check_nccl_allreduce(ctx).status == "failed"


def test_cleanup_error_after_a_gpu_check_does_not_stop_the_run():
    """A sticky CUDA error makes empty_cache() raise; the following checks must still run and report."""
    from types import SimpleNamespace
    calls: List[str] = []

    def empty_cache():
        calls.append("empty_cache")
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    ctx = gpu_ctx(SimpleNamespace(cuda=SimpleNamespace(empty_cache=empty_cache)))
    registry = [("first", lambda c: core.Check("passed", message="ok"), True),
                ("second", lambda c: core.Check("failed", message="bad"), True)]
    runner.run_checks(ctx, registry, tmod.release)  # torch's release: empty_cache() after each GPU check
    assert [(r.name, r.status) for r in ctx.results] == [("first", "passed"), ("second", "failed")]
    assert calls == ["empty_cache", "empty_cache"]


class FakeNvmlLib:
    """libnvidia-ml.so.1 as ctypes sees it: functions that fill their by-reference arguments, 0 = NVML_SUCCESS."""

    def __init__(self, supported: bool = True):
        self.rc = 0 if supported else 3  # NVML_ERROR_NOT_SUPPORTED

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        handle._obj.value = 0x1000 + index.value
        return 0

    def nvmlDeviceGetUtilizationRates(self, h, util):
        util._obj.gpu, util._obj.memory = 97, 40
        return self.rc

    def nvmlDeviceGetMemoryInfo(self, h, mem):
        mem._obj.total, mem._obj.used = 141 * 2**30, 1234 * 2**20
        return self.rc

    def nvmlDeviceGetPowerUsage(self, h, power):
        power._obj.value = 512300  # milliwatts
        return self.rc

    def nvmlDeviceGetTemperature(self, h, sensor, temp):
        temp._obj.value = 61 if sensor.value == 0 else 99  # NVML_TEMPERATURE_GPU = 0
        return self.rc

    def nvmlDeviceGetCurrentClocksEventReasons(self, h, mask):
        mask._obj.value = 0x4 | 0x1
        return self.rc


class OldDriverNvmlLib(FakeNvmlLib):
    """A driver before 535: only the ThrottleReasons name exists."""

    nvmlDeviceGetCurrentClocksEventReasons = None

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h, mask):
        mask._obj.value = 0x40
        return self.rc


def test_nvml_sample_units_and_reason_names():
    sample = nvml.Nvml(FakeNvmlLib()).sample(0, 1.23456)
    assert sample == {"t": 1.235, "gpu": 0, "util_pct": 97, "mem_used_mib": 1234.0, "power_w": 512.3, "temp_c": 61,
                      "clock_event_reasons": ["gpu_idle", "sw_power_cap"]}
    old = nvml.Nvml(OldDriverNvmlLib()).sample(1, 0.0)
    assert old["clock_event_reasons"] == ["hw_thermal_slowdown"]


def test_nvml_without_readings_gives_no_sample_and_telemetry_skips():
    binding = nvml.Nvml(FakeNvmlLib(supported=False))
    assert binding.sample(0, 0.0) is None
    binding.count = lambda: 1
    sampler = nvml.Sampler(binding, 0.0, period=0.01)
    sampler.start()
    sampler.halt.wait(0.05)
    ctx = make_ctx({})  # check_telemetry stops the sampler
    ctx.sampler = sampler
    assert nvml.check_telemetry(ctx).status == "skipped"


def test_sampler_survives_a_failing_nvml(monkeypatch):
    import threading
    import time
    crashes: List[Any] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: crashes.append(args.exc_value))

    class Broken:
        def count(self):
            raise AttributeError("nvmlDeviceGetCount_v2")  # an old libnvidia-ml lacking the symbol

    class Flaky:
        def count(self):
            return 2

        def sample(self, index, t):
            raise OSError("NVML_ERROR_GPU_IS_LOST")
    for binding in (Broken(), Flaky()):
        sampler = nvml.Sampler(binding, time.monotonic(), period=0.01)
        sampler.start()
        time.sleep(0.05)
        sampler.stop()
        assert not sampler.is_alive() and sampler.samples == []
    assert crashes == []


def test_nvidia_smi_query_retries_without_compute_cap(monkeypatch):
    calls: List[List[str]] = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        if "compute_cap" in cmd[1]:  # a driver before ~510
            return subprocess.CompletedProcess(cmd, 2, 'Field "compute_cap" is not a valid field to query.\n', "")
        return subprocess.CompletedProcess(cmd, 0, "0, NVIDIA H200, 570.86.15, 143771\n"
                                                   "1, NVIDIA H200, 570.86.15, 143771\n", "")
    monkeypatch.setattr(subprocess, "run", fake_run)
    gpus = nvml.query_nvidia_smi("/usr/bin/nvidia-smi")
    assert len(calls) == 2 and calls[0][2] == "--format=csv,noheader,nounits"
    assert gpus == [{"index": str(i), "name": "NVIDIA H200", "driver_version": "570.86.15", "memory.total": "143771"}
                    for i in (0, 1)]


# --- what the first GPU run needs to get right (a review before the H200 run) --------------------------------

def test_a_slow_first_warmup_window_does_not_end_the_warmup():
    """Lazy kernel loading can make one window take longer than the whole 0.3 s budget: 5 windows still run."""
    calls: List[float] = []

    def window() -> float:
        calls.append(1.0)
        return 1.0 if len(calls) == 1 else 0.001
    core.matmul_rate(window, n=1024, iters=10, windows=5, warmup_s=0.3)
    assert len(calls) == 5 + 5


def test_allreduce_timeout_stays_inside_the_watchdog():
    assert tcuda.allreduce_timeout(8, None) == 180 and tcuda.allreduce_timeout(1, None) == 45
    assert tcuda.allreduce_timeout(1, deadline=130.0, now=100.0) == 20  # 10 s left for the checks after it
    assert tcuda.allreduce_timeout(8, deadline=200.0, now=100.0) == 90
    assert tcuda.allreduce_timeout(2, deadline=101.0, now=100.0) == 5  # never below 5 s


def test_the_allreduce_gets_the_bounded_timeout(monkeypatch):
    import time
    from types import SimpleNamespace
    import torch.distributed as dist
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    seen = {}
    monkeypatch.setattr(tcuda, "run_allreduce", lambda world, backend, numel, iters, timeout=180: seen.update(
        timeout=timeout) or [{"rank": 0, "correct": True, "seconds": 0.01}])
    ctx = gpu_ctx(SimpleNamespace(cuda=SimpleNamespace(device_count=lambda: 1)))
    ctx.deadline = time.monotonic() + 40
    assert tcuda.check_nccl_allreduce(ctx).status == "passed"
    assert 25 < seen["timeout"] <= 30


def test_the_allreduce_runs_after_the_probes():
    """It starts processes and may hang: the matmul and copy probes report first."""
    names = [name for name, _, _ in tmod.REGISTRY]
    assert names.index("nccl_allreduce") > max(names.index("matmul_tflops"), names.index("h2d_d2h_bandwidth"))
    assert names[-1] == "telemetry"


class NoTemperatureNvmlLib(FakeNvmlLib):
    """A driver whose library lacks one function (NVIDIA deprecates nvmlDeviceGetTemperature for ...V)."""

    nvmlDeviceGetTemperature = None


def test_a_missing_nvml_function_loses_that_reading_only():
    sample = nvml.Nvml(NoTemperatureNvmlLib()).sample(0, 0.0)
    assert sample["temp_c"] is None and sample["power_w"] == 512.3 and sample["util_pct"] == 97


FAKE_NCCL = "int ncclGetVersion(int *version) { *version = 22105; return 0; }\n"


def test_the_nccl_version_is_the_loaded_librarys_not_torchs_build(tmp_path):
    """torch.cuda.nccl.version() is the NCCL torch was compiled against; the payload asks the libnccl.so.2 this
    process mapped (a stand-in built here answering 2.21.5) and uses torch's number only when none is mapped."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a stand-in libnccl.so.2")
    (tmp_path / "nccl.c").write_text(FAKE_NCCL)
    lib = tmp_path / "libnccl.so.2"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "nccl.c")], check=True, timeout=60)
    code = f"""
import ctypes, sys, types
sys.path.insert(0, {str(PAYLOAD_DIR)!r})
import envkit_check_torch as t
torch = types.SimpleNamespace(backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: None)),
                              cuda=types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (2, 20, 5)),
                                                         get_arch_list=lambda: []),
                              _C=types.SimpleNamespace())
print(t.read_library_versions(torch)["nccl"], t.loaded_nccl_version())
ctypes.CDLL({str(lib)!r}, mode=ctypes.RTLD_GLOBAL)  # as torch's libtorch_cuda.so loads it
print(t.read_library_versions(torch)["nccl"], t.loaded_library("libnccl.so") == {str(lib)!r})
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["2.20.5 None", "2.21.5 True"]
