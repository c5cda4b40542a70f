"""The payload's JAX path (envkit/payload/envkit_check/envkit_check_jax.py), without jax on the host.

jax is faked by its FACTS only: installed distributions (real ``*.dist-info`` directories read by
importlib.metadata), devices and their compute capability, what a train loop or a collective
returned, a device clock. Every verdict (version comparisons, the loss rule, coverage, floors,
timing, the status) is the payload's own code. The real jax runs in
tests/integration/test_jax.py, inside a built JAX image, GPU code paths included (on CPU devices).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

import pytest

from tests.unit.lockfixtures import make_jax_image
from tests.unit.payload_modules import PAYLOAD_DIR, payload_module
from envkit.frameworks import expected

PAYLOAD = PAYLOAD_DIR  # run as `python3 PAYLOAD`
core, runner, jaxm = (payload_module(f"envkit_check_{m}") for m in ("core", "main", "jax"))
nvml = payload_module("envkit_check_nvml")
EXPECT = expected(make_jax_image())  # what render writes to expect.json for a JAX image
HOST_EXPECT = {**EXPECT, "python": f"{sys.version_info.major}.{sys.version_info.minor}"}  # the fake runs on this Python
NO_GPU = "no CUDA device visible"
DISTS = {"jax": "0.12.0.1", "jaxlib": "0.12.0.1", "jax_cuda13_plugin": "0.12.0.1", "jax_cuda13_pjrt": "0.12.0.1",
         "nvidia_cuda_runtime": "13.5.37", "nvidia_cudnn_cu13": "9.28.1.4", "nvidia_nccl_cu13": "2.32.3",
         "nvidia_cublas": "13.10.0.20"}


# ------------------------------------------------------------- a fake JAX install
FAKE_JAX = '''
import logging
__version__ = "0.12.0.1"


class _Cpu:
    platform, device_kind, id = "cpu", "cpu", 0


def devices(kind=None):
    if kind == "gpu":
        raise RuntimeError("Unknown backend: 'gpu' requested, but no platforms that are instances of gpu are present")
    return [_Cpu()]


def default_backend():
    return "cpu"


def __getattr__(name):  # this fake holds facts only: it cannot compute
    raise AttributeError(f"the fake jax has no {name}")


# what the real jax logs when its CUDA plugin cannot initialise (no driver in the container)
logging.getLogger("jax._src.xla_bridge").warning(
    "Jax plugin configuration error: Exception when calling jax_plugins.xla_cuda13.initialize()",
    exc_info=RuntimeError("Unable to load cuPTI. Is it installed?"))
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A directory for PYTHONPATH: fake jax/jaxlib modules, the distributions' metadata, and a
    torch that fails loudly if the payload ever imports it in a JAX image."""
    root = tmp_path_factory.mktemp("jax-site")
    (root / "jax" / "_src").mkdir(parents=True)
    (root / "jax" / "__init__.py").write_text(FAKE_JAX)
    (root / "jax" / "_src" / "__init__.py").write_text("")
    (root / "jax" / "_src" / "xla_bridge.py").write_text(
        '_backend_errors = {"tpu": "no libtpu.so", "cuda": "no CUDA driver"}\n')
    (root / "jaxlib").mkdir()
    (root / "jaxlib" / "__init__.py").write_text("")
    (root / "jaxlib" / "version.py").write_text('__version__ = "0.12.0.1"\n')
    (root / "torch").mkdir()
    (root / "torch" / "__init__.py").write_text('raise ImportError("the payload imported torch in a JAX image")\n')
    for name, version in DISTS.items():
        info = root / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    return root


@dataclasses.dataclass
class Run:
    returncode: int
    doc: Dict[str, Any]
    stderr: str

    def checks(self) -> Dict[str, Dict[str, Any]]:
        return {c["name"]: c for c in self.doc["checks"]}


def run_jax_payload(site: Path, tmp_path: Path, expect: Dict[str, Any], *args: str) -> Run:
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(expect))
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, str(PAYLOAD), "--json", "--expect", str(path), *args],
                          capture_output=True, text=True, env=env, timeout=120)
    return Run(proc.returncode, json.loads(proc.stdout), proc.stderr)


def test_a_jax_image_runs_the_jax_checks_and_never_imports_torch(site, tmp_path):
    run = run_jax_payload(site, tmp_path, HOST_EXPECT)
    checks = run.checks()
    assert [c["name"] for c in run.doc["checks"]] == [name for name, _, _ in jaxm.REGISTRY]  # not "setup"
    assert run.doc["mode"] == "verify"
    assert run.doc["facts"] == {"framework": "jax", "python": run.doc["facts"]["python"], "jax": "0.12.0.1",
                                "jaxlib": "0.12.0.1", "cuda_plugin": "0.12.0.1", "cuda": "13.5.37",
                                "cudnn": "9.28.1.4", "nccl": "2.32.3", "backend": "cpu", "driver": None, "gpus": []}
    for name in ("python_version", "jax_version", "cuda_runtime", "cudnn_version", "nccl_version"):
        assert checks[name]["status"] == "passed", checks[name]
    assert "nvidia-cudnn" in checks["cudnn_version"]["message"]
    for name, _, gpu_only in jaxm.REGISTRY:
        if gpu_only:
            assert (checks[name]["status"], checks[name]["message"]) == ("skipped", NO_GPU), name
    # this fake jax cannot compute, so its train step raises and is reported (the real one: integration test)
    assert checks["cpu_train_step"]["status"] == "failed"
    assert checks["cpu_train_step"]["message"].startswith("check raised AttributeError")
    assert (run.doc["status"], run.returncode) == ("failed", 1)


def test_versions_are_compared_on_every_component(site, tmp_path):
    wrong = {**HOST_EXPECT, "cudnn": "9.28.1.5", "nccl": "2.32", "cuda_plugin": "0.12.0", "cuda": "13.5.36"}
    checks = run_jax_payload(site, tmp_path, wrong).checks()
    assert checks["cudnn_version"]["status"] == "failed" and "9.28.1.5" in checks["cudnn_version"]["message"]
    assert checks["cuda_runtime"]["status"] == "failed"
    assert checks["nccl_version"]["status"] == "failed"  # 2.32.3 is not 2.32(.0)
    jax_version = checks["jax_version"]
    assert jax_version["status"] == "failed"
    assert "cuda_plugin 0.12.0.1 (expected 0.12.0)" in jax_version["message"] and "runs on the CPU" in jax_version["message"]


def test_certify_without_a_gpu_fails_and_says_what_jax_said(site, tmp_path):
    run = run_jax_payload(site, tmp_path, HOST_EXPECT, "--mode", "certify")
    checks = run.checks()
    devices = checks["gpu_devices"]
    assert devices["status"] == "failed" and devices["message"].startswith("certify mode requested but no CUDA device")
    assert "backend cuda: no CUDA driver" in devices["value"]["gpu_errors"]
    assert any("Unable to load cuPTI" in e for e in devices["value"]["gpu_errors"])
    assert not any("tpu" in e for e in devices["value"]["gpu_errors"])
    for name in ("cc_covered", "gpu_train_step", "matmul_tflops", "nccl_allreduce"):
        assert (checks[name]["status"], checks[name]["message"]) == ("skipped", NO_GPU)
    assert run.doc["status"] == "failed"
    assert "Unable to load cuPTI" in run.stderr  # jax's warning still reaches stderr


# ------------------------------------------------------------------- pure helpers
def test_library_versions_for_both_cuda_majors():
    cu13 = jaxm.jax_library_versions({core.canonical_name(k): v for k, v in DISTS.items()})
    assert cu13 == {"cuda": ("nvidia-cuda-runtime", "13.5.37"), "cudnn": ("nvidia-cudnn-cu13", "9.28.1.4"),
                    "nccl": ("nvidia-nccl-cu13", "2.32.3"), "cuda_plugin": ("jax-cuda13-plugin", "0.12.0.1")}
    cu12 = jaxm.jax_library_versions({"nvidia-cuda-runtime-cu12": "12.9.79", "nvidia-cudnn-cu12": "9.8.0.87",
                                         "nvidia-nccl-cu12": "2.26.5", "jax-cuda12-plugin": "0.6.2",
                                         "nvidia-cuda-nvrtc-cu12": "12.9.86"})
    assert cu12["cuda"] == ("nvidia-cuda-runtime-cu12", "12.9.79") and cu12["cuda_plugin"][1] == "0.6.2"
    assert jaxm.jax_library_versions({"jax": "0.12.0.1"}) == dict.fromkeys(cu13, None)


@pytest.mark.parametrize("arg, expect, chosen", [
    ("auto", {"framework": "jax"}, "jax"),
    ("auto", {"torch": "2.5.1", "cuda": "12.4"}, "torch"),  # PyTorch's expect names no framework
    ("auto", {"jax": "0.12.0.1"}, "jax"),
    ("torch", {"framework": "jax"}, "torch"),
    ("auto", {"framework": "tensorflow"}, "tensorflow"),
    ("auto", {"framework": "mxnet"}, "mxnet"),  # refused at setup, never guessed
])
def test_framework_choice(arg, expect, chosen):
    assert runner.choose_framework(arg, expect) == chosen


def test_unknown_framework_is_bad_usage(site, tmp_path):
    """An expect file naming a framework the payload does not check is refused before anything is
    imported (exit 2, no document), not reported as a failed `import mxnet`."""
    path = tmp_path / "expect.json"
    path.write_text(json.dumps({"framework": "mxnet"}))
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(PAYLOAD), "--json", "--expect", str(path)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert 'framework "mxnet": this payload checks torch, jax, tensorflow images' in proc.stderr


def test_certified_needs_the_jax_device_check():
    C = core.Check
    passed = [C("passed", name="cpu_train_step"), C("passed", name="gpu_devices")]
    assert runner.overall_status("certify", passed) == "certified"
    assert runner.overall_status("certify", passed[:1] + [C("failed", name="gpu_devices")]) == "failed"
    assert runner.overall_status("certify", passed[:1]) == "failed"


def test_table_shows_the_jax_facts():
    doc = {"payload": {"version": "1", "sha256": "a" * 64}, "mode": "verify", "status": "verified", "seconds": 4.2,
           "facts": {"framework": "jax", "python": "3.13.5", "jax": "0.12.0.1", "jaxlib": "0.12.0.1", "cuda": "13.5.37",
                     "cudnn": "9.28.1.4", "nccl": "2.32.3", "driver": None},
           "checks": [{"name": "cpu_train_step", "status": "passed", "seconds": 2.6, "message": "CPU loss fell"}]}
    lines = runner.render_table(doc).splitlines()
    assert lines[1] == "python 3.13.5  jax 0.12.0.1  jaxlib 0.12.0.1  cuda 13.5.37  cudnn 9.28.1.4  nccl 2.32.3  driver -"


def test_jax_log_keeps_the_plugin_error(capsys):
    log = jaxm.JaxLog()
    logger = logging.getLogger("jax.test-envkit")
    logger.addHandler(log)
    try:
        logger.warning("Jax plugin configuration error", exc_info=RuntimeError("cuDNN 9.1 is older than 9.8"))
        logger.info("not kept")
    finally:
        logger.removeHandler(log)
    assert log.lines == ["Jax plugin configuration error (RuntimeError: cuDNN 9.1 is older than 9.8)"]
    assert "cuDNN 9.1" in capsys.readouterr().err


# -------------------------------------------------------------- checks on fake facts
@dataclasses.dataclass
class FakeDevice:
    id: int = 0
    device_kind: str = "NVIDIA H200"
    compute_capability: Any = "9.0"
    platform: str = "gpu"
    limit: int = 105 * 2**30

    def memory_stats(self):
        return {"bytes_limit": self.limit, "bytes_in_use": 0}

    def __str__(self) -> str:
        return f"cuda:{self.id}"


def gpu_jax_ctx(gpus, expect=None, **jax_attrs):
    jax = SimpleNamespace(**{"__version__": "0.12.0.1", "default_backend": lambda: "gpu",
                             "numpy": SimpleNamespace(bfloat16="bfloat16", float16="float16", float32="float32"),
                             **jax_attrs})
    ctx = core.Context(expect=EXPECT if expect is None else expect, mode="certify", t0=0.0, framework="jax")
    ctx.jax, ctx.gpu_devices, ctx.cuda_ok = jax, list(gpus), bool(gpus)
    ctx.facts = jaxm.gather_jax_facts(jax, ctx.gpu_devices, {core.canonical_name(k): v for k, v in DISTS.items()})
    return ctx


def test_gpu_facts_from_jax_devices():
    ctx = gpu_jax_ctx([FakeDevice(0), FakeDevice(1, compute_capability=None, limit=0)])
    assert ctx.facts["gpus"] == [{"index": 0, "name": "NVIDIA H200", "cc": "9.0", "memory_gib": 105.0},
                                 {"index": 1, "name": "NVIDIA H200", "cc": None, "memory_gib": None}]
    assert ctx.facts["backend"] == "gpu" and ctx.facts["cudnn"] == "9.28.1.4"


def test_gpu_devices_passes_with_devices():
    result = jaxm.check_gpu_devices(gpu_jax_ctx([FakeDevice(0), FakeDevice(1)]))
    assert result.status == "passed" and result.value["device_count"] == 2
    assert result.message == "2 GPU device(s) visible to jax: NVIDIA H200, NVIDIA H200"


@pytest.mark.parametrize("ccs, floor, status", [
    (["9.0", "8.9"], "7.5", "passed"),
    (["7.5"], "7.5", "passed"),
    (["9.0", "7.0"], "7.5", "failed"),  # a V100 under jax[cuda13]
    (["10.0"], "5.2", "passed"),
    ([None], "7.5", "failed"),  # jax gave no compute capability: not covered
])
def test_compute_capability_against_the_builds_minimum(ccs, floor, status):
    ctx = gpu_jax_ctx([FakeDevice(i, compute_capability=cc) for i, cc in enumerate(ccs)],
                      {**EXPECT, "min_cc": floor})
    result = jaxm.CHECKS["cc_covered"](ctx)
    assert result.status == status, result.message
    if status == "failed":
        assert f"below the jax build's minimum compute capability {floor}" in result.message


def test_no_min_cc_in_the_lock_skips_coverage():
    expect = {k: v for k, v in EXPECT.items() if k != "min_cc"}
    result = jaxm.CHECKS["cc_covered"](gpu_jax_ctx([FakeDevice()], expect))
    assert result.status == "skipped" and "lock gives no min_cc" in result.message


def test_gpu_only_checks_skip_without_a_device():
    ctx = gpu_jax_ctx([])
    for name in ("cc_covered", "gpu_train_step", "matmul_tflops", "nccl_allreduce"):
        result = jaxm.CHECKS[name](ctx)
        assert (result.status, result.message) == ("skipped", NO_GPU), name


@pytest.mark.parametrize("check, device, losses, status", [
    ("cpu_train_step", "cpu", (15.8, 0.52), "passed"),
    ("cpu_train_step", "cpu", (15.8, 9.0), "failed"),  # fell, but by less than half
    ("gpu_train_step", "gpu", (1.2, 0.3), "passed"),
    ("gpu_train_step", "gpu", (1.2, 1.2), "failed"),
    ("gpu_train_step", "gpu", (1.2, float("nan")), "failed"),
])
def test_train_loss_rules(monkeypatch, check, device, losses, status):
    seen = {}

    def trained(jax, dev, dtype, steps, **kwargs):
        seen.update(device=dev, dtype=dtype, steps=steps)
        first, last = (core.finite(x) for x in losses)
        return {"dtype": dtype, "first_loss": first, "last_loss": last, "steps": steps, "device": str(dev),
                "seconds": 0.5}

    monkeypatch.setattr(jaxm, "jax_mlp_train", trained)
    ctx = gpu_jax_ctx([FakeDevice()], devices=lambda kind=None: [FakeDevice(platform="cpu")])
    result = jaxm.CHECKS[check](ctx)
    assert result.status == status, result.message
    assert seen["device"].platform == device
    assert seen["dtype"] == ("bfloat16" if device == "gpu" else "float32")
    assert seen["steps"] == (40 if device == "gpu" else 30)


# ------------------------------------------------- matmul timing on an asynchronous fake device
class FakeStream:
    """A host clock and one device stream: a call returns at once, its kernel runs when the stream is
    free; block_until_ready moves the host clock to the stream's end. Slow until clocks ramp up."""

    def __init__(self, flops: float, ramp_s: float = 0.1, ramp_factor: float = 0.4, compile_s: float = 2.0):
        self.host, self.free_at, self.busy, self.flops = 0.0, 0.0, 0.0, flops
        self.ramp_s, self.ramp_factor, self.compile_s = ramp_s, ramp_factor, compile_s
        self.blocks, self.compiled = 0, False

    def clock(self) -> float:
        return self.host

    def launch(self, flop: float) -> "FakeStream":
        if not self.compiled:
            self.host, self.compiled = self.host + self.compile_s, True
        seconds = flop / (self.flops * (self.ramp_factor if self.busy < self.ramp_s else 1.0))
        self.free_at, self.busy = max(self.host, self.free_at) + seconds, self.busy + seconds
        self.host += 20e-6  # dispatch
        return self

    def block_until_ready(self, _: Any) -> Any:
        self.blocks += 1
        self.host = max(self.host, self.free_at)
        return _


@dataclasses.dataclass
class FakeMatrix:
    n: int


def fake_matmul_jax(stream: FakeStream):
    def jit(fn):
        return lambda a, b: (stream.launch(2 * a.n ** 3), FakeMatrix(a.n))[1]

    random = SimpleNamespace(PRNGKey=lambda seed: seed, split=lambda key, n=2: [key] * n,
                             normal=lambda key, shape, dtype=None: FakeMatrix(shape[0]))
    return SimpleNamespace(random=random, device_put=lambda x, device: x, jit=jit,
                           numpy=SimpleNamespace(matmul=None, bfloat16="bfloat16", float16="float16"),
                           block_until_ready=stream.block_until_ready)


def test_matmul_rate_waits_for_the_device_and_skips_compile_and_ramp():
    stream = FakeStream(700e12)
    rate = jaxm.jax_matmul_tflops(fake_matmul_jax(stream), FakeDevice(), "bfloat16", clock=stream.clock)
    assert rate == pytest.approx(700, rel=0.01)  # 2*n^3 flops per matmul, steady clocks, no compile time
    assert stream.blocks >= 1 + 5  # the compile run, then every timed window waits for its results


def test_matmul_check_probes_bf16_only_where_it_is_in_hardware(monkeypatch):
    stream = FakeStream(400e12)
    monkeypatch.setattr(jaxm, "jax_matmul_tflops", functools.partial(jaxm.jax_matmul_tflops, clock=stream.clock))
    hopper = gpu_jax_ctx([FakeDevice()], {**EXPECT, "perf_floors": {"bf16_matmul_tflops": 632}},
                         **vars(fake_matmul_jax(stream)))
    result = jaxm.CHECKS["matmul_tflops"](hopper)
    assert result.status == "failed" and "bf16_matmul_tflops 400.0 < floor 632" in result.message
    assert result.value == {"bf16_matmul_tflops": pytest.approx(400, rel=0.01),
                            "fp16_matmul_tflops": pytest.approx(400, rel=0.01)}
    turing = gpu_jax_ctx([FakeDevice(compute_capability="7.5")], EXPECT, **vars(fake_matmul_jax(stream)))
    result = jaxm.CHECKS["matmul_tflops"](turing)
    assert result.status == "passed" and set(result.value) == {"fp16_matmul_tflops"}


# ------------------------------------------------------------------------- all-reduce
def test_bus_bandwidth_formula():
    # 8 ranks, 256 MiB each, 10 all-reduces in 0.1 s: algbw 26.8 GB/s, busbw = algbw * 2 * 7/8
    rates = core.allreduce_rates(256 * 2**20, 8, 10, 0.1)
    assert rates == {"algbw_gbps": 26.8, "nccl_busbw_gbps": 47.0}


@pytest.mark.parametrize("world, correct, floor, status", [
    (8, True, None, "passed"), (8, True, 100.0, "failed"), (8, False, None, "failed"), (1, True, None, "passed")])
def test_allreduce_check(monkeypatch, world, correct, floor, status):
    calls = []

    def allreduce(jax, devices, numel, iters):
        calls.append((len(devices), numel, iters))
        return {"world_size": len(devices), "correct": correct, "numel": numel, "iters": iters, "seconds": 0.1,
                "platform": "gpu"}

    monkeypatch.setattr(jaxm, "jax_allreduce", allreduce)
    expect = {**EXPECT, "perf_floors": {"nccl_busbw_gbps": floor}} if floor else EXPECT
    result = jaxm.CHECKS["nccl_allreduce"](gpu_jax_ctx([FakeDevice(i) for i in range(world)], expect))
    assert result.status == status, result.message
    if world > 1 and correct:
        assert calls == [(8, 64 * 2**20, 10)]
        assert result.value["nccl_busbw_gbps"] == 47.0 and result.value["size_mib"] == 256
    if world == 1:
        assert result.message == "psum over 1 GPU returned the right sum (no bandwidth measured)"
        assert "nccl_busbw_gbps" not in result.value
    if not correct:
        assert result.message == f"psum over {world} GPU(s) returned a wrong sum"
    if status == "passed" and world > 1:
        assert result.message == "8-GPU psum of 256 MiB: bus bandwidth 47.0 GB/s (no floors in lock)"


def test_jax_registry_shares_the_torch_paths_common_checks():
    names = [name for name, _, _ in jaxm.REGISTRY]
    shared = {"python_version": core.check_python, "pip_check": core.check_pip,
              "requested_imports": payload_module("envkit_check_imports").check_requested,
              "nvidia_smi": nvml.check_nvidia_smi, "telemetry": nvml.check_telemetry}
    for name, fn in shared.items():
        assert jaxm.CHECKS[name] is fn
    assert names.index("cpu_train_step") < names.index("nvidia_smi") < names.index("telemetry") == len(names) - 1
    assert [name for name, _, gpu_only in jaxm.REGISTRY if not gpu_only] == names[:8]


def test_payload_source_stays_python39():
    import ast

    files = sorted(PAYLOAD.glob("*.py"))
    assert {p.name for p in files} >= {"__main__.py", "envkit_check_core.py", "envkit_check_jax.py"}
    for path in files:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
