"""Resolve time of a realistic three-image team beside `uv pip compile` of the same requirement sets.

envkit = `envkit resolve examples/research.yaml` (a subprocess, as a user runs it): per image the joint
         solve of the framework and its extras (binary only, the base's Python and glibc), the framework
         wheel's bundled pins and arch list, each extra's newest release, and uv's explanation for any
         extra held far back; the images side by side.
anchor = `uv pip compile` of each image's requirements (the spec's framework requirement and its pip:
         packages, binary only, same Python, platform and index), the three one after another, as a user
         would script them; no hashes asked beyond what envkit asks (both --generate-hashes).

Both run once first to warm uv's cache and envkit's wheel-fact cache, then REPEAT times each, alternating;
the medians and their ratio are printed (target: envkit <= 1.0x the anchor, issue 32; goal 0.7x). Needs the
package index. No assertions.
Run: .venv/bin/python benchmarks/resolve_team.py [--repeat 3] [--spec examples/research.yaml]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.catalog.files import load_catalog  # noqa: E402
from envkit.index.closure import uv_binary  # noqa: E402
from envkit.index.urls import DEFAULT_INDEX  # noqa: E402
from envkit.spec import load_spec  # noqa: E402


def anchor_commands(spec_path: Path, tmp: Path) -> list[list[str]]:
    spec, catalog = load_spec(spec_path), load_catalog()
    cmds = []
    for image in spec.images:
        target = spec.effective(image)
        suite = target.base.bootstrap.suite if target.base.bootstrap else None
        os_base = catalog.os_base(suite or "bookworm")
        req = tmp / f"{image.name}.in"
        req.write_text("\n".join([target.framework, *target.pip]) + "\n")
        cmds.append([uv_binary(), "pip", "compile", str(req), "--quiet", "--no-header", "--only-binary", ":all:",
                     "--generate-hashes", "--python-version", os_base.python, "--python-platform",
                     f"x86_64-manylinux_{os_base.glibc.replace('.', '_')}", "--index-url",
                     spec.build.index_url or DEFAULT_INDEX, "--no-config"])
    return cmds


def timed(cmds: list[list[str]]) -> float:
    start = time.perf_counter()
    for cmd in cmds:
        subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", type=Path, default=ROOT / "examples" / "research.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        envkit = [[sys.executable, "-m", "envkit.cli", "resolve", str(args.spec), "--lock", f"{tmp}/team.lock"]]
        anchor = anchor_commands(args.spec, Path(tmp))
        timed(anchor), timed(envkit)  # warm both caches
        runs = {"envkit": [], "uv": []}
        for _ in range(args.repeat):
            runs["uv"].append(timed(anchor))
            runs["envkit"].append(timed(envkit))
    e, u = statistics.median(runs["envkit"]), statistics.median(runs["uv"])
    print(f"{'':24}{'median s':>10}  runs")
    print(f"{'uv pip compile (anchor)':24}{u:10.2f}  " + " ".join(f"{x:.2f}" for x in runs["uv"]))
    print(f"{'envkit resolve':24}{e:10.2f}  " + " ".join(f"{x:.2f}" for x in runs["envkit"]))
    print(f"envkit / uv = {e / u:.2f}  (target <= 1.0, goal 0.7; {len(anchor)} images, {args.spec.name})")


if __name__ == "__main__":
    main()
