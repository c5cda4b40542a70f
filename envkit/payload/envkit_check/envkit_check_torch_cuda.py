"""envkit payload, PyTorch on CUDA devices: torch's GPU-only checks (device, coverage, AMP train step,
memory, pinned DataLoader, NCCL all-reduce, matmul rate, copy bandwidth) and the DataLoader probe
they share with the CPU check. torch is imported through the context or inside functions only.

Standard library + torch (Python 3.9+). Reference: docs/payload.md, "Checks (PyTorch images)".
"""
from __future__ import annotations

import json
import os
import re
import socket
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from envkit_check_core import (
    NO_GPU,
    Check,
    Context,
    allreduce_plan,
    allreduce_rates,
    arch_covers,
    finite,
    floor_check,
    matmul_rate,
    needs_cuda,
)

SHM_MIN_MIB = 512
SHM_FIX = "run with --shm-size=8g or --ipc=host"
SHM_ERROR = re.compile(r"bus error|shared memory|/dev/shm|shm|no space left", re.I)


def shm_mib(path: str = "/dev/shm") -> Optional[float]:
    """Size of the shared-memory filesystem in MiB (None when absent)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return round(st.f_frsize * st.f_blocks / 2**20, 1)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loader_roundtrip(torch: Any, device: Any = None, pin: bool = False) -> Dict[str, Any]:
    """Iterate a 2-worker DataLoader over synthetic data, optionally copying batches to `device`."""
    from torch.utils.data import DataLoader, TensorDataset
    data = torch.randn(512, 64, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(
        TensorDataset(data, torch.arange(512)), batch_size=64, num_workers=2, pin_memory=pin, timeout=120
    )
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
        return Check(
            "failed",
            value,
            {"shm_mib_min": SHM_MIN_MIB},
            f"/dev/shm is {shm:.0f} MiB (< {SHM_MIN_MIB} MiB): DataLoader workers will die of bus errors; {SHM_FIX}",
        )
    if not value["intact"] or (pin and not value["pinned"]):
        return Check("failed", value, None, "DataLoader batches arrived incomplete, corrupted or unpinned")
    where = f"copied to {device} (pinned, non_blocking)" if device is not None else "on CPU"
    return Check("passed", value, None, f"{value['batches']} batches from 2 workers {where}; /dev/shm {shm} MiB")


def check_cuda_available(ctx: Context) -> Check:
    value = {"available": ctx.cuda_ok, "device_count": len(ctx.facts["gpus"])}
    if not ctx.cuda_ok:
        return Check("failed", value, {"available": True},
                     f"certify mode requested but {NO_GPU} (torch.cuda.is_available() is False)")
    return Check("passed", value, None, f"{value['device_count']} CUDA device(s): "
                                        + ", ".join(g["name"] for g in ctx.facts["gpus"]))


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


@needs_cuda
def check_arch_covered(ctx: Context) -> Check:
    archs = ctx.facts["arch_list"] or []
    devices = [
        {"index": i, "name": ctx.torch.cuda.get_device_name(i), "cc": tuple(ctx.torch.cuda.get_device_capability(i))}
        for i in range(ctx.torch.cuda.device_count())
    ]
    bad = [
        f"device {d['index']} ({d['name']}, cc {d['cc'][0]}.{d['cc'][1]})"
        for d in devices
        if not arch_covers(archs, d["cc"])
    ]
    for d in devices:
        d["cc"] = "%d.%d" % d["cc"]
    value = {"devices": devices, "arch_list": archs}
    if bad:
        return Check(
            "failed", value, None, f"{'; '.join(bad)} not covered by compiled archs {' '.join(archs) or '(none)'}"
        )
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
        scaler = amp.GradScaler("cuda") if amp is not None and hasattr(amp, "GradScaler") \
            else torch.cuda.amp.GradScaler()
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
    result: Dict[str, Any] = {
        "dtype": str(dtype).replace("torch.", ""),
        "first_loss": finite(values[0]),
        "last_loss": finite(values[-1]),
        "steps": steps,
        "micro_batches": accum,
        "seconds": round(time.perf_counter() - start, 3),
    }
    if cuda:
        result["memory_mib"] = {k: round(f(device) / 2**20, 1) for k, f in (
            ("allocated", torch.cuda.memory_allocated), ("reserved", torch.cuda.memory_reserved),
            ("peak", torch.cuda.max_memory_allocated))}
    return result


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
    torch.cuda.reset_peak_memory_stats(dev)  # peak_mib above is the train step's; this one is the fitted batch's
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
    value["batch_peak_mib"] = round(torch.cuda.max_memory_allocated(dev) / mib, 1)
    torch.cuda.empty_cache()
    value.update(oom_raised=oom_raised, fitted_mib=round(fitted / mib, 1) if fitted else None)
    if oom_raised and fitted:
        return Check("passed", value, None, f"a 2x-memory request raised OutOfMemoryError, was caught, then a halved "
                                            f"{value['fitted_mib']:.0f} MiB batch succeeded (the train step's peak: "
                                            f"{value['peak_mib']} MiB)")
    return Check("failed", value, None, "no halved batch fitted after the OutOfMemoryError" if oom_raised
                 else "a 2x-memory allocation did not raise OutOfMemoryError")


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


def allreduce_timeout(world: int, deadline: Optional[float], now: Optional[float] = None) -> float:
    """Seconds the all-reduce may take: 180 over several GPUs, 45 on one (a process start, NCCL's init and one
    small all-reduce), and never past the run's watchdog (less 10 s, so the checks after it still report)."""
    limit = 180.0 if world > 1 else 45.0
    if deadline is not None:
        limit = min(limit, deadline - (time.monotonic() if now is None else now) - 10.0)
    return max(limit, 5.0)


def run_allreduce(world: int, backend: str, numel: int, iters: int, timeout: float = 180) -> List[Dict[str, Any]]:
    """Spawn `world` ranks of allreduce_worker; return each rank's report."""
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix="envkit-allreduce-") as out_dir:
        pc = mp.spawn(
            allreduce_worker, args=(world, free_port(), backend, numel, iters, out_dir), nprocs=world, join=False
        )
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


@needs_cuda
def check_nccl_allreduce(ctx: Context) -> Check:
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        return Check("failed", None, None, "torch.distributed has no NCCL backend in this build")
    world = ctx.torch.cuda.device_count()
    numel, iters = allreduce_plan(world)  # 256 MiB of fp32 for bandwidth
    reports = run_allreduce(world, "nccl", numel, iters, allreduce_timeout(world, ctx.deadline))
    value: Dict[str, Any] = {"world_size": world, "nccl": ctx.facts["nccl"], "NCCL_ALGO": os.environ.get("NCCL_ALGO")}
    if not all(r["correct"] for r in reports):
        return Check("failed", value, None, f"NCCL all-reduce over {world} rank(s) returned a wrong sum")
    if world == 1:
        value["note"] = "single GPU: a world_size=1 process group proves NCCL initialises; no bandwidth"
        return Check(
            "passed", value, None, "NCCL initialised and all-reduced with world_size=1 (no bandwidth measured)"
        )
    seconds, size = max(r["seconds"] for r in reports), numel * 4
    value.update(size_mib=size // 2**20, iters=iters, **allreduce_rates(size, world, iters, seconds))
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

    step()  # untimed first: cuBLAS(Lt) loads its kernels and picks one on the host, outside any timed window
    torch.cuda.synchronize(dev)
    # warm-up: clocks up from idle, cuBLAS heuristics and workspace settled
    return matmul_rate(lambda: device_seconds(torch, step, iters), n, iters, windows, warmup_s)


@needs_cuda
def check_matmul(ctx: Context) -> Check:
    torch, n = ctx.torch, 8192
    kinds = [("bf16_matmul_tflops", torch.bfloat16)] if bf16_native(torch) else []
    values = {
        key: round(matmul_tflops(torch, dtype, n), 1) for key, dtype in kinds + [("fp16_matmul_tflops", torch.float16)]
    }
    text = ", ".join(f"{k.split('_')[0]} {v} TFLOP/s" for k, v in values.items())
    return floor_check(ctx, values, "matmul throughput", f"{n}x{n} matmul (median of 5 timed runs): {text}")


def _copy_rates(torch: Any, nbytes: int, reps: int) -> Dict[str, float]:
    """GB/s of each copy direction; the buffers are freed when this returns (before ``release``)."""
    dev = torch.device("cuda", 0)
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    pageable = torch.ones(nbytes, dtype=torch.uint8)
    pinned = torch.ones(nbytes, dtype=torch.uint8).pin_memory()

    def rate(copy: Callable[[], Any]) -> float:
        copy()  # warm-up
        torch.cuda.synchronize(dev)
        return round(nbytes * reps / device_seconds(torch, copy, reps) / 1e9, 2)

    return {"h2d_pinned_gbps": rate(lambda: gpu.copy_(pinned, non_blocking=True)),
            "h2d_pageable_gbps": rate(lambda: gpu.copy_(pageable)),
            "d2h_pinned_gbps": rate(lambda: pinned.copy_(gpu, non_blocking=True)),
            "d2h_pageable_gbps": rate(lambda: pageable.copy_(gpu))}


@needs_cuda
def check_bandwidth(ctx: Context) -> Check:
    values = _copy_rates(ctx.torch, 256 * 2**20, 5)
    return floor_check(ctx, values, "copy bandwidth", "256 MiB copies, GB/s: " + ", ".join(
        f"{k[:-5].replace('_', ' ')} {v}" for k, v in values.items()))
