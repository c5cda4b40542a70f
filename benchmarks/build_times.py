"""Build times of the example image: classic builder vs BuildKit, cold and warm, and a rebuild
after changing only an extra package (does it reuse the framework layer?).

cold  = every step again (`--no-cache`; for BuildKit that also empties pip's cache mount)
warm  = the same build again, nothing changed
extra = the example image with numpy 2.0.* instead of 2.1.* (resolved against the same framework
        pins), built right after the warm build; "framework layer reused" compares the image's
        layer digests with the warm image's: base, OS packages and the framework venv must be equal.

Takes a long time (two cold builds download and install the whole CUDA torch closure) and about
15 GB of disk at its peak; the images it makes are removed at the end (`--keep` keeps them).
Run it on a quiet engine: while the classic cold build's images exist, Docker's classic builder
prefers them (the newest match) as the cache of any other build from the same base, so those
miss the cache their earlier builds left.
No assertions: it prints a table.
Run: .venv/bin/python benchmarks/build_times.py [--builders classic,buildkit] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.build.base import ensure_base  # noqa: E402
from envkit.build.builder import run_build, stage_context  # noqa: E402
from envkit.index.closure import Pin, compile_closure  # noqa: E402
from envkit.engine.docker_engine import connect  # noqa: E402
from envkit.lock import Package, load_lock, sealed  # noqa: E402
from envkit.render.files import render_files  # noqa: E402

TAG = "envkit-bench/torch25"
SHARED = 3  # layers below the extras: base, OS packages + user, framework venv
_CREATED = re.compile(r"^ ---> ([0-9a-f]{12})$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--builders", default="classic,buildkit")
    parser.add_argument("--keep", action="store_true", help="keep the images (and BuildKit's cache)")
    args = parser.parse_args()
    engine = connect()
    lock = load_lock(ROOT / "examples" / "team.lock")
    image = lock.images[0]
    ensure_base(engine, image.base, log)
    extra_lock, extra_image = numpy20(lock, image)
    ca = ca_bundle()
    rows = []
    started = time.monotonic()
    for builder in args.builders.split(","):
        made: list[str] = []
        check_disk(16)
        tag = f"{TAG}:{builder}"
        cold = timed_build(engine, lock, image, tag, builder, ca, made, no_cache=True)
        warm = timed_build(engine, lock, image, tag, builder, ca, made)
        extra = timed_build(engine, extra_lock, extra_image, f"{TAG}:{builder}-numpy20", builder, ca, made)
        a, b = layers(engine, tag), layers(engine, f"{TAG}:{builder}-numpy20")
        reused = a[:SHARED] == b[:SHARED]
        rows.append((builder, cold, warm, extra, reused, sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))))
        if not args.keep:
            cleanup(engine, builder, [tag, f"{TAG}:{builder}-numpy20"], made)
    log(f"all done in {fmt(time.monotonic() - started)}")
    print()
    print(f"{'builder':<10}{'cold':>10}{'warm':>10}{'extra':>10}  framework layer reused  layers differing")
    for builder, cold, warm, extra, reused, differing in rows:
        print(f"{builder:<10}{fmt(cold):>10}{fmt(warm):>10}{fmt(extra):>10}  {'yes' if reused else 'NO':<22}  {differing}")
    if len(rows) == 2:
        (_, c1, w1, e1, *_), (_, c2, w2, e2, *_) = rows
        print(f"{'ratio':<10}{c2 / c1:>10.2f}{w2 / w1:>10.2f}{e2 / e1:>10.2f}  (buildkit / classic)")


def timed_build(engine, lock, image, tag, builder, ca, made, *, no_cache=False) -> float:
    label = f"{builder} {'cold' if no_cache else 'build'} {tag}"
    log(f"{label}: starting")
    files = render_files(lock, image, "examples/team.yaml", buildkit=builder == "buildkit")
    started = time.monotonic()
    last_step = started
    with tempfile.TemporaryDirectory(prefix="envkit-bench-") as tmp:
        ctx = stage_context(Path(tmp), files, ca_bundle=None if builder == "buildkit" else ca)
        cached = False
        for event in run_build(engine, ctx, tag, {"io.envkit.bench": "build_times"}, builder=builder,
                               ca_bundle=ca, no_cache=no_cache):
            if event.kind == "step":
                now = time.monotonic()
                log(f"  {fmt(now - started):>7} (+{fmt(now - last_step)}) step {event.step}/{event.total}: "
                    f"{event.text[:90]}")
                last_step, cached = now, event.text.startswith("FROM ")  # FROM makes no image
            elif event.kind == "log" and "Using cache" in event.text:
                cached = True
            elif event.kind == "log" and not cached:
                m = _CREATED.match(event.text)
                if m:
                    made.append(m.group(1))  # an image this build created (classic), not a cache hit
    seconds = time.monotonic() - started
    log(f"{label}: {fmt(seconds)}")
    return seconds


def numpy20(lock, image):
    framework = [p for p in image.packages if p.group == "framework"]
    pins = compile_closure([f"torch=={image.framework_version}", "numpy==2.0.*"], python=image.python,
                           glibc="2.36", index_url=image.index_url,
                           constraints=[Pin(p.name, p.version, p.hashes) for p in framework])
    extras = [Package(name=p.name, version=p.version, hashes=p.hashes, group="extra")
              for p in pins if p.name not in {f.name for f in framework}]
    changed = sealed(image.model_copy(update={"name": "torch25-numpy20", "packages": tuple(framework + extras)}))
    return lock.model_copy(update={"images": (changed,)}), changed


def layers(engine, ref) -> list[str]:
    return engine.client.images.get(ref).attrs["RootFS"]["Layers"]


def cleanup(engine, builder, tags, made) -> None:
    log(f"removing the {builder} benchmark's images")
    for ref in tags + list(reversed(made)):
        try:
            engine.client.images.remove(ref, force=ref in tags)
        except Exception:  # noqa: BLE001 - an image still in use by another stays
            pass
    if builder == "buildkit":
        # BuildKit keeps the cold build's stages (and pip's cache mount) in its own cache
        subprocess.run(["/usr/bin/docker", "builder", "prune", "-f"], capture_output=True)  # unused records only


def check_disk(gib: int) -> None:
    free = shutil.disk_usage("/var/lib/docker" if Path("/var/lib/docker").exists() else "/").free / 2**30
    if free < gib:
        sys.exit(f"only {free:.0f} GiB free; this benchmark needs about {gib} GiB per builder")


def ca_bundle():
    value = os.environ.get("ENVKIT_CA_BUNDLE") or os.environ.get("PIP_CERT")
    return Path(value) if value and Path(value).is_file() else None


def fmt(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    return f"{seconds:.0f}s" if seconds < 600 else f"{seconds / 60:.1f}m"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
