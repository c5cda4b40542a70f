"""Resolve a 200-image spec without the closure step, next to the time of loading the catalog.

Target: the plan of 200 images in under one second.
Run: .venv/bin/python benchmarks/resolve_200.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envkit.catalog.files import load_catalog  # noqa: E402
from envkit.resolve.plan import plan  # noqa: E402
from envkit.spec import load_spec  # noqa: E402

FRAMEWORKS = ["torch==2.5.*", "torch>=2.7,<2.12", "torch==2.11.*", "torch~=2.14.0", "jax[cuda13]>=0.8",
              "jax[cuda12]==0.7.*", "tensorflow[and-cuda]==2.18.*", "torch==2.8.*"]


def spec_text(n: int) -> str:
    lines = ["version: 1", "team: bench", "fleet:", '  min_driver: "580.65.06"', "  gpus: [A100, H100, L40S, T4]",
             "images:"]
    for i in range(n):
        lines += [f"  - name: img{i:03d}", f'    framework: "{FRAMEWORKS[i % len(FRAMEWORKS)]}"']
        if i % 3 == 0:
            lines.append('    pip: ["numpy==2.*"]')
    return "\n".join(lines) + "\n"


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "team.yaml"
        path.write_text(spec_text(200))
        spec = load_spec(path)
        catalog = load_catalog()
        load_min, load_med = best_of(load_catalog)
        plan_min, plan_med = best_of(lambda: plan(spec, catalog))
        spec_min, _ = best_of(lambda: load_spec(path))
    print(f"{'step':<28}{'best (s)':>10}{'median (s)':>12}")
    print(f"{'load catalog':<28}{load_min:>10.4f}{load_med:>12.4f}")
    print(f"{'load 200-image spec':<28}{spec_min:>10.4f}")
    print(f"{'plan 200 images':<28}{plan_min:>10.4f}{plan_med:>12.4f}")
    print(f"plan / catalog load: {plan_min / load_min:.2f}x; target plan < 1 s: {'met' if plan_med < 1 else 'MISSED'}")


if __name__ == "__main__":
    main()
