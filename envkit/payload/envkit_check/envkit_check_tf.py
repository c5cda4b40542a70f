"""envkit payload, TensorFlow: tensorflow's facts, checks and registry.

A TensorFlow image (tensorflow[and-cuda]) holds tensorflow with the CUDA libraries as nvidia-*
wheels. Its checks read those versions from the installed distributions (the lock's pins) and
what tensorflow was compiled against and for from tf.sysconfig.get_build_info() (CUDA, the
cuDNN major, compute capabilities), train on the CPU, and (certify mode) probe the GPUs through
tensorflow (nccl_allreduce: envkit_check_tf_allreduce). The shared checks (python_version, the
nvidia-* versions, pip_check, nvidia_smi, telemetry; requested_imports) are the core's, NVML
module's and imports module's own functions. tensorflow is imported by ``setup`` only; torch and jax never are.

Standard library + tensorflow (2.20 tried; Python 3.9+). Reference: docs/payload.md, "TensorFlow images".
"""
from __future__ import annotations

import os
import platform
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from envkit_check_core import (CUDA_DISTRIBUTIONS, NO_GPU, Check, Context, Registry, arch_covers, cc_at_least,
                               check_pip, check_python, check_wheel_cuda_runtime, check_wheel_cudnn, check_wheel_nccl,
                               cpu_loss_check, devices_found, distribution_versions, finite, floor_check, ints,
                               library_versions, matmul_rate, needs_cuda, padded)
from envkit_check_imports import check_requested
from envkit_check_nvml import Nvml, check_nvidia_smi, check_telemetry
from envkit_check_tf_allreduce import check_tf_allreduce

FACTS = ["framework", "python", "tensorflow", "cuda", "cudnn", "nccl", "build_cuda", "build_cudnn", "arch_list",
            "driver"]
TABLE_FACTS = ("python", "tensorflow", "cuda", "cudnn", "nccl", "build_cuda", "driver")


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
    return dict({k: found[k] for k in FACTS}, gpus=gpus)


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
    return Check(
        "passed",
        value,
        None,
        f"built against CUDA {f['build_cuda']} and cuDNN {f['build_cudnn']}, which the "
        f"installed CUDA runtime {f['cuda']} and cuDNN {f['cudnn']} serve; compiled for "
        f"{' '.join(f['arch_list'] or []) or 'no compute capability'}",
    )


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
    return cpu_loss_check(value, f"tf.GradientTape steps on {value['device']}")


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
           if not g["cc"] or not arch_covers(archs, _cc_pair(g["cc"]))]
    if bad:
        return Check("failed", value, archs, f"{'; '.join(bad)} not covered by the compute capabilities tensorflow was "
                                             f"built for ({' '.join(archs) or 'none reported'})")
    cubins = [a for a in archs if a.startswith("sm_")]
    ptx = [f"device {g['index']} (cc {g['cc']})" for g in gpus if not arch_covers(cubins, _cc_pair(g["cc"]))]
    note = f"; {', '.join(ptx)} by PTX only (JIT-compiled at first use)" if ptx else ""
    return Check("passed", value, archs, f"every device is covered by tensorflow's {' '.join(archs)}{note}")


def _cc_pair(cc: Any) -> Tuple[int, int]:
    major, minor = padded(cc, 2)
    return major, minor


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
        return Check(
            "failed", value, None, f"a {value['requested_mib']} MiB block on GPU:0 did not hold what was written"
        )
    if grew < value["requested_mib"]:
        return Check("failed", value, None, f"tensorflow's allocator counted {grew:.1f} MiB for a "
                                            f"{value['requested_mib']} MiB block on GPU:0")
    return Check(
        "passed",
        value,
        None,
        f"{value['requested_mib']} MiB block: in use {value['before_mib']} -> "
        f"{value['during_mib']} -> {value['after_mib']} MiB; peak {value['peak_mib']} MiB",
    )


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

        return matmul_rate(window, n, iters, windows, warmup_s)


def check_tf_matmul(ctx: Context) -> Check:
    tf, n = ctx.tf, 8192
    kinds = [("bf16_matmul_tflops", tf.bfloat16)] if cc_at_least(ctx.facts["gpus"][0]["cc"] or 0, "8.0") else []
    values = {key: round(tf_matmul_tflops(tf, "/GPU:0", dtype, n), 1)
              for key, dtype in kinds + [("fp16_matmul_tflops", tf.float16)]}
    text = ", ".join(f"{k.split('_')[0]} {v} TFLOP/s" for k, v in values.items())
    return floor_check(ctx, values, "matmul throughput", f"{n}x{n} tf.matmul (median of 5 timed windows): {text}")


# (name, function, gpu_only), in run order: TensorFlow's own checks and the shared ones
REGISTRY: Registry = [
    ("python_version", check_python, False),
    ("tensorflow_version", check_tf_version, False),
    ("cuda_runtime", check_wheel_cuda_runtime, False),
    ("cudnn_version", check_wheel_cudnn, False),
    ("nccl_version", check_wheel_nccl, False),
    ("build_info", check_tf_build_info, False),
    ("pip_check", check_pip, False),
    ("requested_imports", check_requested, False),  # the spec's pip: packages import
    ("cpu_train_step", check_tf_cpu_train, False),
    ("nvidia_smi", check_nvidia_smi, True),
    ("gpu_devices", check_tf_gpu_devices, True),
    ("cc_covered", needs_cuda(check_tf_cc_covered), True),
    ("gpu_train_step", needs_cuda(check_tf_gpu_train), True),
    ("memory", needs_cuda(check_tf_memory), True),
    ("matmul_tflops", needs_cuda(check_tf_matmul), True),
    ("nccl_allreduce", needs_cuda(check_tf_allreduce), True),
    ("telemetry", check_telemetry, True),
]
CHECKS = {name: fn for name, fn, _ in REGISTRY}


def setup(ctx: Context, mode: str) -> None:
    """Import tensorflow (it runs on the CPU when it finds no GPU) and gather its facts."""
    # Allocate GPU memory as needed, not nearly all of it at start: memory readings then mean something.
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    import tensorflow as tf
    ctx.tf = tf
    ctx.gpu_devices = tf_gpu_devices(tf)
    devices_found(ctx, bool(ctx.gpu_devices), mode)
    ctx.build_info = tf_build_info(tf)
    ctx.facts = gather_tf_facts(tf, ctx.gpu_devices, distribution_versions(), ctx.build_info)
