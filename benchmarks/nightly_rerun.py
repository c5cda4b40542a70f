"""A second nightly run with nothing changed, next to the first run on the same spec.

The first run (fresh store) resolves, finds or builds the example image, verifies it and
records everything; the second finds nothing to do. Target: the second in seconds.
Run: .venv/bin/python benchmarks/nightly_rerun.py [SPEC]   (needs a container engine)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def nightly(spec: str, store: Path, reports: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "envkit.cli", "nightly", spec, "--locked", "--no-gpus",
                           "--store", str(store), "--reports", str(reports), "--json"],
                          cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 10):
        sys.exit(f"nightly failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed, json.loads(proc.stdout)


def main() -> None:
    spec = sys.argv[1] if len(sys.argv) > 1 else "examples/team.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        store, reports = Path(tmp) / "history.sqlite", Path(tmp) / "reports"
        first, doc1 = nightly(spec, store, reports)
        second, doc2 = nightly(spec, store, reports)
    print(f"{'run':<10}{'seconds':>10}  outcome")
    print(f"{'first':<10}{first:>10.2f}  {doc1['outcome']} ({', '.join(i['build'] for i in doc1['images'])})")
    print(f"{'second':<10}{second:>10.2f}  {doc2['outcome']}")
    print(f"second / first: {second / first:.3f}")


if __name__ == "__main__":
    main()
