"""envkit payload, PyTorch: torch's facts, its static and CPU checks, and its registry (the CUDA-device
checks are in envkit_check_torch_cuda). torch is imported by ``setup`` only, so importing this module
imports no framework.

Standard library + torch (2.0 to 2.15; Python 3.9+). Reference: docs/payload.md, "Checks (PyTorch images)".
"""
from __future__ import annotations

import ctypes
import os
import platform
from typing import Any, Dict, Optional

from envkit_check_core import (Check, Context, Registry, check_pip, check_python, compare_version, devices_found,
                               finite)
from envkit_check_imports import check_requested
from envkit_check_nvml import Nvml, check_nvidia_smi, check_telemetry
from envkit_check_torch_cuda import (check_arch_covered, check_bandwidth, check_cuda_available, check_cuda_train,
                                     check_dataloader, check_matmul, check_memory, check_nccl_allreduce,
                                     dataloader_check)

FACTS = ["python", "torch", "cuda", "cudnn", "nccl", "arch_list", "driver"]  # the document's facts (and "gpus")
TABLE_FACTS = ("python", "torch", "cuda", "cudnn", "nccl", "driver")


def decode_version_int(v: int) -> str:
    """cuDNN/NCCL int to "M.m.p": M*10000+m*100+p from 9.x (NCCL 2.9+), M*1000+m*100+p before."""
    major, rest = divmod(int(v), 10000 if int(v) >= 10000 else 1000)
    return "%d.%d.%d" % (major, rest // 100, rest % 100)


def nccl_version_str(v: Any) -> Optional[str]:
    """torch.cuda.nccl.version() is (M, m, p[, suffix]) or an int, depending on torch."""
    if v is None:
        return None
    return ".".join(str(x) for x in v[:3]) if isinstance(v, (tuple, list)) else decode_version_int(v)


def loaded_library(prefix: str, maps: str = "/proc/self/maps") -> Optional[str]:
    """The path of a library this process has mapped whose file name starts with `prefix` (None: none)."""
    try:
        with open(maps) as f:
            for line in f:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(prefix):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def loaded_nccl_version(maps: str = "/proc/self/maps") -> Optional[str]:
    """What the libnccl torch loaded says it is (``ncclGetVersion``): the library that runs, where
    ``torch.cuda.nccl.version()`` is the one torch was compiled against. None when no libnccl is mapped
    (a CPU build, or NCCL linked into torch: then torch's number is the library's)."""
    path = loaded_library("libnccl.so", maps)
    if path is None:
        return None
    try:
        code = ctypes.c_int(0)
        if ctypes.CDLL(path).ncclGetVersion(ctypes.byref(code)) != 0 or code.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return decode_version_int(code.value)


def read_library_versions(torch: Any) -> Dict[str, Any]:
    """cuDNN, NCCL and compiled archs, all readable without a GPU (None/[] when absent)."""
    found: Dict[str, Any] = {"cudnn": None, "nccl": None, "arch_list": []}
    try:
        v = torch.backends.cudnn.version()
        found["cudnn"] = decode_version_int(v) if v else None
    except Exception:
        pass
    try:
        found["nccl"] = loaded_nccl_version() or nccl_version_str(torch.cuda.nccl.version())
    except Exception:
        pass
    try:
        getter = getattr(torch._C, "_cuda_getArchFlags", None)
        flags = getter() if getter is not None else None
        found["arch_list"] = str(flags).split() if flags else list(torch.cuda.get_arch_list())
    except Exception:
        pass
    return found


def gather_facts(torch: Any, cuda_ok: bool) -> Dict[str, Any]:
    nvml = Nvml.load()
    gpus = []
    for i in range(torch.cuda.device_count() if cuda_ok else 0):
        p = torch.cuda.get_device_properties(i)
        gpus.append(
            {"index": i, "name": p.name, "cc": f"{p.major}.{p.minor}", "memory_gib": round(p.total_memory / 2**30, 2)}
        )
    libs = read_library_versions(torch)
    return {"python": platform.python_version(), "torch": str(torch.__version__), "cuda": torch.version.cuda,
            "cudnn": libs["cudnn"], "nccl": libs["nccl"], "arch_list": libs["arch_list"] or None,
            "gpus": gpus, "driver": nvml.driver_version() if nvml else None}


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


def check_cuda_runtime(ctx: Context) -> Check:
    return compare_version(ctx, "cuda", "CUDA runtime", ctx.facts["cuda"], 2, both_none="passed",
                           absent="CPU-only torch: torch.version.cuda is None")


def check_cudnn(ctx: Context) -> Check:
    return compare_version(ctx, "cudnn", "cuDNN", ctx.facts["cudnn"], 3)


def check_nccl_version(ctx: Context) -> Check:
    return compare_version(ctx, "nccl", "NCCL", ctx.facts["nccl"], 3)


def check_arch_list(ctx: Context) -> Check:
    actual = ctx.facts["arch_list"] or []
    if "arch_list" not in ctx.expect:
        return Check("skipped", actual, None, f"lock gives no arch_list; found {' '.join(actual) or 'none'}")
    want = ctx.expect["arch_list"] or []
    missing, extra = sorted(set(want) - set(actual)), sorted(set(actual) - set(want))
    if not want and not actual:
        return Check(
            "passed", actual, ctx.expect["arch_list"], "no CUDA archs compiled (CPU-only build), as the lock expects"
        )
    if not missing and not extra:
        return Check("passed", actual, want, f"compiled archs {' '.join(actual)} match the lock")
    return Check(
        "failed",
        actual,
        ctx.expect["arch_list"],
        f"compiled archs {' '.join(actual) or '(none)'} differ from the "
        f"lock's {' '.join(want) or '(none)'}: missing {missing}, unexpected {extra}",
    )


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


def check_dataloader_cpu(ctx: Context) -> Check:
    return dataloader_check(ctx, None, False)


def setup(ctx: Context, mode: str) -> None:
    """Import torch and gather its facts."""
    import torch
    ctx.torch = torch
    try:
        usable = bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    except Exception:
        usable = False
    devices_found(ctx, usable, mode)
    ctx.facts = gather_facts(torch, ctx.cuda_ok)


def release(ctx: Context) -> None:
    """After a GPU check: hand the memory torch cached back to the device, so later probes are not starved."""
    ctx.torch.cuda.empty_cache()


# (name, function, gpu_only), in run order
REGISTRY: Registry = [
    ("python_version", check_python, False),
    ("torch_version", check_torch, False),
    ("cuda_runtime", check_cuda_runtime, False),
    ("cudnn_version", check_cudnn, False),
    ("nccl_version", check_nccl_version, False),
    ("arch_list", check_arch_list, False),
    ("pip_check", check_pip, False),
    ("requested_imports", check_requested, False),  # the spec's pip: packages import
    ("cpu_train_step", check_cpu_train, False),
    ("dataloader_cpu", check_dataloader_cpu, False),
    ("nvidia_smi", check_nvidia_smi, True),
    ("cuda_available", check_cuda_available, True),
    ("arch_covered", check_arch_covered, True),
    ("cuda_train_step", check_cuda_train, True),
    ("memory", check_memory, True),
    ("dataloader", check_dataloader, True),
    ("matmul_tflops", check_matmul, True),
    ("h2d_d2h_bandwidth", check_bandwidth, True),
    ("nccl_allreduce", check_nccl_allreduce, True),  # after the probes: it starts processes, and may hang
    ("telemetry", check_telemetry, True),
]
CHECKS = {name: fn for name, fn, _ in REGISTRY}
