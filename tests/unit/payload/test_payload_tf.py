"""The payload's TensorFlow path (envkit/payload/envkit_check/envkit_check_tf.py), without tensorflow on the host.

tensorflow is faked by its FACTS only: installed distributions (real ``*.dist-info`` directories
read by importlib.metadata), ``tf.sysconfig.get_build_info()``, physical devices and their details,
the allocator's readings, what a train loop returned, a device clock. Every verdict (version
comparisons, build compatibility, the loss rule, coverage, floors, timing, the status) is the
payload's own code. The real tensorflow runs in tests/integration/test_tensorflow.py, inside a
built TensorFlow image, GPU code paths included (on the CPU device).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict

import pytest

from tests.unit.lockfixtures import make_tf_image
from tests.unit.payload_modules import PAYLOAD_DIR, payload_module
from tests.unit.payload.test_payload_jax import FakeStream
from envkit.frameworks import expected

PAYLOAD = PAYLOAD_DIR  # run as `python3 PAYLOAD`
core, runner, tfm = (payload_module(f"envkit_check_{m}") for m in ("core", "main", "tf"))
nvml, jaxm = payload_module("envkit_check_nvml"), payload_module("envkit_check_jax")
EXPECT = expected(make_tf_image())  # what render writes to expect.json for a TensorFlow image
HOST_EXPECT = {**EXPECT, "python": f"{sys.version_info.major}.{sys.version_info.minor}"}  # the fake runs on this Python
NO_GPU = "no CUDA device visible"
DISTS = {"tensorflow": "2.20.0", "nvidia_cuda_runtime_cu12": "12.9.79", "nvidia_cudnn_cu12": "9.28.0.42",
         "nvidia_nccl_cu12": "2.32.3", "nvidia_cuda_nvrtc_cu12": "12.9.86", "nvidia_cublas_cu12": "12.9.3.13"}
BUILD_INFO = {"cpu_compiler": "clang 18", "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"],
              "cuda_version": "12.5.1", "cudnn_version": "9", "is_cuda_build": True, "is_rocm_build": False,
              "is_tensorrt_build": False}  # as the 2.20.0 image reports it


# ------------------------------------------------------ a fake TensorFlow install
FAKE_TF = f'''
from types import SimpleNamespace
__version__ = "2.20.0"
sysconfig = SimpleNamespace(get_build_info=lambda: {BUILD_INFO!r})
config = SimpleNamespace(list_physical_devices=lambda kind=None: [] if kind == "GPU" else ["/physical_device:CPU:0"])
float32, bfloat16, float16 = "float32", "bfloat16", "float16"


def __getattr__(name):  # this fake holds facts only: it cannot compute
    raise AttributeError(f"the fake tensorflow has no {{name}}")
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A directory for PYTHONPATH: a fake tensorflow, the distributions' metadata, and a torch and a
    jax that fail loudly if the payload ever imports them in a TensorFlow image."""
    root = tmp_path_factory.mktemp("tf-site")
    (root / "tensorflow").mkdir()
    (root / "tensorflow" / "__init__.py").write_text(FAKE_TF)
    for other in ("torch", "jax"):
        (root / other).mkdir()
        (root / other / "__init__.py").write_text(f'raise ImportError("the payload imported {other} in a TF image")\n')
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


def run_tf_payload(site: Path, tmp_path: Path, expect: Dict[str, Any], *args: str) -> Run:
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(expect))
    env = {**os.environ, "PYTHONPATH": str(site), "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, str(PAYLOAD), "--json", "--expect", str(path), *args],
                          capture_output=True, text=True, env=env, timeout=120)
    return Run(proc.returncode, json.loads(proc.stdout), proc.stderr)


def test_a_tf_image_runs_the_tf_checks_and_never_imports_torch_or_jax(site, tmp_path):
    run = run_tf_payload(site, tmp_path, HOST_EXPECT)
    checks = run.checks()
    assert [c["name"] for c in run.doc["checks"]] == [name for name, _, _ in tfm.REGISTRY]  # not "setup"
    assert run.doc["mode"] == "verify"
    assert run.doc["facts"] == {"framework": "tensorflow", "python": run.doc["facts"]["python"],
                                "tensorflow": "2.20.0", "cuda": "12.9.79", "cudnn": "9.28.0.42", "nccl": "2.32.3",
                                "build_cuda": "12.5.1", "build_cudnn": "9", "arch_list": BUILD_INFO[
                                    "cuda_compute_capabilities"], "driver": None, "gpus": []}
    for name in ("python_version", "tensorflow_version", "cuda_runtime", "cudnn_version", "nccl_version", "build_info"):
        assert checks[name]["status"] == "passed", checks[name]
    assert "compiled for sm_60 sm_70 sm_80 sm_89 compute_90" in checks["build_info"]["message"]
    for name, _, gpu_only in tfm.REGISTRY:
        if gpu_only:
            assert (checks[name]["status"], checks[name]["message"]) == ("skipped", NO_GPU), name
    # this fake cannot compute, so its train step raises and is reported (the real one: integration test)
    assert checks["cpu_train_step"]["status"] == "failed"
    assert checks["cpu_train_step"]["message"].startswith("check raised AttributeError")
    assert (run.doc["status"], run.returncode) == ("failed", 1)


def test_a_mismatched_cudnn_or_tensorflow_fails_with_the_reason(site, tmp_path):
    wrong = {**HOST_EXPECT, "cudnn": "9.28.1.4", "tensorflow": "2.19.1", "nccl": "2.32"}
    checks = run_tf_payload(site, tmp_path, wrong).checks()
    assert checks["cudnn_version"]["status"] == "failed"
    assert checks["cudnn_version"]["message"] == "cuDNN 9.28.0.42 (nvidia-cudnn) does not match expected 9.28.1.4"
    assert checks["tensorflow_version"]["status"] == "failed"
    assert checks["tensorflow_version"]["message"] == "tensorflow 2.20.0 does not match expected 2.19.1"
    assert checks["nccl_version"]["status"] == "failed"  # 2.32.3 is not 2.32(.0)
    assert checks["cuda_runtime"]["status"] == "passed"


def test_certify_without_a_gpu_fails_on_the_device_check(site, tmp_path):
    run = run_tf_payload(site, tmp_path, HOST_EXPECT, "--mode", "certify")
    checks = run.checks()
    devices = checks["gpu_devices"]
    assert devices["status"] == "failed" and devices["message"].startswith("certify mode requested but no CUDA device")
    assert "tf.config.list_physical_devices('GPU') found none" in devices["message"]
    for name in ("cc_covered", "gpu_train_step", "memory", "matmul_tflops", "nccl_allreduce"):
        assert (checks[name]["status"], checks[name]["message"]) == ("skipped", NO_GPU)
    assert run.doc["status"] == "failed"


@pytest.mark.parametrize("arg, expect, chosen", [
    ("auto", {"framework": "tensorflow"}, "tensorflow"),
    ("auto", {"tensorflow": "2.20.0"}, "tensorflow"),
    ("tensorflow", {}, "tensorflow"),
])
def test_framework_choice(arg, expect, chosen):
    assert runner.choose_framework(arg, expect) == chosen


def test_table_shows_the_tf_facts():
    doc = {"payload": {"version": "1", "sha256": "a" * 64}, "mode": "verify", "status": "verified", "seconds": 2.4,
           "facts": {"framework": "tensorflow", "python": "3.13.5", "tensorflow": "2.20.0", "cuda": "12.9.79",
                     "cudnn": "9.28.0.42", "nccl": "2.32.3", "build_cuda": "12.5.1", "driver": None},
           "checks": [{"name": "cpu_train_step", "status": "passed", "seconds": 0.2, "message": "CPU loss fell"}]}
    assert runner.render_table(doc).splitlines()[1] == (
        "python 3.13.5  tensorflow 2.20.0  cuda 12.9.79  cudnn 9.28.0.42  nccl 2.32.3  build_cuda 12.5.1  driver -")


def test_tf_registry_shares_the_common_checks():
    names = [name for name, _, _ in tfm.REGISTRY]
    shared = {"python_version": core.check_python, "pip_check": core.check_pip,
              "requested_imports": payload_module("envkit_check_imports").check_requested,
              "nvidia_smi": nvml.check_nvidia_smi, "telemetry": nvml.check_telemetry,
              "cuda_runtime": jaxm.CHECKS["cuda_runtime"], "cudnn_version": jaxm.CHECKS["cudnn_version"],
              "nccl_version": jaxm.CHECKS["nccl_version"]}
    for name, fn in shared.items():
        assert tfm.CHECKS[name] is fn, name
    assert [name for name, _, gpu_only in tfm.REGISTRY if not gpu_only] == names[:9]
    assert names[-1] == "telemetry"


# -------------------------------------------------------------- checks on fake facts
@dataclasses.dataclass
class FakeGpu:
    name: str = "/physical_device:GPU:0"
    device_type: str = "GPU"


def fake_tf(gpus=(), details=None, info=None, **attrs):
    details = details or {}
    experimental = SimpleNamespace(get_device_details=lambda d: details.get(d.name, {}))
    config = SimpleNamespace(list_physical_devices=lambda kind=None: list(gpus), experimental=experimental)
    return SimpleNamespace(__version__="2.20.0", sysconfig=SimpleNamespace(get_build_info=lambda: dict(info or BUILD_INFO)),
                           config=config, float32="float32", bfloat16="bfloat16", float16="float16", **attrs)


def tf_ctx(ccs=("9.0",), expect=None, info=None, dists=None, **tf_attrs):
    gpus = [FakeGpu(f"/physical_device:GPU:{i}") for i in range(len(ccs))]
    details = {g.name: ({"device_name": "NVIDIA H200", "compute_capability": tuple(map(int, cc.split(".")))} if cc
                        else {"device_name": "NVIDIA H200"}) for g, cc in zip(gpus, ccs)}
    tf = fake_tf(gpus, details, info, **tf_attrs)
    ctx = core.Context(expect=EXPECT if expect is None else expect, mode="certify", t0=0.0, framework="tensorflow")
    ctx.tf, ctx.gpu_devices = tf, tfm.tf_gpu_devices(tf)
    ctx.cuda_ok, ctx.build_info = bool(ctx.gpu_devices), tfm.tf_build_info(tf)
    found = {core.canonical_name(k): v for k, v in (DISTS if dists is None else dists).items()}
    ctx.facts = tfm.gather_tf_facts(tf, ctx.gpu_devices, found, ctx.build_info)
    return ctx


def test_gpu_facts_from_the_physical_devices():
    ctx = tf_ctx(("9.0", None))
    assert ctx.facts["gpus"] == [{"index": 0, "name": "NVIDIA H200", "cc": "9.0", "memory_gib": None},
                                 {"index": 1, "name": "NVIDIA H200", "cc": None, "memory_gib": None}]
    result = tfm.CHECKS["gpu_devices"](ctx)
    assert result.status == "passed" and result.message == "2 GPU device(s) visible to tensorflow: NVIDIA H200, NVIDIA H200"


@pytest.mark.parametrize("ccs, status, words, ptx", [
    (["9.0"], "passed", "device 0 (cc 9.0) by PTX only", True),  # H100/H200: compute_90 only
    (["8.9", "8.0"], "passed", "covered by tensorflow's sm_60 sm_70 sm_80 sm_89 compute_90", False),
    (["8.6"], "passed", "sm_80", False),  # sm_80 cubins run on 8.6
    (["10.0"], "passed", "device 0 (cc 10.0) by PTX only", True),
    (["5.2"], "failed", "device 0 (NVIDIA H200, cc 5.2) not covered", False),  # an M60 has no kernels in 2.20
    ([None], "failed", "cc unknown", False),
])
def test_coverage_by_the_capabilities_tensorflow_was_built_for(ccs, status, words, ptx):
    result = tfm.CHECKS["cc_covered"](tf_ctx(ccs))
    assert result.status == status, result.message
    assert words in result.message
    assert ("PTX only" in result.message) is ptx


@pytest.mark.parametrize("info, dists, status, words", [
    ({}, None, "passed", "which the installed CUDA runtime 12.9.79 and cuDNN 9.28.0.42 serve"),
    ({"cuda_version": "12.9.86"}, None, "failed", "CUDA 12.9.79 is older than the 12.9.86 tensorflow was built against"),
    ({"cuda_version": "13.0"}, None, "failed", "another major version"),
    ({"cudnn_version": "8"}, None, "failed", "cuDNN 9.28.0.42 is another major version than the 8"),
    ({}, {"tensorflow": "2.20.0", "nvidia_cuda_runtime_cu12": "12.9.79"}, "failed", "no cuDNN is installed"),
    ({"is_cuda_build": False}, None, "failed", "built without CUDA but the lock expects the CUDA runtime 12.9.79"),
])
def test_build_info_against_what_is_installed(info, dists, status, words):
    result = tfm.CHECKS["build_info"](tf_ctx((), info={**BUILD_INFO, **info}, dists=dists))
    assert result.status == status, result.message
    assert words in result.message


def test_no_build_info_fails():
    ctx = tf_ctx(())
    ctx.build_info = {}
    assert tfm.CHECKS["build_info"](ctx).message == "tf.sysconfig.get_build_info() is unavailable"


def test_gpu_only_checks_skip_without_a_device():
    ctx = tf_ctx(())
    for name in ("cc_covered", "gpu_train_step", "memory", "matmul_tflops", "nccl_allreduce"):
        assert (tfm.CHECKS[name](ctx).status, tfm.CHECKS[name](ctx).message) == ("skipped", NO_GPU), name


@pytest.mark.parametrize("check, cc, losses, status, dtype, scale", [
    ("cpu_train_step", "9.0", (4.06, 0.10), "passed", "float32", 1.0),
    ("cpu_train_step", "9.0", (4.06, 2.5), "failed", "float32", 1.0),  # fell, but by less than half
    ("gpu_train_step", "9.0", (3.6, 0.08), "passed", "bfloat16", 1.0),
    ("gpu_train_step", "7.5", (3.6, 0.08), "passed", "float16", 128.0),  # no bf16 in hardware: fp16, scaled loss
    ("gpu_train_step", "9.0", (3.6, 3.6), "failed", "bfloat16", 1.0),
    ("gpu_train_step", "9.0", (3.6, float("nan")), "failed", "bfloat16", 1.0),
])
def test_train_loss_rules(monkeypatch, check, cc, losses, status, dtype, scale):
    seen = {}

    def trained(tf, device, dt, steps, width=32, lr=0.05, loss_scale=1.0):
        seen.update(device=device, dtype=dt, steps=steps, scale=loss_scale)
        first, last = (core.finite(x) for x in losses)
        return {"dtype": dt, "first_loss": first, "last_loss": last, "steps": steps, "device": device, "seconds": 0.5}

    monkeypatch.setattr(tfm, "tf_mlp_train", trained)
    result = tfm.CHECKS[check](tf_ctx((cc,)))
    assert result.status == status, result.message
    gpu = check == "gpu_train_step"
    assert seen == {"device": "/GPU:0" if gpu else "/CPU:0", "dtype": dtype, "steps": 40 if gpu else 30, "scale": scale}


def test_placement_is_read_from_the_tensors():
    on = SimpleNamespace(device="/job:localhost/replica:0/task:0/device:GPU:0")
    assert tfm.tf_on(on, "/GPU:0") and not tfm.tf_on(on, "/CPU:0") and not tfm.tf_on(on, "/GPU:1")


class FakeAllocator:
    """get_memory_info as tensorflow's BFC allocator answers it; `counts` says how much of a block it records."""

    def __init__(self, counts: float = 1.0):
        self.current, self.peak, self.counts = 300 * 2**20, 900 * 2**20, counts

    def info(self, device):
        assert device == "GPU:0"
        return {"current": self.current, "peak": self.peak}

    def fill(self, shape, value):
        self.current += int(shape[0] * 4 * self.counts)
        self.peak = max(self.peak, self.current)
        return SimpleNamespace(n=shape[0], value=value, allocator=self)


def memory_tf(allocator: FakeAllocator, corrupt: bool = False):
    def reduce_sum(block):
        block.allocator.current -= int(block.n * 4 * block.allocator.counts)  # freed once read (del block)
        return block.n * block.value - (1 if corrupt else 0)
    return {"device": lambda name: contextlib.nullcontext(), "fill": allocator.fill, "reduce_sum": reduce_sum}


@pytest.mark.parametrize("counts, corrupt, status, words", [
    (1.0, False, "passed", "256 MiB block: in use 300.0 -> 556.0 -> 300.0 MiB; peak 900.0 MiB"),
    (0.0, False, "failed", "tensorflow's allocator counted 0.0 MiB for a 256 MiB block on GPU:0"),
    (1.0, True, "failed", "did not hold what was written"),
])
def test_memory_reads_the_allocator_around_a_block(counts, corrupt, status, words):
    allocator = FakeAllocator(counts)
    ctx = tf_ctx(("9.0",), **memory_tf(allocator, corrupt))
    ctx.tf.config.experimental.get_memory_info = allocator.info
    result = tfm.CHECKS["memory"](ctx)
    assert result.status == status, result.message
    assert words in result.message


# ------------------------------------------------- matmul timing on an asynchronous fake device
@dataclasses.dataclass
class FakeMatrix:
    n: int
    stream: Any = None

    def __getitem__(self, _):
        return self

    def numpy(self):  # a device-to-host copy waits for the stream
        self.stream.block_until_ready(self)
        return 0.0


def fake_matmul_tf(stream: FakeStream):
    generator = SimpleNamespace(normal=lambda shape: FakeMatrix(shape[0], stream))
    return {"device": lambda name: contextlib.nullcontext(), "cast": lambda x, dtype: x,
            "random": SimpleNamespace(Generator=SimpleNamespace(from_seed=lambda seed: generator)),
            "matmul": lambda a, b: (stream.launch(2 * a.n ** 3), FakeMatrix(a.n, stream))[1]}


def test_matmul_rate_waits_for_the_device_and_skips_setup_and_ramp():
    stream = FakeStream(700e12)
    tf = SimpleNamespace(**fake_matmul_tf(stream))
    rate = tfm.tf_matmul_tflops(tf, "/GPU:0", "bfloat16", clock=stream.clock)
    assert rate == pytest.approx(700, rel=0.01)  # 2*n^3 flops per matmul, steady clocks, no setup time
    assert stream.blocks >= 1 + 5  # the first run, then every timed window waits for its last result


def test_matmul_check_probes_bf16_only_where_it_is_in_hardware(monkeypatch):
    stream = FakeStream(400e12)
    monkeypatch.setattr(tfm, "tf_matmul_tflops", functools.partial(tfm.tf_matmul_tflops, clock=stream.clock))
    hopper = tf_ctx(("9.0",), {**EXPECT, "perf_floors": {"bf16_matmul_tflops": 632}}, **fake_matmul_tf(stream))
    result = tfm.CHECKS["matmul_tflops"](hopper)
    assert result.status == "failed" and "bf16_matmul_tflops 400.0 < floor 632" in result.message
    assert result.value == {"bf16_matmul_tflops": pytest.approx(400, rel=0.01),
                            "fp16_matmul_tflops": pytest.approx(400, rel=0.01)}
    turing = tf_ctx(("7.5",), EXPECT, **fake_matmul_tf(stream))
    result = tfm.CHECKS["matmul_tflops"](turing)
    assert result.status == "passed" and set(result.value) == {"fp16_matmul_tflops"}
