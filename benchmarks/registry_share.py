"""Registry bytes for a team of three images on the same CUDA wheels, against pushing each image alone.

The team (written to a temporary spec, resolved and built here with the default builder):
  base   torch 2.5.1 + numpy                     (the example image's stack)
  hf     torch 2.5.1 + numpy + transformers      (another extra: shares base's CUDA and framework layers)
  t250   torch 2.5.0 + numpy                     (another framework release on the same CUDA wheels: shares the
                                                  CUDA layer only)
Each image is pushed to a real registry (Debian's docker-registry on loopback), one after the other; the registry's
blob store is measured (du) after each push, so the "team" figure is the bytes the registry actually received and
kept. "Alone" is what each image costs in a registry of its own: the compressed sizes of its layers and config as
its pushed manifest lists them. The ratio team / sum(alone) is the figure; the layer table shows which layers the
images share. No assertions. Removes what it built (images, registry) unless --keep.

Run: .venv/bin/python benchmarks/registry_share.py [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.engine.docker_engine import connect  # noqa: E402
from envkit.registry.publish import push  # noqa: E402
from tests.integration.registry import running_registry  # noqa: E402

SPEC = """\
version: 1
team: sharebench
fleet:
  min_driver: "550.54.15"
  gpus: [H100]
  policy: minor
defaults:
  base:
    bootstrap: {suite: bookworm, mirror: "http://deb.debian.org/debian"}
images:
  - name: base
    framework: "torch==2.5.1"
    pip: ["numpy==2.1.*"]
  - name: hf
    framework: "torch==2.5.1"
    pip: ["numpy==2.1.*", "transformers==4.46.*"]
  - name: t250
    framework: "torch==2.5.0"
    pip: ["numpy==2.1.*"]
"""
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def du(path: Path) -> int:
    """Bytes under ``path`` (files' sizes, as the registry stored them)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def build(spec: Path, out: Path) -> list[dict]:
    log(f"resolving and building {spec} (the default builder)")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "envkit.cli", "build", str(spec), "--out", str(out), "--no-verify",
                           "--json"], cwd=spec.parent, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"envkit build exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    doc = json.loads(proc.stdout)
    log(f"built {len(doc['images'])} images with {doc['builder']} in {time.monotonic() - started:.0f} s")
    return doc["images"]


def manifest(url: str, repo: str, tag: str) -> dict:
    r = requests.get(f"{url}/v2/{repo}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}, timeout=30)
    r.raise_for_status()
    return r.json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the images")
    args = parser.parse_args()
    engine = connect()
    with tempfile.TemporaryDirectory(prefix="envkit-share-") as tmp:
        work = Path(tmp)
        spec = work / "team.yaml"
        spec.write_text(SPEC)
        images = build(spec, work / "out")
        rows: list[dict] = []
        layers_of: dict[str, list[tuple[str, int]]] = {}
        pushed: list[str] = []
        try:
            with running_registry(work / "registry") as reg:
                blobs = work / "registry" / "data"
                before = du(blobs)
                for image in images:
                    repo = f"sharebench/{image['name']}"
                    started = time.monotonic()
                    pushed.append(f"{reg.repo(repo)}:bench")
                    push(engine.client, image["tag"], reg.repo(repo), "bench")
                    seconds = time.monotonic() - started
                    after = du(blobs)
                    m = manifest(reg.url, repo, "bench")
                    alone = m["config"]["size"] + sum(layer["size"] for layer in m["layers"])
                    layers_of[image["name"]] = [(layer["digest"], layer["size"]) for layer in m["layers"]]
                    rows.append({"image": image["name"], "tag": image["tag"], "alone_bytes": alone,
                                 "pushed_bytes": after - before, "push_seconds": round(seconds, 1),
                                 "layers": len(m["layers"])})
                    log(f"pushed {image['name']}: {gb(after - before)} new in the registry, {gb(alone)} alone, "
                        f"{seconds:.0f} s")
                    before = after
        finally:
            if not args.keep:
                for ref in [*pushed, *(image["tag"] for image in images)]:
                    subprocess.run(["docker", "rmi", "-f", ref], capture_output=True)
    team = sum(r["pushed_bytes"] for r in rows)
    alone = sum(r["alone_bytes"] for r in rows)
    print()
    print(f"{'image':8} {'layers':>6} {'alone':>10} {'pushed in the team':>19} {'push':>7}")
    for r in rows:
        print(f"{r['image']:8} {r['layers']:>6} {gb(r['alone_bytes']):>10} {gb(r['pushed_bytes']):>19} "
              f"{r['push_seconds']:>6}s")
    print(f"{'total':8} {'':>6} {gb(alone):>10} {gb(team):>19}   team / alone = {team / alone:.2f}")
    print()
    print("layers (compressed) and the images holding each:")
    seen: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    for name, layers in layers_of.items():
        for digest, size in layers:
            seen.setdefault(digest, []).append(name)
            sizes[digest] = size
    for digest, names in seen.items():
        if sizes[digest] > 1_000_000:
            print(f"  {digest[7:19]}  {gb(sizes[digest]):>9}  {', '.join(names)}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "team_bytes": team, "alone_bytes": alone,
                                         "ratio": team / alone, "machine": os.uname().nodename,
                                         "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, indent=2))


if __name__ == "__main__":
    main()
