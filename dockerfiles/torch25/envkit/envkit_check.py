#!/usr/bin/env python3
"""envkit certification payload: verify (CPU) or certify (GPU) a PyTorch, JAX or TensorFlow image from the inside.

Standard library + the image's framework only (Python 3.9+; torch 2.0+, jax 0.4.26+, tensorflow
2.20 tried); never imports envkit, and never imports one framework in another's image.
    python3 /opt/envkit/envkit_check.py --expect expect.json --json
Exit status: 0 verified/certified, 1 failed, 2 bad usage. Reference: docs/payload.md.
"""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import gc
import hashlib
import importlib.util
import json
import logging
import math
import multiprocessing
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

SCHEMA = "envkit.payload/1"
PAYLOAD_VERSION = "1"
NO_GPU = "no CUDA device visible"
VERIFY_FORCED = "verify mode requested (--mode verify); GPU checks not run"
SHM_MIN_MIB = 512
SHM_FIX = "run with --shm-size=8g or --ipc=host"
SHM_ERROR = re.compile(r"bus error|shared memory|/dev/shm|shm|no space left", re.I)
CLOCK_REASONS = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                 "display_clock_setting"]  # NVML clocks event reason bits 0x1 .. 0x100


@dataclasses.dataclass
class Check:
    """One check's result; the runner fills in name and seconds."""

    status: str  # "passed" | "failed" | "skipped"
    value: Any = None
    expected: Any = None
    message: str = ""
    name: str = ""
    seconds: float = 0.0

    def to_json(self) -> Dict[str, Any]:
        return {"name": self.name, "status": self.status, "value": self.value,
                "expected": self.expected, "message": self.message, "seconds": self.seconds}


@dataclasses.dataclass
class Context:
    """What checks read (and the runner's progress); one per run."""

    expect: Dict[str, Any]
    mode: str
    t0: float
    steps: Optional[int] = None
    framework: str = "torch"  # "torch" | "jax" | "tensorflow": which registry runs
    torch: Any = None
    jax: Any = None
    tf: Any = None
    gpu_devices: List[Any] = dataclasses.field(default_factory=list)  # jax.devices("gpu"), tf's physical GPUs
    build_info: Dict[str, Any] = dataclasses.field(default_factory=dict)  # tf.sysconfig.get_build_info()
    jax_log: Any = None  # JaxLog: what jax logged while it looked for its GPU backend
    cuda_ok: bool = False
    facts: Dict[str, Any] = dataclasses.field(default_factory=dict)
    sampler: Optional["Sampler"] = None
    results: List[Check] = dataclasses.field(default_factory=list)
    current: str = ""
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    done: bool = False


REGISTRY: List[Tuple[str, Callable[[Context], Check], bool]] = []  # (name, function, gpu_only), in run order
DEVICE_CHECKS = ("cuda_available", "gpu_devices")  # passed: the framework really had a GPU (torch; jax, tensorflow)


def check(name: str, gpu_only: bool = False) -> Callable:
    """Register a check function under `name`."""
    def register(fn: Callable[[Context], Check]) -> Callable[[Context], Check]:
        REGISTRY.append((name, fn, gpu_only))
        return fn
    return register


# ----------------------------------------------------------------- pure helpers
def ints(text: Any) -> List[int]:
    """Integer components of a dotted version: "580.65.06" -> [580, 65, 6]."""
    return [int(x) for x in re.findall(r"\d+", str(text))]


def padded(text: Any, n: int) -> List[int]:
    return (ints(text) + [0] * n)[:n]


def same_version(actual: Any, expected: Any, parts: int) -> bool:
    """Equal on the first `parts` numeric components (missing ones count as 0)."""
    return padded(actual, parts) == padded(expected, parts)


def driver_meets(driver: str, floor: str) -> bool:
    """Dotted-integer comparison: driver >= floor ("580" counts as "580.0.0")."""
    n = max(len(ints(driver)), len(ints(floor)))
    return padded(driver, n) >= padded(floor, n)


def decode_version_int(v: int) -> str:
    """cuDNN/NCCL int to "M.m.p": M*10000+m*100+p from 9.x (NCCL 2.9+), M*1000+m*100+p before."""
    major, rest = divmod(int(v), 10000 if int(v) >= 10000 else 1000)
    return "%d.%d.%d" % (major, rest // 100, rest % 100)


def nccl_version_str(v: Any) -> Optional[str]:
    """torch.cuda.nccl.version() is (M, m, p[, suffix]) or an int, depending on torch."""
    if v is None:
        return None
    return ".".join(str(x) for x in v[:3]) if isinstance(v, (tuple, list)) else decode_version_int(v)


def parse_arch(arch: str) -> Optional[Tuple[str, Tuple[int, int], str]]:
    """ "sm_86" -> ("sm", (8, 6), ""); "compute_90a" -> ("compute", (9, 0), "a"); else None."""
    m = re.match(r"^(sm|compute)_(\d)(\d+)?(\d)([a-z]?)$", arch.strip())
    if not m:
        return None
    return m.group(1), (int(m.group(2) + (m.group(3) or "")), int(m.group(4))), m.group(5)


def arch_covers(arch_list: List[str], cc: Tuple[int, int]) -> bool:
    """sm_XY runs on cc X.y with y >= Y; compute_XY (PTX) JIT-compiles for any cc >= X.Y."""
    cc = (int(cc[0]), int(cc[1]))
    for kind, target, suffix in filter(None, map(parse_arch, arch_list or [])):
        if suffix == "a":  # arch-specific features: that exact cc only
            ok = target == cc
        elif kind == "sm" or suffix == "f":  # cubin (or family PTX): same major only
            ok = target[0] == cc[0] and target[1] <= cc[1]
        else:
            ok = target <= cc
        if ok:
            return True
    return False


def decode_clock_reasons(mask: int) -> List[str]:
    return [name for bit, name in enumerate(CLOCK_REASONS) if mask & (1 << bit)]


def shm_mib(path: str = "/dev/shm") -> Optional[float]:
    """Size of the shared-memory filesystem in MiB (None when absent)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return round(st.f_frsize * st.f_blocks / 2**20, 1)


def finite(x: Any, digits: int = 6) -> Optional[float]:
    """A JSON-safe float: None for NaN/inf."""
    x = float(x)
    return round(x, digits) if math.isfinite(x) else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_library_versions(torch: Any) -> Dict[str, Any]:
    """cuDNN, NCCL and compiled archs, all readable without a GPU (None/[] when absent)."""
    found: Dict[str, Any] = {"cudnn": None, "nccl": None, "arch_list": []}
    try:
        v = torch.backends.cudnn.version()
        found["cudnn"] = decode_version_int(v) if v else None
    except Exception:
        pass
    try:
        found["nccl"] = nccl_version_str(torch.cuda.nccl.version())
    except Exception:
        pass
    try:
        getter = getattr(torch._C, "_cuda_getArchFlags", None)
        flags = getter() if getter is not None else None
        found["arch_list"] = str(flags).split() if flags else list(torch.cuda.get_arch_list())
    except Exception:
        pass
    return found


def floor_check(ctx: Context, values: Dict[str, Any], what: str, text: str) -> Check:
    """Pass with `text`, or fail where a value is under expect.perf_floors[same key]."""
    floors = ctx.expect.get("perf_floors") or {}
    used = {k: floors[k] for k in values if k in floors}
    bad = [f"{k} {values[k]} < floor {used[k]}" for k in used if values[k] is None or values[k] < used[k]]
    if bad:
        return Check("failed", values, used, f"{what} below the lock's floor: " + "; ".join(bad))
    return Check("passed", values, used or None, text + ("" if used else " (no floors in lock)"))


# ------------------------------------------------------------------------- NVML
class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """Minimal ctypes binding to libnvidia-ml.so.1 (no pynvml needed)."""

    def __init__(self, lib: Any):
        self.lib = lib

    @classmethod
    def load(cls) -> Optional["Nvml"]:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            return cls(lib) if lib.nvmlInit_v2() == 0 else None
        except (OSError, AttributeError):
            return None

    def driver_version(self) -> Optional[str]:
        buf = ctypes.create_string_buffer(96)
        ok = self.lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0
        return (buf.value.decode("ascii", "replace") or None) if ok else None

    def count(self) -> int:
        n = ctypes.c_uint(0)
        return n.value if self.lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0 else 0

    def sample(self, index: int, t: float) -> Optional[Dict[str, Any]]:
        lib, h, ref = self.lib, ctypes.c_void_p(), ctypes.byref
        if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ref(h)) != 0:
            return None
        util, mem, power, temp, mask = _Utilization(), _Memory(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        reasons = (getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)  # driver 535+
                   or getattr(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
        readings = {"util_pct": util.gpu if lib.nvmlDeviceGetUtilizationRates(h, ref(util)) == 0 else None,
                    "mem_used_mib": round(mem.used / 2**20, 1) if lib.nvmlDeviceGetMemoryInfo(h, ref(mem)) == 0 else None,
                    "power_w": power.value / 1000.0 if lib.nvmlDeviceGetPowerUsage(h, ref(power)) == 0 else None,  # mW
                    "temp_c": temp.value if lib.nvmlDeviceGetTemperature(h, ctypes.c_int(0), ref(temp)) == 0 else None,
                    "clock_event_reasons": decode_clock_reasons(mask.value)
                    if reasons is not None and reasons(h, ref(mask)) == 0 else None}
        if all(v is None for v in readings.values()):
            return None  # a handle but no readable metric (e.g. no permission): not a sample
        return dict({"t": round(t, 3), "gpu": index}, **readings)


class Sampler(threading.Thread):
    """Samples every NVML device each `period` seconds until stopped."""

    def __init__(self, nvml: Nvml, t0: float, period: float = 0.2):
        super().__init__(name="envkit-telemetry", daemon=True)
        self.nvml, self.t0, self.period = nvml, t0, period
        self.samples: List[Dict[str, Any]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        try:  # telemetry is best effort: an NVML failure ends sampling, never the run
            n = self.nvml.count()
        except Exception:
            return
        while not self.halt.is_set():
            t = time.monotonic() - self.t0
            for i in range(n):
                try:
                    s = self.nvml.sample(i, t)
                except Exception:
                    s = None
                if s:
                    self.samples.append(s)
            self.halt.wait(self.period)

    def stop(self) -> None:
        self.halt.set()
        if self.is_alive():
            self.join(timeout=2)


# ------------------------------------------------------------ static/CPU checks
def compare_version(ctx: Context, key: str, label: str, actual: Optional[str], parts: int, both_none: str = "skipped",
                    absent: str = "library missing or failed to load") -> Check:
    """Compare a found version with expect[key]; null on both sides means a CPU-only build."""
    if key not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no {key}; found {label} {actual or 'none'}")
    want = ctx.expect[key]
    if want is None and actual is None:
        return Check(both_none, None, None, f"no {label} in this torch build (CPU-only), as the lock expects")
    if want is None:
        return Check("failed", actual, None, f"found {label} {actual} but the lock expects none (CPU-only build)")
    if actual is None:
        return Check("failed", None, want, f"{label} not available in this torch build ({absent}); expected {want}")
    if same_version(actual, want, parts):
        return Check("passed", actual, want, f"{label} {actual} matches the lock's {want}")
    return Check("failed", actual, want, f"{label} {actual} does not match expected {want} "
                                         f"(compared on {'.'.join(['M', 'm', 'p'][:parts])})")


@check("python_version")
def check_python(ctx: Context) -> Check:
    return compare_version(ctx, "python", "Python", platform.python_version(), 2)


@check("torch_version")
def check_torch(ctx: Context) -> Check:
    actual = str(ctx.torch.__version__)
    public, _, local = actual.partition("+")
    if "torch" not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no torch; found torch {actual}")
    want = str(ctx.expect["torch"])
    if public == want.partition("+")[0]:
        tag = f" (local build tag +{local})" if local else ""
        return Check("passed", actual, want, f"torch {public}{tag} matches the lock's {want}")
    return Check("failed", actual, want, f"torch {actual} does not match expected {want}")


@check("cuda_runtime")
def check_cuda_runtime(ctx: Context) -> Check:
    return compare_version(ctx, "cuda", "CUDA runtime", ctx.facts["cuda"], 2, both_none="passed",
                           absent="CPU-only torch: torch.version.cuda is None")


@check("cudnn_version")
def check_cudnn(ctx: Context) -> Check:
    return compare_version(ctx, "cudnn", "cuDNN", ctx.facts["cudnn"], 3)


@check("nccl_version")
def check_nccl_version(ctx: Context) -> Check:
    return compare_version(ctx, "nccl", "NCCL", ctx.facts["nccl"], 3)


@check("arch_list")
def check_arch_list(ctx: Context) -> Check:
    actual = ctx.facts["arch_list"] or []
    if "arch_list" not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no arch_list; found {' '.join(actual) or 'none'}")
    want = ctx.expect["arch_list"] or []
    missing, extra = sorted(set(want) - set(actual)), sorted(set(actual) - set(want))
    if not want and not actual:
        return Check("passed", actual, ctx.expect["arch_list"], "no CUDA archs compiled (CPU-only build), as the lock expects")
    if not missing and not extra:
        return Check("passed", actual, want, f"compiled archs {' '.join(actual)} match the lock")
    return Check("failed", actual, ctx.expect["arch_list"], f"compiled archs {' '.join(actual) or '(none)'} differ from the "
                 f"lock's {' '.join(want) or '(none)'}: missing {missing}, unexpected {extra}")


@check("pip_check")
def check_pip(ctx: Context) -> Check:
    absent = Check("skipped", None, None, "pip is not installed in this environment; dependency check not run")
    if importlib.util.find_spec("pip") is None:
        return absent
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    try:
        proc = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        return Check("failed", None, None, "python -m pip check did not finish within 120 s")
    out = (proc.stdout + proc.stderr).strip()
    if proc.returncode == 0:
        return Check("passed", {"exit_code": 0}, None, out.splitlines()[0] if out else "pip check passed")
    if "No module named pip" in out:
        return absent
    return Check("failed", {"exit_code": proc.returncode, "output": out[-4000:]}, None,
                 f"pip check found broken requirements (exit {proc.returncode}): {out[-2000:]}")


@check("cpu_train_step")
def check_cpu_train(ctx: Context) -> Check:
    torch, steps = ctx.torch, ctx.steps or 30
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.randn(8, 1) + 0.1 * torch.sin(3 * x[:, :1])
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    params = list(model.parameters())
    momentum = [torch.zeros_like(p) for p in params]
    losses = []
    for _ in range(steps):  # plain momentum SGD: torch.optim's first use imports torch._dynamo (~2 s)
        model.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        with torch.no_grad():
            for p, m in zip(params, momentum):
                p.sub_(m.mul_(0.9).add_(p.grad), alpha=0.02)
        losses.append(loss.item())
    value = {"first_loss": finite(losses[0]), "last_loss": finite(losses[-1]), "steps": steps}
    text = f"{losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps"
    if value["last_loss"] is not None and losses[-1] <= 0.5 * losses[0]:
        return Check("passed", value, None, f"CPU loss fell {text}")
    return Check("failed", value, None, f"CPU loss did not fall by 50% ({text})")


def loader_roundtrip(torch: Any, device: Any = None, pin: bool = False) -> Dict[str, Any]:
    """Iterate a 2-worker DataLoader over synthetic data, optionally copying batches to `device`."""
    from torch.utils.data import DataLoader, TensorDataset
    data = torch.randn(512, 64, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(data, torch.arange(512)), batch_size=64, num_workers=2, pin_memory=pin, timeout=120)
    total, samples, batches, pinned = 0.0, 0, 0, True
    for xb, yb in loader:
        pinned = pinned and (xb.is_pinned() or not pin)
        if device is not None:
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            if not (xb.is_cuda and yb.is_cuda):
                raise RuntimeError(f"batch did not land on {device}")
        total, samples, batches = total + float(xb.double().sum()), samples + yb.numel(), batches + 1
    want = float(data.double().sum())
    return {"batches": batches, "samples": samples, "pinned": pinned if pin else None,
            "intact": samples == 512 and abs(total - want) <= 1e-6 * max(1.0, abs(want))}


def dataloader_check(ctx: Context, device: Any, pin: bool) -> Check:
    shm = shm_mib()
    value: Dict[str, Any] = {"shm_mib": shm, "num_workers": 2, "pin_memory": pin, "device": str(device or "cpu")}
    try:
        value.update(loader_roundtrip(ctx.torch, device, pin))
    except Exception as e:  # a worker killed by SIGBUS surfaces here as a RuntimeError
        text = f"{type(e).__name__}: {e}"
        if not SHM_ERROR.search(text):
            raise
        return Check("failed", value, None, f"DataLoader workers hit a shared-memory error ({text[:300]}); "
                                            f"/dev/shm is {shm} MiB; {SHM_FIX}")
    if shm is not None and shm < SHM_MIN_MIB:
        return Check("failed", value, {"shm_mib_min": SHM_MIN_MIB}, f"/dev/shm is {shm:.0f} MiB (< {SHM_MIN_MIB} MiB): "
                                                                    f"DataLoader workers will die of bus errors; {SHM_FIX}")
    if not value["intact"] or (pin and not value["pinned"]):
        return Check("failed", value, None, "DataLoader batches arrived incomplete, corrupted or unpinned")
    where = f"copied to {device} (pinned, non_blocking)" if device is not None else "on CPU"
    return Check("passed", value, None, f"{value['batches']} batches from 2 workers {where}; /dev/shm {shm} MiB")


@check("dataloader_cpu")
def check_dataloader_cpu(ctx: Context) -> Check:
    return dataloader_check(ctx, None, False)


# ------------------------------------------------------------------ GPU checks
def query_nvidia_smi(exe: str) -> List[Dict[str, Any]]:
    """One dict per GPU from nvidia-smi; [] when it fails."""
    fields = ["index", "name", "driver_version", "memory.total", "compute_cap"]
    for query in (fields, fields[:-1]):  # drivers before ~510 lack compute_cap
        try:
            proc = subprocess.run([exe, "--query-gpu=" + ",".join(query), "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return []
        if proc.returncode == 0:
            rows = [[c.strip() for c in line.split(",")] for line in proc.stdout.strip().splitlines()]
            return [dict(zip(query, row)) for row in rows if len(row) == len(query)]
    return []


@check("nvidia_smi", gpu_only=True)
def check_nvidia_smi(ctx: Context) -> Check:
    exe = shutil.which("nvidia-smi")
    gpus = query_nvidia_smi(exe) if exe else []
    driver, source = (gpus[0]["driver_version"], "nvidia-smi") if gpus else (None, None)
    if driver is None:
        nvml = Nvml.load()
        driver, source = (nvml.driver_version() if nvml else None), "NVML"
    floor = ctx.expect.get("driver_floor")
    if driver is None:
        return Check("failed", None, floor, f"no NVIDIA driver found: nvidia-smi {'failed' if exe else 'is absent'} "
                                            "and libnvidia-ml.so.1 gave no driver version")
    ctx.facts["driver"] = driver
    value = {"driver": driver, "source": source, "gpus": gpus}
    if floor is None:
        return Check("passed", value, None, f"driver {driver} (via {source}); lock gives no driver_floor")
    if driver_meets(driver, str(floor)):
        return Check("passed", value, floor, f"driver {driver} (via {source}) >= floor {floor}")
    return Check("failed", value, floor, f"driver {driver} is older than the lock's floor {floor}; upgrade the host driver")


@check("cuda_available", gpu_only=True)
def check_cuda_available(ctx: Context) -> Check:
    value = {"available": ctx.cuda_ok, "device_count": len(ctx.facts["gpus"])}
    if not ctx.cuda_ok:
        return Check("failed", value, {"available": True},
                     f"certify mode requested but {NO_GPU} (torch.cuda.is_available() is False)")
    return Check("passed", value, None, f"{value['device_count']} CUDA device(s): "
                                        + ", ".join(g["name"] for g in ctx.facts["gpus"]))


def needs_cuda(fn: Callable[[Context], Check]) -> Callable[[Context], Check]:
    """Skip (never pass) a check when no CUDA device is usable."""
    def guarded(ctx: Context) -> Check:
        return fn(ctx) if ctx.cuda_ok else Check("skipped", None, None, NO_GPU)
    guarded.__doc__, guarded.__name__ = fn.__doc__, fn.__name__
    return guarded


def bf16_native(torch: Any) -> bool:
    """bf16 in hardware (cc >= 8.0). From torch 2.3 is_bf16_supported() is also True where bf16 is only emulated."""
    if getattr(torch.version, "hip", None):
        return bool(torch.cuda.is_bf16_supported())
    return int(torch.cuda.get_device_capability(0)[0]) >= 8


def device_seconds(torch: Any, fn: Callable[[], Any], iters: int) -> float:
    """Device time of `iters` calls of fn, between two CUDA events on the current stream; no host sync inside."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()  # elapsed_time needs both events completed
    return start.elapsed_time(end) / 1000.0


@check("arch_covered", gpu_only=True)
@needs_cuda
def check_arch_covered(ctx: Context) -> Check:
    archs = ctx.facts["arch_list"] or []
    devices = [{"index": i, "name": ctx.torch.cuda.get_device_name(i), "cc": tuple(ctx.torch.cuda.get_device_capability(i))}
               for i in range(ctx.torch.cuda.device_count())]
    bad = [f"device {d['index']} ({d['name']}, cc {d['cc'][0]}.{d['cc'][1]})" for d in devices if not arch_covers(archs, d["cc"])]
    for d in devices:
        d["cc"] = "%d.%d" % d["cc"]
    value = {"devices": devices, "arch_list": archs}
    if bad:
        return Check("failed", value, None, f"{'; '.join(bad)} not covered by compiled archs {' '.join(archs) or '(none)'}")
    return Check("passed", value, None, f"every device's compute capability is covered by {' '.join(archs)}")


def amp_train(torch: Any, device: Any, dtype: Any, steps: int, width: int = 256, accum: int = 4) -> Dict[str, Any]:
    """Linear+GELU blocks (middle ones checkpointed) under autocast with gradient accumulation."""
    from torch.utils.checkpoint import checkpoint
    nn, depth, micro = torch.nn, 4, 64
    torch.manual_seed(0)
    blocks = nn.ModuleList([nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)]).to(device)
    head = nn.Linear(width, 1).to(device)
    params = list(blocks.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-3)
    scaler = None
    if dtype == torch.float16 and device.type == "cuda":  # bf16 needs no loss scaling
        amp = getattr(torch, "amp", None)
        scaler = amp.GradScaler("cuda") if hasattr(amp, "GradScaler") else torch.cuda.amp.GradScaler()
    xs = torch.randn(accum, micro, width)
    ys = torch.tanh(xs @ (torch.randn(width, 1) * 3 / width ** 0.5))
    xs, ys = xs.to(device), ys.to(device)
    if not all(p.device.type == device.type for p in params) or xs.device.type != device.type:
        raise RuntimeError(f"parameters or batches are not on {device}")

    def forward(x: Any) -> Any:
        for i, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=False) if 0 < i < depth - 1 else block(x)
        return head(x)

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    losses, start = [], time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for k in range(accum):
            with torch.autocast(device.type, dtype=dtype):
                loss = torch.nn.functional.mse_loss(forward(xs[k]).float(), ys[k]) / accum
            (scaler.scale(loss) if scaler is not None else loss).backward()
            total += loss.detach()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        losses.append(total)
    values = [float(v) for v in losses]  # host syncs only after the loop
    result = {"dtype": str(dtype).replace("torch.", ""), "first_loss": finite(values[0]), "last_loss": finite(values[-1]),
              "steps": steps, "micro_batches": accum, "seconds": round(time.perf_counter() - start, 3)}
    if cuda:
        result["memory_mib"] = {k: round(f(device) / 2**20, 1) for k, f in (
            ("allocated", torch.cuda.memory_allocated), ("reserved", torch.cuda.memory_reserved),
            ("peak", torch.cuda.max_memory_allocated))}
    return result


@check("cuda_train_step", gpu_only=True)
@needs_cuda
def check_cuda_train(ctx: Context) -> Check:
    torch = ctx.torch
    dtype = torch.bfloat16 if bf16_native(torch) else torch.float16
    value = amp_train(torch, torch.device("cuda", 0), dtype, ctx.steps or 40)
    first, last = value["first_loss"], value["last_loss"]
    if first is not None and last is not None and last < first:
        return Check("passed", value, None, f"{value['dtype']} autocast loss fell {first:.4f} -> {last:.4f} "
                                            f"in {value['steps']} steps ({value['seconds']} s)")
    return Check("failed", value, None, f"{value['dtype']} autocast loss did not fall ({first} -> {last})")


@check("memory", gpu_only=True)
@needs_cuda
def check_memory(ctx: Context) -> Check:
    torch, mib = ctx.torch, 2**20
    dev = torch.device("cuda", 0)
    oom_type = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)
    total = torch.cuda.get_device_properties(dev).total_memory
    value: Dict[str, Any] = {"allocated_mib": round(torch.cuda.memory_allocated(dev) / mib, 1),
                             "reserved_mib": round(torch.cuda.memory_reserved(dev) / mib, 1),
                             "peak_mib": round(torch.cuda.max_memory_allocated(dev) / mib, 1),
                             "total_mib": round(total / mib, 1), "oversized_request_mib": round(2 * total / mib, 1)}
    size, oom_raised, fitted = 2 * total, False, None
    while size >= mib and fitted is None:  # 2x total must OOM; then halve until a batch fits
        try:
            batch = torch.empty(size, dtype=torch.uint8, device=dev)
            batch.zero_()
            torch.cuda.synchronize(dev)
            del batch
            fitted = size
        except oom_type as e:
            if "out of memory" not in str(e).lower() and "OutOfMemory" not in type(e).__name__:
                raise
            oom_raised = oom_raised or size == 2 * total
            torch.cuda.empty_cache()
            size //= 2
    torch.cuda.empty_cache()
    value.update(oom_raised=oom_raised, fitted_mib=round(fitted / mib, 1) if fitted else None)
    if oom_raised and fitted:
        return Check("passed", value, None, f"a 2x-memory request raised OutOfMemoryError, was caught, then a halved "
                                            f"{value['fitted_mib']:.0f} MiB batch succeeded (peak {value['peak_mib']} MiB)")
    return Check("failed", value, None, "no halved batch fitted after the OutOfMemoryError" if oom_raised
                 else "a 2x-memory allocation did not raise OutOfMemoryError")


@check("dataloader", gpu_only=True)
@needs_cuda
def check_dataloader(ctx: Context) -> Check:
    return dataloader_check(ctx, ctx.torch.device("cuda", 0), True)


def allreduce_worker(rank: int, world: int, port: int, backend: str, numel: int, iters: int, out_dir: str) -> None:
    """One rank: join the group over a localhost TCP store, check one sum, time `iters` all-reduces."""
    import torch
    import torch.distributed as dist
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        x = torch.full((numel,), float(rank + 1), device=torch.device("cuda", rank) if cuda else "cpu")
        dist.all_reduce(x)
        correct = bool((x == world * (world + 1) / 2).all())
        x.zero_()  # timed sums stay finite however many ranks and iterations
        for _ in range(2):  # warm-up: NCCL sets up its connections on the first collectives
            dist.all_reduce(x)
        dist.all_reduce(torch.ones(1, device=x.device))  # a barrier: all ranks start the clock together
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()
        seconds = time.perf_counter() - start
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
        json.dump({"rank": rank, "correct": correct, "seconds": seconds}, f)


def run_allreduce(world: int, backend: str, numel: int, iters: int, timeout: float = 180) -> List[Dict[str, Any]]:
    """Spawn `world` ranks of allreduce_worker; return each rank's report."""
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="envkit-allreduce-") as out_dir:
        pc = mp.spawn(allreduce_worker, args=(world, free_port(), backend, numel, iters, out_dir), nprocs=world, join=False)
        deadline = time.monotonic() + timeout
        while not pc.join(timeout=1):
            if time.monotonic() > deadline:
                for p in pc.processes:
                    p.kill()
                raise TimeoutError(f"{backend} all-reduce over {world} ranks did not finish in {timeout:g} s")
        reports = []
        for rank in range(world):
            with open(os.path.join(out_dir, f"{rank}.json")) as f:
                reports.append(json.load(f))
    return reports


@check("nccl_allreduce", gpu_only=True)
@needs_cuda
def check_nccl_allreduce(ctx: Context) -> Check:
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return Check("failed", None, None, "torch.distributed has no NCCL backend in this build")
    world = ctx.torch.cuda.device_count()
    numel, iters = (64 * 2**20, 10) if world > 1 else (2**20, 1)  # 256 MiB of fp32 for bandwidth
    reports = run_allreduce(world, "nccl", numel, iters)
    value: Dict[str, Any] = {"world_size": world, "nccl": ctx.facts["nccl"], "NCCL_ALGO": os.environ.get("NCCL_ALGO")}
    if not all(r["correct"] for r in reports):
        return Check("failed", value, None, f"NCCL all-reduce over {world} rank(s) returned a wrong sum")
    if world == 1:
        value["note"] = "single GPU: a world_size=1 process group proves NCCL initialises; no bandwidth"
        return Check("passed", value, None, "NCCL initialised and all-reduced with world_size=1 (no bandwidth measured)")
    seconds, size = max(r["seconds"] for r in reports), numel * 4
    value.update(size_mib=size // 2**20, iters=iters, algbw_gbps=round(size * iters / seconds / 1e9, 1),
                 nccl_busbw_gbps=round(size * 2 * (world - 1) / world * iters / seconds / 1e9, 1))
    return floor_check(ctx, value, "NCCL bus bandwidth", f"{world}-GPU all-reduce of 256 MiB: bus bandwidth "
                                                         f"{value['nccl_busbw_gbps']} GB/s")


def matmul_tflops(torch: Any, dtype: Any, n: int = 8192, iters: int = 10, windows: int = 5,
                  warmup_s: float = 0.3) -> float:
    """Dense n x n matmul rate (2*n^3 flops each): median of `windows` event-timed runs after a timed warm-up."""
    dev = torch.device("cuda", 0)
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)

    def step() -> None:
        torch.matmul(a, b, out=c)

    spent, rounds = 0.0, 0
    while spent < warmup_s and rounds < 100:  # clocks up from idle, cuBLAS heuristics and workspace settled
        spent, rounds = spent + device_seconds(torch, step, iters), rounds + 1
    times = sorted(device_seconds(torch, step, iters) for _ in range(windows))
    return 2 * n**3 * iters / times[len(times) // 2] / 1e12


@check("matmul_tflops", gpu_only=True)
@needs_cuda
def check_matmul(ctx: Context) -> Check:
    torch, n = ctx.torch, 8192
    kinds = [("bf16_matmul_tflops", torch.bfloat16)] if bf16_native(torch) else []
    values = {key: round(matmul_tflops(torch, dtype, n), 1) for key, dtype in kinds + [("fp16_matmul_tflops", torch.float16)]}
    text = ", ".join(f"{k.split('_')[0]} {v} TFLOP/s" for k, v in values.items())
    return floor_check(ctx, values, "matmul throughput", f"{n}x{n} matmul (median of 5 timed runs): {text}")


@check("h2d_d2h_bandwidth", gpu_only=True)
@needs_cuda
def check_bandwidth(ctx: Context) -> Check:
    torch = ctx.torch
    dev, nbytes, reps = torch.device("cuda", 0), 256 * 2**20, 5
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    pageable = torch.ones(nbytes, dtype=torch.uint8)
    pinned = torch.ones(nbytes, dtype=torch.uint8).pin_memory()

    def rate(copy: Callable[[], Any]) -> float:
        copy()  # warm-up
        torch.cuda.synchronize(dev)
        return round(nbytes * reps / device_seconds(torch, copy, reps) / 1e9, 2)

    values = {"h2d_pinned_gbps": rate(lambda: gpu.copy_(pinned, non_blocking=True)),
              "h2d_pageable_gbps": rate(lambda: gpu.copy_(pageable)),
              "d2h_pinned_gbps": rate(lambda: pinned.copy_(gpu, non_blocking=True)),
              "d2h_pageable_gbps": rate(lambda: pageable.copy_(gpu))}
    del gpu, pageable, pinned
    return floor_check(ctx, values, "copy bandwidth", "256 MiB copies, GB/s: " + ", ".join(
        f"{k[:-5].replace('_', ' ')} {v}" for k, v in values.items()))


@check("telemetry", gpu_only=True)
def check_telemetry(ctx: Context) -> Check:
    if ctx.sampler is None:
        return Check("skipped", None, None, "NVML (libnvidia-ml.so.1) not loadable; no telemetry sampled")
    ctx.sampler.stop()
    samples = list(ctx.sampler.samples)
    if not samples:
        return Check("skipped", {"samples": 0}, None, "NVML loaded but gave no samples")

    def peak(key: str) -> Any:
        return max((s[key] for s in samples if s[key] is not None), default=None)

    reasons = sorted({r for s in samples for r in (s["clock_event_reasons"] or [])})
    value = {"samples": len(samples), "max_util_pct": peak("util_pct"), "max_temp_c": peak("temp_c"),
             "max_power_w": peak("power_w"), "max_mem_used_mib": peak("mem_used_mib"), "clock_event_reasons_seen": reasons}
    return Check("passed", value, None, f"{len(samples)} NVML samples; max {value['max_temp_c']} C, "
                                        f"{value['max_power_w']} W; clock event reasons seen: {', '.join(reasons) or 'none'}")


# ------------------------------------------------------------------------- JAX
# A JAX image holds jax, jaxlib and the CUDA plugin (jax-cudaNN-plugin + -pjrt), with the CUDA
# libraries as nvidia-* wheels. Its checks read those versions from the installed distributions,
# train on the CPU backend, and (certify mode) probe the GPUs through jax. The shared checks
# (python_version, pip_check, nvidia_smi, telemetry) are the PyTorch path's own functions.
CUDA_DISTRIBUTIONS = {"cuda": r"nvidia-cuda-runtime(-cu\d+)?", "cudnn": r"nvidia-cudnn-cu\d+",
                      "nccl": r"nvidia-nccl-cu\d+"}  # the CUDA libraries as wheels (JAX, TensorFlow)
JAX_DISTRIBUTIONS = dict(CUDA_DISTRIBUTIONS, cuda_plugin=r"jax-cuda\d+-plugin")
JAX_FACTS = ["framework", "python", "jax", "jaxlib", "cuda_plugin", "cuda", "cudnn", "nccl", "backend", "driver"]


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def distribution_versions() -> Dict[str, str]:
    """Every installed distribution's version, by canonical name (importlib.metadata)."""
    import importlib.metadata as metadata
    found: Dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if name:
            found.setdefault(canonical_name(name), dist.version)
    return found


def library_versions(dists: Dict[str, str], patterns: Dict[str, str]) -> Dict[str, Any]:
    """{key: (distribution, version) or None}: the first installed distribution matching each pattern."""
    out: Dict[str, Any] = {}
    for key, pattern in patterns.items():
        out[key] = next(((n, v) for n, v in sorted(dists.items()) if re.fullmatch(pattern, n)), None)
    return out


def jax_library_versions(dists: Dict[str, str]) -> Dict[str, Any]:
    """CUDA runtime, cuDNN, NCCL and the JAX CUDA plugin."""
    return library_versions(dists, JAX_DISTRIBUTIONS)


def cc_at_least(cc: Any, floor: Any) -> bool:
    return padded(cc, 2) >= padded(floor, 2)


def jax_gpu_devices(jax: Any) -> List[Any]:
    """jax.devices('gpu'), or [] when jax has no GPU backend (it then runs on the CPU)."""
    try:
        return [d for d in jax.devices("gpu")]
    except Exception:  # RuntimeError: Unknown backend 'gpu' (no driver, plugin failed to load, ...)
        return []


class JaxLog(logging.Handler):
    """Keeps jax's warnings (a CUDA plugin that failed to initialise is only logged) and still prints them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        self.lines.append(text[:500])
        sys.stderr.write(f"{record.name}: {text}\n")


def jax_gpu_errors(log: Optional[JaxLog]) -> List[str]:
    """Why jax has no GPU backend, as far as jax says: its CUDA/GPU backend errors (a private table)
    and the warnings it logged about its CUDA plugin."""
    found: List[str] = []
    try:
        from jax._src import xla_bridge
        errors = dict(getattr(xla_bridge, "_backend_errors", {}) or {})
        found += [f"backend {k}: {str(v)[:300]}" for k, v in errors.items() if re.search(r"cuda|gpu", str(k), re.I)]
    except Exception:
        pass
    found += [line for line in (log.lines if log else []) if re.search(r"cuda|gpu|plugin", line, re.I)]
    return found


def platform_of(array: Any) -> str:
    return ",".join(sorted({d.platform for d in array.devices()}))


def gather_jax_facts(jax: Any, devices: List[Any], dists: Dict[str, str]) -> Dict[str, Any]:
    nvml = Nvml.load()
    libs = jax_library_versions(dists)
    try:
        import jaxlib.version
        jaxlib_version: Optional[str] = str(jaxlib.version.__version__)
    except Exception:
        jaxlib_version = dists.get("jaxlib")
    gpus = []
    for i, d in enumerate(devices):
        try:
            limit = (d.memory_stats() or {}).get("bytes_limit")
        except Exception:
            limit = None
        cc = getattr(d, "compute_capability", None)
        gpus.append({"index": i, "name": str(d.device_kind), "cc": str(cc) if cc else None,
                     "memory_gib": round(limit / 2**30, 2) if limit else None})
    try:
        backend: Optional[str] = str(jax.default_backend())
    except Exception:
        backend = None
    found = {"framework": "jax", "python": platform.python_version(), "jax": str(jax.__version__), "jaxlib": jaxlib_version,
             "backend": backend, "driver": nvml.driver_version() if nvml else None}
    found.update({k: (v[1] if v else None) for k, v in libs.items()})
    return dict({k: found[k] for k in JAX_FACTS}, gpus=gpus)


def compare_exact(ctx: Context, key: str, label: str, actual: Optional[str], where: str) -> Check:
    """Compare an installed distribution's version with expect[key] on every component."""
    if key not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no {key}; found {label} {actual or 'none'}")
    want = ctx.expect[key]
    if want is None and actual is None:
        return Check("passed", None, None, f"no {label} installed, as the lock expects")
    if want is None:
        return Check("failed", actual, None, f"found {label} {actual} ({where}) but the lock expects none")
    if actual is None:
        return Check("failed", None, want, f"{label} is not installed (no {where} distribution); expected {want}")
    n = max(len(ints(actual)), len(ints(want)))
    if same_version(actual, want, n):
        return Check("passed", actual, want, f"{label} {actual} ({where}) matches the lock's {want}")
    return Check("failed", actual, want, f"{label} {actual} ({where}) does not match expected {want}")


def check_jax_version(ctx: Context) -> Check:
    found = {"jax": ctx.facts.get("jax"), "jaxlib": ctx.facts.get("jaxlib"), "cuda_plugin": ctx.facts.get("cuda_plugin")}
    wanted = {k: ctx.expect[k] for k in found if k in ctx.expect}
    if "jax" not in ctx.expect:
        return Check("skipped", found, None, f"lock gives no jax; found jax {found['jax']}")
    bad, same = [], []
    for key, want in wanted.items():
        have = found[key]
        public = str(have or "").partition("+")[0]
        if want is not None and public != str(want).partition("+")[0]:
            bad.append(f"{key} {have or 'not installed'} (expected {want})")
        else:
            same.append(f"{key} {have}")
    if bad:
        return Check("failed", found, wanted, "does not match the lock: " + "; ".join(bad)
                     + (" (the CUDA plugin must be jaxlib's version, else jax runs on the CPU)"
                        if any(b.startswith("cuda_plugin") for b in bad) else ""))
    return Check("passed", found, wanted, ", ".join(same) + " match the lock")


def check_wheel_cuda_runtime(ctx: Context) -> Check:
    return compare_exact(ctx, "cuda", "CUDA runtime", ctx.facts["cuda"], "nvidia-cuda-runtime")


def check_wheel_cudnn(ctx: Context) -> Check:
    return compare_exact(ctx, "cudnn", "cuDNN", ctx.facts["cudnn"], "nvidia-cudnn")


def check_wheel_nccl(ctx: Context) -> Check:
    return compare_exact(ctx, "nccl", "NCCL", ctx.facts["nccl"], "nvidia-nccl")


def jax_mlp_train(jax: Any, device: Any, dtype: Any, steps: int, width: int = 32, lr: float = 0.05) -> Dict[str, Any]:
    """A jitted 8 -> width -> 1 tanh MLP trained with jax.grad and momentum SGD on `device`; the
    forward pass runs in `dtype` (parameters, loss and update in float32)."""
    jnp = jax.numpy
    k = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.random.normal(k[0], (256, 8), dtype=jnp.float32)
    y = x @ jax.random.normal(k[1], (8, 1), dtype=jnp.float32) + 0.1 * jnp.sin(3 * x[:, :1])
    params = {"w1": jax.random.normal(k[2], (8, width), dtype=jnp.float32) / 8 ** 0.5, "b1": jnp.zeros((width,)),
              "w2": jax.random.normal(k[3], (width, 1), dtype=jnp.float32) / width ** 0.5, "b2": jnp.zeros((1,))}
    x, y, params = jax.device_put((x, y, params), device)
    momentum = jax.tree_util.tree_map(jnp.zeros_like, params)

    def loss_fn(p: Any, xb: Any, yb: Any) -> Any:
        h = jnp.tanh(xb.astype(dtype) @ p["w1"].astype(dtype) + p["b1"].astype(dtype))
        out = h @ p["w2"].astype(dtype) + p["b2"].astype(dtype)
        return jnp.mean((out.astype(jnp.float32) - yb) ** 2)

    @jax.jit
    def step(p: Any, m: Any, xb: Any, yb: Any) -> Any:
        loss, grads = loss_fn(p, xb, yb), jax.grad(loss_fn)(p, xb, yb)
        m = jax.tree_util.tree_map(lambda mi, g: 0.9 * mi + g, m, grads)
        return jax.tree_util.tree_map(lambda pi, mi: pi - lr * mi, p, m), m, loss

    losses, start = [], time.perf_counter()
    for _ in range(steps):
        params, momentum, loss = step(params, momentum, x, y)
        losses.append(loss)
    where = platform_of(loss)
    if where != device.platform:
        raise RuntimeError(f"the train step ran on {where}, not on {device}")
    values = [float(v) for v in losses]  # host syncs only after the loop
    return {"dtype": str(jnp.dtype(dtype)), "first_loss": finite(values[0]), "last_loss": finite(values[-1]),
            "steps": steps, "device": str(device), "seconds": round(time.perf_counter() - start, 3)}


def check_jax_cpu_train(ctx: Context) -> Check:
    jax = ctx.jax
    value = jax_mlp_train(jax, jax.devices("cpu")[0], jax.numpy.float32, ctx.steps or 30)
    first, last = value["first_loss"], value["last_loss"]
    text = f"{first} -> {last} in {value['steps']} jitted jax.grad steps on {value['device']}"
    if first is not None and last is not None and last <= 0.5 * first:
        return Check("passed", value, None, f"CPU loss fell {text}")
    return Check("failed", value, None, f"CPU loss did not fall by 50% ({text})")


def check_gpu_devices(ctx: Context) -> Check:
    value = {"available": ctx.cuda_ok, "device_count": len(ctx.facts["gpus"]), "backend": ctx.facts.get("backend")}
    if not ctx.cuda_ok:
        errors = jax_gpu_errors(ctx.jax_log)
        value["gpu_errors"] = errors
        why = f"; jax says: {' | '.join(errors)}" if errors else ""
        return Check("failed", value, {"available": True}, f"certify mode requested but {NO_GPU} (jax.devices('gpu') "
                                                           f"found none; jax runs on {value['backend']}){why}")
    return Check("passed", value, None, f"{value['device_count']} GPU device(s) visible to jax: "
                                        + ", ".join(g["name"] for g in ctx.facts["gpus"]))


def check_cc_covered(ctx: Context) -> Check:
    floor, gpus = ctx.expect.get("min_cc"), ctx.facts["gpus"]
    value = {"devices": [{"index": g["index"], "name": g["name"], "cc": g["cc"]} for g in gpus], "min_cc": floor}
    if floor is None:
        return Check("skipped", value, None, "lock gives no min_cc (the jax build's minimum compute capability)")
    bad = [f"device {g['index']} ({g['name']}, cc {g['cc'] or 'unknown'})" for g in gpus
           if not g["cc"] or not cc_at_least(g["cc"], floor)]
    if bad:
        return Check("failed", value, floor, f"{'; '.join(bad)} below the jax build's minimum compute capability {floor}")
    return Check("passed", value, floor, f"every device's compute capability is >= {floor} (the jax build's minimum)")


def check_gpu_train(ctx: Context) -> Check:
    jax = ctx.jax
    value = jax_mlp_train(jax, ctx.gpu_devices[0], jax.numpy.bfloat16, ctx.steps or 40, width=256, lr=0.02)
    first, last = value["first_loss"], value["last_loss"]
    if first is not None and last is not None and last < first:
        return Check("passed", value, None, f"bfloat16 loss fell {first:.4f} -> {last:.4f} in {value['steps']} steps "
                                            f"on {value['device']} ({value['seconds']} s)")
    return Check("failed", value, None, f"bfloat16 loss did not fall on {value['device']} ({first} -> {last})")


def jax_matmul_tflops(jax: Any, device: Any, dtype: Any, n: int = 8192, iters: int = 10, windows: int = 5,
                      warmup_s: float = 0.3, clock: Callable[[], float] = time.perf_counter) -> float:
    """Dense n x n matmul rate (2*n^3 flops each) on `device`: compiled first, then warm-up windows until
    `warmup_s` (clocks up from idle), then the median of `windows` windows of `iters` matmuls, each
    window timed on the host until every result is ready (jax dispatches asynchronously)."""
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    a, b = (jax.device_put(jax.random.normal(k, (n, n), dtype=dtype), device) for k in keys)
    matmul = jax.jit(jax.numpy.matmul)
    jax.block_until_ready(matmul(a, b))  # compilation and the first run: not timed

    def window() -> float:
        start = clock()
        out = [matmul(a, b) for _ in range(iters)]
        jax.block_until_ready(out)
        return clock() - start

    spent, rounds = 0.0, 0
    while spent < warmup_s and rounds < 100:
        spent, rounds = spent + window(), rounds + 1
    times = sorted(window() for _ in range(windows))
    return 2 * n**3 * iters / times[len(times) // 2] / 1e12


def check_jax_matmul(ctx: Context) -> Check:
    jax, n, dev = ctx.jax, 8192, ctx.gpu_devices[0]
    kinds = [("bf16_matmul_tflops", jax.numpy.bfloat16)] if cc_at_least(ctx.facts["gpus"][0]["cc"] or 0, "8.0") else []
    values = {key: round(jax_matmul_tflops(jax, dev, dtype, n), 1)
              for key, dtype in kinds + [("fp16_matmul_tflops", jax.numpy.float16)]}
    text = ", ".join(f"{k.split('_')[0]} {v} TFLOP/s" for k, v in values.items())
    return floor_check(ctx, values, "matmul throughput", f"{n}x{n} jitted matmul (median of 5 timed windows): {text}")


def allreduce_rates(size: int, world: int, iters: int, seconds: float) -> Dict[str, float]:
    """Algorithm and bus bandwidth of `iters` all-reduces of `size` bytes per rank (busbw = algbw*2*(n-1)/n)."""
    algbw = size * iters / seconds / 1e9
    return {"algbw_gbps": round(algbw, 1), "nccl_busbw_gbps": round(algbw * 2 * (world - 1) / world, 1)}


def jax_allreduce(jax: Any, devices: List[Any], numel: int, iters: int) -> Dict[str, Any]:
    """jax.lax.psum of `numel` float32 per device under shard_map over `devices`: checks one sum,
    then times `iters` chained all-reduces after two warm-ups (host clock, until ready)."""
    jnp, world = jax.numpy, len(devices)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # jax < 0.7
        from jax.experimental.shard_map import shard_map
    mesh = Mesh(devices, ("ranks",))
    spec = PartitionSpec("ranks")
    allreduce = jax.jit(shard_map(lambda s: jax.lax.psum(s, "ranks"), mesh=mesh, in_specs=spec, out_specs=spec))

    def sharded(fill: Callable[[int], float]) -> Any:
        shards = [jax.device_put(jnp.full((numel,), fill(r), dtype=jnp.float32), d) for r, d in enumerate(devices)]
        return jax.make_array_from_single_device_arrays((world * numel,), NamedSharding(mesh, spec), shards)

    out = allreduce(sharded(lambda r: float(r + 1)))
    correct = bool(jnp.all(out == world * (world + 1) / 2))
    x = sharded(lambda r: 0.0)  # timed sums stay finite however many ranks and iterations
    for _ in range(2):  # warm-up: NCCL sets up its communicators on the first collectives
        x = allreduce(x)
    jax.block_until_ready(x)
    start = time.perf_counter()
    for _ in range(iters):
        x = allreduce(x)
    jax.block_until_ready(x)
    return {"world_size": world, "correct": correct, "seconds": time.perf_counter() - start,
            "platform": devices[0].platform}


def check_jax_allreduce(ctx: Context) -> Check:
    world = len(ctx.gpu_devices)
    numel, iters = (64 * 2**20, 10) if world > 1 else (2**20, 1)  # 256 MiB of fp32 per GPU for bandwidth
    report = jax_allreduce(ctx.jax, ctx.gpu_devices, numel, iters)
    value: Dict[str, Any] = {"world_size": world, "nccl": ctx.facts["nccl"], "op": "jax.lax.psum under shard_map",
                             "NCCL_ALGO": os.environ.get("NCCL_ALGO")}
    if not report["correct"]:
        return Check("failed", value, None, f"psum over {world} GPU(s) returned a wrong sum")
    if world == 1:
        value["note"] = "single GPU: psum over one device proves the collective compiles and runs; no bandwidth"
        return Check("passed", value, None, "psum over 1 GPU returned the right sum (no bandwidth measured)")
    value.update(size_mib=numel * 4 // 2**20, iters=iters, **allreduce_rates(numel * 4, world, iters, report["seconds"]))
    return floor_check(ctx, value, "all-reduce bus bandwidth", f"{world}-GPU psum of 256 MiB: bus bandwidth "
                                                               f"{value['nccl_busbw_gbps']} GB/s")


# (name, function, gpu_only), in run order: JAX's own checks and the shared ones
JAX_REGISTRY: List[Tuple[str, Callable[[Context], Check], bool]] = [
    ("python_version", check_python, False),
    ("jax_version", check_jax_version, False),
    ("cuda_runtime", check_wheel_cuda_runtime, False),
    ("cudnn_version", check_wheel_cudnn, False),
    ("nccl_version", check_wheel_nccl, False),
    ("pip_check", check_pip, False),
    ("cpu_train_step", check_jax_cpu_train, False),
    ("nvidia_smi", check_nvidia_smi, True),
    ("gpu_devices", check_gpu_devices, True),
    ("cc_covered", needs_cuda(check_cc_covered), True),
    ("gpu_train_step", needs_cuda(check_gpu_train), True),
    ("matmul_tflops", needs_cuda(check_jax_matmul), True),
    ("nccl_allreduce", needs_cuda(check_jax_allreduce), True),
    ("telemetry", check_telemetry, True),
]
JAX_CHECKS = {name: fn for name, fn, _ in JAX_REGISTRY}


def setup_jax(ctx: Context, mode: str) -> None:
    """Import jax (on the CPU backend when there is no GPU) and gather its facts."""
    # Allocate GPU memory as needed, not 75% of it up front: memory readings then mean something.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    ctx.jax_log = JaxLog()
    logging.getLogger("jax").addHandler(ctx.jax_log)
    import jax
    ctx.jax = jax
    ctx.gpu_devices = jax_gpu_devices(jax)
    ctx.cuda_ok = bool(ctx.gpu_devices)
    if mode == "auto":
        ctx.mode = "certify" if ctx.cuda_ok else "verify"
    ctx.current = "gather facts"
    ctx.facts = gather_jax_facts(jax, ctx.gpu_devices, distribution_versions())


# ------------------------------------------------------------------ TensorFlow
# A TensorFlow image (tensorflow[and-cuda]) holds tensorflow with the CUDA libraries as nvidia-*
# wheels. Its checks read those versions from the installed distributions (the lock's pins) and
# what tensorflow was compiled against and for from tf.sysconfig.get_build_info() (CUDA, the
# cuDNN major, compute capabilities), train on the CPU, and (certify mode) probe the GPUs through
# tensorflow. The shared checks (python_version, the nvidia-* versions, pip_check, nvidia_smi,
# telemetry) are the other paths' own functions.
TF_FACTS = ["framework", "python", "tensorflow", "cuda", "cudnn", "nccl", "build_cuda", "build_cudnn", "arch_list",
            "driver"]


def tf_gpu_devices(tf: Any) -> List[Any]:
    """tf.config.list_physical_devices('GPU'), or [] (no driver, a CPU-only build, ...)."""
    try:
        return list(tf.config.list_physical_devices("GPU"))
    except Exception:
        return []


def tf_build_info(tf: Any) -> Dict[str, Any]:
    """tf.sysconfig.get_build_info(): cuda_version, cudnn_version, cuda_compute_capabilities, is_cuda_build."""
    try:
        return dict(tf.sysconfig.get_build_info())
    except Exception:
        return {}


def tf_device_details(tf: Any, device: Any) -> Tuple[str, Optional[str]]:
    """A physical GPU's name and compute capability ("9.0"), without initialising it."""
    try:
        details = tf.config.experimental.get_device_details(device) or {}
    except Exception:
        details = {}
    cc = details.get("compute_capability")
    return str(details.get("device_name") or getattr(device, "name", "GPU")), ("%d.%d" % tuple(cc[:2]) if cc else None)


def gather_tf_facts(tf: Any, devices: List[Any], dists: Dict[str, str], info: Dict[str, Any]) -> Dict[str, Any]:
    nvml = Nvml.load()
    gpus = []
    for i, d in enumerate(devices):
        name, cc = tf_device_details(tf, d)
        gpus.append({"index": i, "name": name, "cc": cc, "memory_gib": None})  # tensorflow reports no total memory
    caps = info.get("cuda_compute_capabilities")
    found = {"framework": "tensorflow", "python": platform.python_version(), "tensorflow": str(tf.__version__),
             "build_cuda": str(info["cuda_version"]) if info.get("cuda_version") else None,
             "build_cudnn": str(info["cudnn_version"]) if info.get("cudnn_version") else None,
             "arch_list": [str(c) for c in caps] if caps else None, "driver": nvml.driver_version() if nvml else None}
    found.update({k: (v[1] if v else None) for k, v in library_versions(dists, CUDA_DISTRIBUTIONS).items()})
    return dict({k: found[k] for k in TF_FACTS}, gpus=gpus)


def check_tf_version(ctx: Context) -> Check:
    actual = str(ctx.facts.get("tensorflow"))
    if "tensorflow" not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no tensorflow; found tensorflow {actual}")
    want = str(ctx.expect["tensorflow"])
    if actual.partition("+")[0] == want.partition("+")[0]:
        return Check("passed", actual, want, f"tensorflow {actual} matches the lock's {want}")
    return Check("failed", actual, want, f"tensorflow {actual} does not match expected {want}")


def built_against(installed: Optional[str], built: Optional[str], what: str) -> Optional[str]:
    """Why `installed` cannot serve a build made against `built` (same major, not older), or None."""
    if built is None:
        return None  # tensorflow does not say
    if installed is None:
        return f"no {what} is installed, but tensorflow was built against {what} {built}"
    if ints(installed)[:1] != ints(built)[:1]:
        return f"{what} {installed} is another major version than the {built} tensorflow was built against"
    if padded(installed, len(ints(built))) < padded(built, len(ints(built))):
        return f"{what} {installed} is older than the {built} tensorflow was built against"
    return None


def check_tf_build_info(ctx: Context) -> Check:
    """What tensorflow was compiled against must run with what is installed: CUDA and cuDNN of the
    same major, not older (CUDA's minor-version compatibility; cuDNN's within a major)."""
    info, f = ctx.build_info, ctx.facts
    value = {"is_cuda_build": info.get("is_cuda_build"), "build_cuda": f["build_cuda"], "build_cudnn": f["build_cudnn"],
             "cuda_compute_capabilities": f["arch_list"], "cuda": f["cuda"], "cudnn": f["cudnn"]}
    if not info:
        return Check("failed", value, None, "tf.sysconfig.get_build_info() is unavailable")
    if not info.get("is_cuda_build"):
        if ctx.expect.get("cuda") is not None:
            return Check("failed", value, None, f"tensorflow was built without CUDA but the lock expects the CUDA "
                                                f"runtime {ctx.expect['cuda']}")
        return Check("passed", value, None, "a CPU-only tensorflow build, as the lock expects")
    bad = [why for why in (built_against(f["cuda"], f["build_cuda"], "CUDA"),
                           built_against(f["cudnn"], f["build_cudnn"], "cuDNN")) if why]
    if bad:
        return Check("failed", value, None, "; ".join(bad))
    return Check("passed", value, None, f"built against CUDA {f['build_cuda']} and cuDNN {f['build_cudnn']}, which the "
                                        f"installed CUDA runtime {f['cuda']} and cuDNN {f['cudnn']} serve; compiled for "
                                        f"{' '.join(f['arch_list'] or []) or 'no compute capability'}")


def tf_on(tensor: Any, device: str) -> bool:
    """Whether a tensor or variable lives on `device` ("/GPU:0": '/job:.../device:GPU:0')."""
    return str(tensor.device).upper().endswith("DEVICE:" + device.strip("/").upper())


def tf_mlp_train(tf: Any, device: str, dtype: Any, steps: int, width: int = 32, lr: float = 0.05,
                 loss_scale: float = 1.0) -> Dict[str, Any]:
    """An 8 -> width -> 1 tanh MLP trained eagerly with tf.GradientTape and momentum SGD on `device`;
    the forward pass runs in `dtype` (variables, loss and update in float32). The gradient is taken
    of the loss times `loss_scale` and divided by it (float16 keeps small gradients that way)."""
    with tf.device(device):
        gen = tf.random.Generator.from_seed(0)
        x = gen.normal((256, 8))
        y = tf.matmul(x, gen.normal((8, 1))) + 0.1 * tf.sin(3 * x[:, :1])
        params = [tf.Variable(gen.normal((8, width)) / 8 ** 0.5), tf.Variable(tf.zeros((width,))),
                  tf.Variable(gen.normal((width, 1)) / width ** 0.5), tf.Variable(tf.zeros((1,)))]
        momentum = [tf.Variable(tf.zeros_like(p)) for p in params]
        losses, start = [], time.perf_counter()
        for _ in range(steps):
            with tf.GradientTape() as tape:
                w1, b1, w2, b2 = (tf.cast(p, dtype) for p in params)
                out = tf.matmul(tf.tanh(tf.matmul(tf.cast(x, dtype), w1) + b1), w2) + b2
                loss = tf.reduce_mean(tf.square(tf.cast(out, tf.float32) - y))
                scaled = loss * loss_scale
            for p, m, g in zip(params, momentum, tape.gradient(scaled, params)):
                m.assign(0.9 * m + g / loss_scale)
                p.assign_sub(lr * m)
            losses.append(loss)
    off = [str(t.device) for t in [losses[-1]] + params if not tf_on(t, device)]
    if off:
        raise RuntimeError(f"the train step ran on {off[0]}, not on {device}")
    values = [float(v) for v in losses]  # host syncs only after the loop
    return {"dtype": str(getattr(dtype, "name", dtype)), "first_loss": finite(values[0]),
            "last_loss": finite(values[-1]), "steps": steps, "device": device,
            "seconds": round(time.perf_counter() - start, 3)}


def check_tf_cpu_train(ctx: Context) -> Check:
    tf = ctx.tf
    value = tf_mlp_train(tf, "/CPU:0", tf.float32, ctx.steps or 30)
    first, last = value["first_loss"], value["last_loss"]
    text = f"{first} -> {last} in {value['steps']} tf.GradientTape steps on {value['device']}"
    if first is not None and last is not None and last <= 0.5 * first:
        return Check("passed", value, None, f"CPU loss fell {text}")
    return Check("failed", value, None, f"CPU loss did not fall by 50% ({text})")


def check_tf_gpu_devices(ctx: Context) -> Check:
    value = {"available": ctx.cuda_ok, "device_count": len(ctx.facts["gpus"]),
             "is_cuda_build": ctx.build_info.get("is_cuda_build")}
    if not ctx.cuda_ok:
        why = "" if value["is_cuda_build"] else "; this tensorflow was built without CUDA"
        return Check("failed", value, {"available": True}, f"certify mode requested but {NO_GPU} "
                     f"(tf.config.list_physical_devices('GPU') found none{why}; tensorflow logs why on stderr, "
                     f"e.g. a failed cuInit or a library it could not load)")
    return Check("passed", value, None, f"{value['device_count']} GPU device(s) visible to tensorflow: "
                                        + ", ".join(g["name"] for g in ctx.facts["gpus"]))


def check_tf_cc_covered(ctx: Context) -> Check:
    """Each device's compute capability against those tensorflow was compiled for (its build info)."""
    archs, gpus = ctx.facts.get("arch_list") or [], ctx.facts["gpus"]
    value = {"devices": [{"index": g["index"], "name": g["name"], "cc": g["cc"]} for g in gpus], "arch_list": archs}
    bad = [f"device {g['index']} ({g['name']}, cc {g['cc'] or 'unknown'})" for g in gpus
           if not g["cc"] or not arch_covers(archs, tuple(padded(g["cc"], 2)))]
    if bad:
        return Check("failed", value, archs, f"{'; '.join(bad)} not covered by the compute capabilities tensorflow was "
                                             f"built for ({' '.join(archs) or 'none reported'})")
    cubins = [a for a in archs if a.startswith("sm_")]
    ptx = [f"device {g['index']} (cc {g['cc']})" for g in gpus if not arch_covers(cubins, tuple(padded(g["cc"], 2)))]
    note = f"; {', '.join(ptx)} by PTX only (JIT-compiled at first use)" if ptx else ""
    return Check("passed", value, archs, f"every device is covered by tensorflow's {' '.join(archs)}{note}")


def tf_mixed_dtype(ctx: Context) -> Tuple[Any, float]:
    """bfloat16 where GPU 0 has it in hardware (cc >= 8.0), else float16 with a static loss scale."""
    tf = ctx.tf
    return (tf.bfloat16, 1.0) if cc_at_least(ctx.facts["gpus"][0]["cc"] or 0, "8.0") else (tf.float16, 128.0)


def check_tf_gpu_train(ctx: Context) -> Check:
    dtype, scale = tf_mixed_dtype(ctx)
    value = tf_mlp_train(ctx.tf, "/GPU:0", dtype, ctx.steps or 40, width=256, lr=0.02, loss_scale=scale)
    first, last = value["first_loss"], value["last_loss"]
    if first is not None and last is not None and last < first:
        return Check("passed", value, None, f"{value['dtype']} loss fell {first:.4f} -> {last:.4f} in {value['steps']} "
                                            f"steps on {value['device']} ({value['seconds']} s)")
    return Check("failed", value, None, f"{value['dtype']} loss did not fall on {value['device']} ({first} -> {last})")


def tf_memory_probe(tf: Any, device: str = "GPU:0", mib: int = 256) -> Dict[str, Any]:
    """tensorflow's allocator readings (get_memory_info: bytes in use now, and the peak) around a
    block of `mib` MiB written on `device`."""
    def used() -> Dict[str, int]:
        return dict(tf.config.experimental.get_memory_info(device))
    before = used()
    with tf.device("/" + device):
        block = tf.fill((mib * 2**18,), 1.0)  # mib MiB of float32
        during = used()
        written = float(tf.reduce_sum(block)) == mib * 2**18
        del block
    after = used()
    return {"requested_mib": mib, "written": written, "before_mib": round(before["current"] / 2**20, 1),
            "during_mib": round(during["current"] / 2**20, 1), "after_mib": round(after["current"] / 2**20, 1),
            "peak_mib": round(after["peak"] / 2**20, 1)}


def check_tf_memory(ctx: Context) -> Check:
    value = tf_memory_probe(ctx.tf)
    grew = value["during_mib"] - value["before_mib"]
    if not value["written"]:
        return Check("failed", value, None, f"a {value['requested_mib']} MiB block on GPU:0 did not hold what was written")
    if grew < value["requested_mib"]:
        return Check("failed", value, None, f"tensorflow's allocator counted {grew:.1f} MiB for a "
                                            f"{value['requested_mib']} MiB block on GPU:0")
    return Check("passed", value, None, f"{value['requested_mib']} MiB block: in use {value['before_mib']} -> "
                                        f"{value['during_mib']} -> {value['after_mib']} MiB; peak {value['peak_mib']} MiB")


def tf_matmul_tflops(tf: Any, device: str, dtype: Any, n: int = 8192, iters: int = 10, windows: int = 5,
                     warmup_s: float = 0.3, clock: Callable[[], float] = time.perf_counter) -> float:
    """Dense n x n matmul rate (2*n^3 flops each) on `device`: one untimed run, warm-up windows until
    `warmup_s`, then the median of `windows` windows of `iters` matmuls, each timed on the host until
    the last result can be read (one stream: every earlier matmul has finished by then)."""
    with tf.device(device):
        gen = tf.random.Generator.from_seed(0)
        a, b = tf.cast(gen.normal((n, n)), dtype), tf.cast(gen.normal((n, n)), dtype)

        def ready(t: Any) -> None:
            t[:1, :1].numpy()  # a device-to-host copy: waits for the kernels that produce t

        ready(tf.matmul(a, b))  # the first run (library setup): not timed

        def window() -> float:
            start = clock()
            for _ in range(iters):
                out = tf.matmul(a, b)
            ready(out)
            return clock() - start

        spent, rounds = 0.0, 0
        while spent < warmup_s and rounds < 100:
            spent, rounds = spent + window(), rounds + 1
        times = sorted(window() for _ in range(windows))
    return 2 * n**3 * iters / times[len(times) // 2] / 1e12


def check_tf_matmul(ctx: Context) -> Check:
    tf, n = ctx.tf, 8192
    kinds = [("bf16_matmul_tflops", tf.bfloat16)] if cc_at_least(ctx.facts["gpus"][0]["cc"] or 0, "8.0") else []
    values = {key: round(tf_matmul_tflops(tf, "/GPU:0", dtype, n), 1)
              for key, dtype in kinds + [("fp16_matmul_tflops", tf.float16)]}
    text = ", ".join(f"{k.split('_')[0]} {v} TFLOP/s" for k, v in values.items())
    return floor_check(ctx, values, "matmul throughput", f"{n}x{n} tf.matmul (median of 5 timed windows): {text}")


# (name, function, gpu_only), in run order: TensorFlow's own checks and the shared ones
TF_REGISTRY: List[Tuple[str, Callable[[Context], Check], bool]] = [
    ("python_version", check_python, False),
    ("tensorflow_version", check_tf_version, False),
    ("cuda_runtime", check_wheel_cuda_runtime, False),
    ("cudnn_version", check_wheel_cudnn, False),
    ("nccl_version", check_wheel_nccl, False),
    ("build_info", check_tf_build_info, False),
    ("pip_check", check_pip, False),
    ("cpu_train_step", check_tf_cpu_train, False),
    ("nvidia_smi", check_nvidia_smi, True),
    ("gpu_devices", check_tf_gpu_devices, True),
    ("cc_covered", needs_cuda(check_tf_cc_covered), True),
    ("gpu_train_step", needs_cuda(check_tf_gpu_train), True),
    ("memory", needs_cuda(check_tf_memory), True),
    ("matmul_tflops", needs_cuda(check_tf_matmul), True),
    ("telemetry", check_telemetry, True),
]
TF_CHECKS = {name: fn for name, fn, _ in TF_REGISTRY}


def setup_tf(ctx: Context, mode: str) -> None:
    """Import tensorflow (it runs on the CPU when it finds no GPU) and gather its facts."""
    # Allocate GPU memory as needed, not nearly all of it at start: memory readings then mean something.
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    import tensorflow as tf
    ctx.tf = tf
    ctx.gpu_devices = tf_gpu_devices(tf)
    ctx.cuda_ok = bool(ctx.gpu_devices)
    if mode == "auto":
        ctx.mode = "certify" if ctx.cuda_ok else "verify"
    ctx.current = "gather facts"
    ctx.build_info = tf_build_info(tf)
    ctx.facts = gather_tf_facts(tf, ctx.gpu_devices, distribution_versions(), ctx.build_info)


# ---------------------------------------------------------------------- runner
def gather_facts(torch: Any, cuda_ok: bool) -> Dict[str, Any]:
    nvml = Nvml.load()
    gpus = []
    for i in range(torch.cuda.device_count() if cuda_ok else 0):
        p = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": p.name, "cc": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 2)})
    libs = read_library_versions(torch)
    return {"python": platform.python_version(), "torch": str(torch.__version__), "cuda": torch.version.cuda,
            "cudnn": libs["cudnn"], "nccl": libs["nccl"], "arch_list": libs["arch_list"] or None,
            "gpus": gpus, "driver": nvml.driver_version() if nvml else None}


def registry_for(framework: str) -> List[Tuple[str, Callable[[Context], Check], bool]]:
    return {"jax": JAX_REGISTRY, "tensorflow": TF_REGISTRY}.get(framework, REGISTRY)


def run_checks(ctx: Context) -> None:
    for name, fn, gpu_only in registry_for(ctx.framework):
        ctx.current, start = name, time.monotonic()
        if gpu_only and ctx.mode == "verify":
            result = Check("skipped", None, None, VERIFY_FORCED if ctx.cuda_ok else NO_GPU)
        else:
            try:
                result = fn(ctx)
            except Exception as e:
                traceback.print_exc(file=sys.stderr)
                result = Check("failed", None, None, f"check raised {type(e).__name__}: {e}")
            if gpu_only and ctx.cuda_ok:  # free what the check left so later probes are not starved
                try:
                    gc.collect()
                    if ctx.torch is not None:
                        ctx.torch.cuda.empty_cache()
                except Exception:  # e.g. a sticky CUDA error: the next checks report it themselves
                    traceback.print_exc(file=sys.stderr)
        result.name, result.seconds = name, round(time.monotonic() - start, 3)
        with ctx.lock:
            ctx.results.append(result)
    ctx.current = ""


def overall_status(mode: str, results: List[Check]) -> str:
    """Any failure fails; certified needs certify mode with a usable CUDA device."""
    if any(r.status == "failed" for r in results):
        return "failed"
    if mode == "verify":
        return "verified"
    return "certified" if any(r.name in DEVICE_CHECKS and r.status == "passed" for r in results) else "failed"


def payload_sha256() -> str:
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build_document(ctx: Context, results: List[Check]) -> Dict[str, Any]:
    return {"schema": SCHEMA, "payload": {"version": PAYLOAD_VERSION, "sha256": payload_sha256()},
            "mode": ctx.mode, "status": overall_status(ctx.mode, results), "facts": ctx.facts,
            "checks": [r.to_json() for r in results], "telemetry": list(ctx.sampler.samples) if ctx.sampler else [],
            "seconds": round(time.monotonic() - ctx.t0, 3)}


def render_table(doc: Dict[str, Any]) -> str:
    facts, width = doc["facts"], max([len(c["name"]) for c in doc["checks"]] + [5])
    shown = TABLE_FACTS.get(str(facts.get("framework") or "torch"), TABLE_FACTS["torch"])
    lines = [f"envkit payload {doc['payload']['version']} (sha256 {doc['payload']['sha256'][:12]}): mode {doc['mode']}, "
             f"status {doc['status'].upper()} in {doc['seconds']:.1f} s",
             "  ".join(f"{k} {facts.get(k) or '-'}" for k in shown),
             "", f"{'CHECK':<{width}}  {'STATUS':<7}  {'SECONDS':>7}  MESSAGE"]
    lines += [f"{c['name']:<{width}}  {c['status']:<7}  {c['seconds']:>7.2f}  {c['message']}" for c in doc["checks"]]
    return "\n".join(lines) + "\n"


def emit(ctx: Context, out: Any, as_json: bool, results: List[Check]) -> str:
    """Write the run's one document (caller holds ctx.lock); return its status."""
    doc = build_document(ctx, results)
    out.write(json.dumps(doc, indent=2, default=str) + "\n" if as_json else render_table(doc))
    out.flush()
    ctx.done = True
    return doc["status"]


def start_watchdog(ctx: Context, out: Any, as_json: bool, timeout: float) -> threading.Timer:
    """After `timeout` s: report what finished plus a failed `timeout` check, kill children, exit 1."""
    def fire() -> None:
        with ctx.lock:
            if ctx.done:
                return
            late = Check("failed", {"timeout_s": timeout, "running": ctx.current or None}, None,
                         f"payload exceeded --timeout {timeout:g} s while running {ctx.current or 'setup'}", "timeout")
            emit(ctx, out, as_json, list(ctx.results) + [late])
            for child in multiprocessing.active_children():
                child.kill()
            os._exit(1)
    timer = threading.Timer(timeout, fire)
    timer.daemon = True
    timer.start()
    return timer


def parse_args(argv: Optional[List[str]]) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    p = argparse.ArgumentParser(prog="envkit_check.py", description="Verify or certify a PyTorch, JAX or TensorFlow image from inside.")
    p.add_argument("--expect", metavar="FILE", help="JSON object: what the lock says the image holds")
    p.add_argument("--mode", choices=["verify", "certify", "auto"], default="auto",
                   help="auto (default): certify when a CUDA device is usable, else verify")
    p.add_argument("--framework", choices=["torch", "jax", "tensorflow", "auto"], default="auto",
                   help="auto (default): the expect file's, else the one installed (torch first)")
    p.add_argument("--steps", type=int, metavar="N", help="optimizer steps of the train checks (default 30 CPU, 40 CUDA)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout; everything else on stderr")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="fail the whole run after S seconds (300)")
    args = p.parse_args(argv)
    if args.steps is not None and args.steps < 2:
        p.error("--steps must be at least 2")
    if not args.timeout > 0:
        p.error("--timeout must be positive")
    expect: Any = {}
    if args.expect:
        try:
            with open(args.expect, encoding="utf-8") as f:
                expect = json.load(f)
        except (OSError, ValueError) as e:
            p.error(f"--expect {args.expect}: {e}")
        if not isinstance(expect, dict):
            p.error(f"--expect {args.expect}: must hold a JSON object, not {type(expect).__name__}")
    return args, expect


def choose_framework(arg: str, expect: Dict[str, Any]) -> str:
    """--framework, else the expect file's (JAX's names itself; PyTorch's has a "torch" key), else
    whichever is installed, torch first. Found with importlib, never by importing the other one."""
    if arg != "auto":
        return arg
    if expect.get("framework"):
        return str(expect["framework"])
    if "torch" in expect:
        return "torch"
    for name in ("jax", "tensorflow"):
        if name in expect:
            return name
    if importlib.util.find_spec("torch") is None:
        for name in ("jax", "tensorflow"):
            if importlib.util.find_spec(name) is not None:
                return name
    return "torch"


def setup_torch(ctx: Context, mode: str) -> None:
    import torch
    ctx.torch = torch
    try:
        ctx.cuda_ok = bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:
        ctx.cuda_ok = False
    if mode == "auto":
        ctx.mode = "certify" if ctx.cuda_ok else "verify"
    ctx.current = "gather facts"
    ctx.facts = gather_facts(torch, ctx.cuda_ok)


# Per framework: how the run starts, the facts a document always has, and those its table shows.
SETUPS = {"torch": setup_torch, "jax": setup_jax, "tensorflow": setup_tf}
FACT_KEYS = {"torch": ["python", "torch", "cuda", "cudnn", "nccl", "arch_list", "driver"], "jax": JAX_FACTS,
             "tensorflow": TF_FACTS}
TABLE_FACTS = {"torch": ("python", "torch", "cuda", "cudnn", "nccl", "driver"),
               "jax": ("python", "jax", "jaxlib", "cuda", "cudnn", "nccl", "driver"),
               "tensorflow": ("python", "tensorflow", "cuda", "cudnn", "nccl", "build_cuda", "driver")}


def initial_facts(framework: str) -> Dict[str, Any]:
    """The document's facts before (or if never) gathered: every key, None."""
    facts: Dict[str, Any] = dict.fromkeys(FACT_KEYS.get(framework, FACT_KEYS["torch"]), None)
    if "framework" in facts:  # frameworks after PyTorch name themselves
        facts["framework"] = framework
    facts.update(python=platform.python_version(), gpus=[])
    return facts


def main(argv: Optional[List[str]] = None) -> int:
    args, expect = parse_args(argv)
    out = sys.stdout
    if args.json:  # keep fd 1 for the document; C-level and child-process noise goes to stderr
        sys.stdout.flush()
        out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)
    framework = choose_framework(args.framework, expect)
    ctx = Context(expect=expect, mode="verify" if args.mode == "auto" else args.mode, t0=time.monotonic(),
                  steps=args.steps, framework=framework, facts=initial_facts(framework), current=f"import {framework}")
    watchdog = start_watchdog(ctx, out, args.json, args.timeout)
    try:
        if framework not in SETUPS:
            raise ValueError(f"this payload checks torch, jax and tensorflow images; the expect file names {framework!r}")
        SETUPS[framework](ctx, args.mode)
        nvml = Nvml.load() if ctx.mode == "certify" else None
        if nvml is not None:
            ctx.sampler = Sampler(nvml, ctx.t0)
            ctx.sampler.start()
        run_checks(ctx)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        with ctx.lock:
            ctx.results.append(Check("failed", None, None, f"{ctx.current} failed: {type(e).__name__}: {e}", "setup"))
    finally:
        if ctx.sampler is not None:
            ctx.sampler.stop()
    with ctx.lock:
        if ctx.done:  # the watchdog has already reported
            return 1
        watchdog.cancel()
        status = emit(ctx, out, args.json, list(ctx.results))
    return 0 if status in ("verified", "certified") else 1


if __name__ == "__main__":
    sys.exit(main())
