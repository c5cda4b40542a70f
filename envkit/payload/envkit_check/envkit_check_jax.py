"""envkit payload, JAX: jax's facts, checks and registry.

A JAX image holds jax, jaxlib and the CUDA plugin (jax-cudaNN-plugin + -pjrt), with the CUDA
libraries as nvidia-* wheels. Its checks read those versions from the installed distributions,
train on the CPU backend, and (certify mode) probe the GPUs through jax. The shared checks
(python_version, the nvidia-* versions, pip_check, nvidia_smi, telemetry; requested_imports) are the
core's, NVML module's and imports module's own functions. jax is imported by ``setup`` only; torch and
tensorflow never are.

Standard library + jax (0.4.26+; Python 3.9+). Reference: docs/payload.md, "JAX images".
"""
from __future__ import annotations

import logging
import os
import platform
import re
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from envkit_check_core import (CUDA_DISTRIBUTIONS, NO_GPU, Check, Context, Registry, allreduce_plan,
                               allreduce_verdict, cc_at_least, check_pip, check_python, check_wheel_cuda_runtime,
                               check_wheel_cudnn, check_wheel_nccl, cpu_loss_check, devices_found,
                               distribution_versions, finite, floor_check, library_versions, matmul_rate, needs_cuda,
                               timed_rounds)
from envkit_check_imports import check_requested
from envkit_check_nvml import Nvml, check_nvidia_smi, check_telemetry

JAX_DISTRIBUTIONS = dict(CUDA_DISTRIBUTIONS, cuda_plugin=r"jax-cuda\d+-plugin")
FACTS = ["framework", "python", "jax", "jaxlib", "cuda_plugin", "cuda", "cudnn", "nccl", "backend", "driver"]
TABLE_FACTS = ("python", "jax", "jaxlib", "cuda", "cudnn", "nccl", "driver")


def jax_library_versions(dists: Dict[str, str]) -> Dict[str, Any]:
    """CUDA runtime, cuDNN, NCCL and the JAX CUDA plugin."""
    return library_versions(dists, JAX_DISTRIBUTIONS)


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
    found = {
        "framework": "jax",
        "python": platform.python_version(),
        "jax": str(jax.__version__),
        "jaxlib": jaxlib_version,
        "backend": backend,
        "driver": nvml.driver_version() if nvml else None,
    }
    found.update({k: (v[1] if v else None) for k, v in libs.items()})
    return dict({k: found[k] for k in FACTS}, gpus=gpus)


def check_jax_version(ctx: Context) -> Check:
    found = {
        "jax": ctx.facts.get("jax"),
        "jaxlib": ctx.facts.get("jaxlib"),
        "cuda_plugin": ctx.facts.get("cuda_plugin"),
    }
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
    return cpu_loss_check(value, f"jitted jax.grad steps on {value['device']}")


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
        return Check(
            "failed", value, floor, f"{'; '.join(bad)} below the jax build's minimum compute capability {floor}"
        )
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

    return matmul_rate(window, n, iters, windows, warmup_s)


def check_jax_matmul(ctx: Context) -> Check:
    jax, n, dev = ctx.jax, 8192, ctx.gpu_devices[0]
    kinds = [("bf16_matmul_tflops", jax.numpy.bfloat16)] if cc_at_least(ctx.facts["gpus"][0]["cc"] or 0, "8.0") else []
    values = {key: round(jax_matmul_tflops(jax, dev, dtype, n), 1)
              for key, dtype in kinds + [("fp16_matmul_tflops", jax.numpy.float16)]}
    text = ", ".join(f"{k.split('_')[0]} {v} TFLOP/s" for k, v in values.items())
    return floor_check(ctx, values, "matmul throughput", f"{n}x{n} jitted matmul (median of 5 timed windows): {text}")


def jax_allreduce(jax: Any, devices: List[Any], numel: int, iters: int) -> Dict[str, Any]:
    """jax.lax.psum of `numel` float32 per device under shard_map over `devices` (a 1-D mesh; XLA runs it
    on NCCL across GPUs, in-process on CPU devices): checks one sum, then times `iters` chained
    all-reduces after two warm-ups (host clock, until ready)."""
    jnp, world = jax.numpy, len(devices)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    shard_map: Any = getattr(jax, "shard_map", None)
    if shard_map is None:  # jax < 0.7
        from jax.experimental import shard_map as experimental
        shard_map = experimental.shard_map
    mesh = Mesh(devices, ("ranks",))
    spec = PartitionSpec("ranks")
    allreduce = jax.jit(shard_map(lambda s: jax.lax.psum(s, "ranks"), mesh=mesh, in_specs=spec, out_specs=spec))

    def sharded(fill: Callable[[int], float]) -> Any:
        shards = [jax.device_put(jnp.full((numel,), fill(r), dtype=jnp.float32), d) for r, d in enumerate(devices)]
        return jax.make_array_from_single_device_arrays((world * numel,), NamedSharding(mesh, spec), shards)

    out = allreduce(sharded(lambda r: float(r + 1)))  # every device must hold 1 + 2 + ... + world
    correct = bool(jnp.all(out == world * (world + 1) / 2))
    sums = [float(s.data.reshape(-1)[0]) for s in sorted(out.addressable_shards, key=lambda s: s.index[0].start or 0)]
    # timed on zeros: the sums stay finite however many ranks and iterations
    _, seconds = timed_rounds(allreduce, jax.block_until_ready, sharded(lambda r: 0.0), 2, iters)
    return {"world_size": world, "correct": correct, "sums": sums, "numel": numel, "iters": iters, "seconds": seconds,
            "platform": devices[0].platform}


def allreduce_value(ctx: Context) -> Dict[str, Any]:
    return {
        "nccl": ctx.facts.get("nccl"),
        "op": "jax.lax.psum under shard_map",
        "NCCL_ALGO": os.environ.get("NCCL_ALGO"),
    }


def check_jax_allreduce(ctx: Context) -> Check:
    numel, iters = allreduce_plan(len(ctx.gpu_devices))
    return allreduce_verdict(ctx, jax_allreduce(ctx.jax, ctx.gpu_devices, numel, iters), allreduce_value(ctx), "psum")


def cpu_allreduce(world: int = 2, numel: int = 2**18, iters: int = 3) -> Dict[str, Any]:
    """Test hook, never part of a run: nccl_allreduce's code (jax_allreduce, the verdict) on `world` XLA CPU
    devices, the transport XLA's own instead of NCCL. Asks XLA for the devices if jax is not imported yet
    (else XLA_FLAGS=--xla_force_host_platform_device_count=N must have been set). docs/payload.md."""
    flag = f"--xla_force_host_platform_device_count={world}"
    if "jax" not in sys.modules and "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    import jax
    cpus = jax.devices("cpu")
    if len(cpus) < world:
        raise RuntimeError(f"jax has {len(cpus)} CPU device(s), not {world}: set XLA_FLAGS={flag} before importing jax")
    report = jax_allreduce(jax, cpus[:world], numel, iters)
    ctx = Context(expect={}, mode="verify", t0=0.0, framework="jax", jax=jax, facts={"nccl": None})
    return {"report": report, "check": allreduce_verdict(ctx, report, allreduce_value(ctx), "psum").to_json()}


# (name, function, gpu_only), in run order: JAX's own checks and the shared ones
REGISTRY: Registry = [
    ("python_version", check_python, False),
    ("jax_version", check_jax_version, False),
    ("cuda_runtime", check_wheel_cuda_runtime, False),
    ("cudnn_version", check_wheel_cudnn, False),
    ("nccl_version", check_wheel_nccl, False),
    ("pip_check", check_pip, False),
    ("requested_imports", check_requested, False),  # the spec's pip: packages import
    ("cpu_train_step", check_jax_cpu_train, False),
    ("nvidia_smi", check_nvidia_smi, True),
    ("gpu_devices", check_gpu_devices, True),
    ("cc_covered", needs_cuda(check_cc_covered), True),
    ("gpu_train_step", needs_cuda(check_gpu_train), True),
    ("matmul_tflops", needs_cuda(check_jax_matmul), True),
    ("nccl_allreduce", needs_cuda(check_jax_allreduce), True),
    ("telemetry", check_telemetry, True),
]
CHECKS = {name: fn for name, fn, _ in REGISTRY}


def setup(ctx: Context, mode: str) -> None:
    """Import jax (on the CPU backend when there is no GPU) and gather its facts."""
    # Allocate GPU memory as needed, not 75% of it up front: memory readings then mean something.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    ctx.jax_log = JaxLog()
    logging.getLogger("jax").addHandler(ctx.jax_log)
    import jax
    ctx.jax = jax
    ctx.gpu_devices = jax_gpu_devices(jax)
    devices_found(ctx, bool(ctx.gpu_devices), mode)
    ctx.facts = gather_jax_facts(jax, ctx.gpu_devices, distribution_versions())
