"""How close the payload's matmul probe comes to what the card can do: the certificate's
`matmul_tflops` figure (median of 5 event-timed windows of 10 matmuls after a 0.3 s warm-up,
envkit_check_torch_cuda.matmul_tflops) beside the same probe warmed up longer and a plain loop
(the mean of ten products after three warm-ups, as the device notes measured ~790 TFLOP/s bf16 on
an H200), for bf16 and fp16, 8192^3. Prints the ratios; with clocks and power read after each row
(through nvidia-smi) so a power cap or a cold clock shows where the gap comes from.

Needs a CUDA GPU (run it on the lent device machine or a GPU workstation); no assertions.
Run: python3 benchmarks/gpu_matmul_probe.py [--n 8192] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent.parent / "envkit" / "payload" / "envkit_check"))


def clocks() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.strip().splitlines()[0] if out.strip() else "?"


def plain_loop(torch, dtype, n: int, warmups: int = 3, iters: int = 10) -> float:
    dev = torch.device("cuda", 0)
    a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
    for _ in range(warmups):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    end.synchronize()
    return 2 * n**3 * iters / (start.elapsed_time(end) / 1000) / 1e12


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    from envkit_check_torch_cuda import matmul_tflops

    rows = []
    for label, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        measured = {"payload probe (0.3 s warm-up)": lambda: matmul_tflops(torch, dtype, args.n),
                    "payload probe (3 s warm-up)": lambda: matmul_tflops(torch, dtype, args.n, warmup_s=3.0),
                    "plain loop (3 warm-ups, mean of 10)": lambda: plain_loop(torch, dtype, args.n)}
        figures = {}
        for name, fn in measured.items():
            figures[name] = fn()
            rows.append({"dtype": label, "method": name, "tflops": round(figures[name], 1), "after": clocks()})
        ref = figures["plain loop (3 warm-ups, mean of 10)"]
        for row in rows[-3:]:
            row["ratio_to_plain_loop"] = round(row["tflops"] / ref, 3)
    gpu = torch.cuda.get_device_name(0)
    if args.json:
        print(json.dumps({"gpu": gpu, "n": args.n, "torch": torch.__version__, "rows": rows}, indent=2))
        return 0
    print(f"{gpu}, torch {torch.__version__}, {args.n}x{args.n}x{args.n}")
    print(f"{'dtype':<5} {'method':<38} {'TFLOP/s':>8} {'ratio':>6}  after (SM MHz, W, clock event reasons)")
    for r in rows:
        print(f"{r['dtype']:<5} {r['method']:<38} {r['tflops']:>8.1f} {r['ratio_to_plain_loop']:>6.3f}  {r['after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
