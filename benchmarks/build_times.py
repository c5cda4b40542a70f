"""Build times of the example image against a naive Dockerfile of the same stack, built in the same run.

For each builder (classic, BuildKit), one after the other:

naive   the anchor: one stage, apt python3 + python3-venv, a venv, `pip install --no-cache-dir
        torch==<locked> numpy==<locked>` (no hashes, pip's resolver): what a team writes by hand
envkit  the example lock's rendered context, built as `envkit build` builds it

each of them: cold  = every step again (`--no-cache`, which also gives BuildKit cache mounts empty)
              warm  = the same build again, nothing changed
              extra = numpy 2.0.* instead of 2.1.* (envkit: resolved against the same framework pins;
                      naive: the pin in its one pip RUN changed), built right after the warm build

The table gives seconds, each envkit figure's ratio to the naive figure of the same builder (the
issue's targets: cold <= 0.6x naive, warm <= 2 s, extra <= 0.1x envkit's cold), the image size, and
where each cold build spent its time (benchmarks/build_breakdown.py). The load average before each build
is printed beside it: the machine may be shared, so compare ratios from one run, not seconds across runs.

Order, per builder: naive cold, envkit cold, naive warm, envkit warm, naive extra, envkit extra (each pair
back to back: on a shared machine the load drifts). Takes a long time (six full installs of the CUDA torch
closure) and about 18 GB of disk per builder at its peak; each builder's images are removed before the next
starts (`--keep` keeps them), and at the end the BuildKit cache records that appeared during the run
(`tests/buildcache.py`, as the test session does): a `--no-cache` build adds records beside the old ones for the
same steps, and a later build may then take its OS layer from either, so two images of one machine stop sharing
it (the full suite's test_layers failed on exactly that after run 5 left them).
`--builders` may also name `reproducible`: `envkit build --reproducible` (its OS stage by BuildKit; compared with
the naive BuildKit build, so list buildkit first): cold = the OS stage's steps again and no layer reused (each
environment layer installed and written by envkit), warm = the same build again, extra = the numpy change, which
reuses the cold image's cuda and framework layers (images.layer_reuse); its time per phase instead of the
builders' breakdown.
`--builders` may also name `floor` (list classic first): the classic builder's floor, cold only (`floor_row`):
envkit's classic steps with every wheel and uv downloaded beforehand and served from this host, to show what no
Dockerfile can take off a classic build (apt, uv's unzip, the bytecode, each step's commit).
Run: .venv/bin/python benchmarks/build_times.py [--builders classic,buildkit,reproducible,floor]
     [--skip naive-extra] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.build_breakdown import PHASES, Breakdown  # noqa: E402
from tests import buildcache  # noqa: E402
from envkit.images.base import ensure_base  # noqa: E402
from envkit.images.builder import build_image, run_build, stage_context  # noqa: E402
from envkit.index.closure import Pin, compile_closure  # noqa: E402
from envkit.engine.docker_engine import connect  # noqa: E402
from envkit.engine.protocol import BuildEvent  # noqa: E402
from envkit.lock import Package, load_lock, sealed  # noqa: E402
from envkit.render.files import render_files  # noqa: E402

TAG = "envkit-bench/torch25"
REPRODUCIBLE = "reproducible"  # a row of `envkit build --reproducible` (its OS stage by BuildKit)
FLOOR = "floor"  # the classic builder's floor: envkit's steps with every wheel and uv already on this machine
# whose naive build a row is compared with, where not its own builder's
ANCHOR = {REPRODUCIBLE: "buildkit", FLOOR: "classic"}
_CREATED = re.compile(r"^ ---> ([0-9a-f]{12})$")
NAIVE = """\
FROM {base}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \\
 && rm -rf /var/lib/apt/lists/*
COPY ca.pem /etc/site-ca.pem
RUN python3 -m venv /opt/venv \\
 && if [ -s /etc/site-ca.pem ]; then export PIP_CERT=/etc/site-ca.pem; fi \\
 && /opt/venv/bin/pip install --no-cache-dir {pins}
ENV PATH=/opt/venv/bin:$PATH
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--builders", default="classic,buildkit")
    parser.add_argument("--skip", default="", help="comma-separated: naive-extra, naive (no anchor: no ratios)")
    parser.add_argument("--keep", action="store_true", help="keep the images")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--table", type=Path, help="print the table of an earlier run's --json file (no builds)")
    args = parser.parse_args()
    if args.table:
        results = json.loads(args.table.read_text())
        for row in results.values():  # the breakdown again, from the timeline (as this version cuts it)
            if "events" in row.get("cold", {}):
                breakdown = Breakdown()
                for t, kind, text in row["cold"]["events"]:
                    breakdown.feed(t, BuildEvent(kind, text) if kind != "step" else BuildEvent(kind, text, 0, 0))
                row["cold"]["phases"] = breakdown.phases()
        print_table(results)
        return
    skip = set(filter(None, args.skip.split(",")))
    engine = connect()
    lock = load_lock(ROOT / "examples" / "team.lock")
    image = lock.images[0]
    ensure_base(engine, image.base, log)
    extra_lock, _ = numpy20(lock, image)
    ca = ca_bundle()
    results: dict[str, dict] = {}
    started = time.monotonic()
    before = buildcache.records()
    try:
        measure(engine, args, lock, extra_lock, ca, skip, results)
    finally:
        if not args.keep and before is not None:  # (unlisted at the start: what the run made is not known)
            buildcache.prune((buildcache.records() or set()) - before)
    results = {k: v for k, v in results.items() if v}
    log(f"all done in {fmt(time.monotonic() - started)}")
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")


def measure(engine, args, lock, extra_lock, ca, skip: set[str], results: dict) -> None:
    for builder in args.builders.split(","):
        if builder == REPRODUCIBLE:
            check_disk(12)
            results[f"envkit {REPRODUCIBLE}"] = reproducible_row(engine, lock, extra_lock, ca, args.keep)
            continue
        if builder == FLOOR:
            check_disk(12)
            results[f"classic {FLOOR}"] = floor_row(engine, lock, ca, args.keep)
            continue
        builder_rows(engine, builder, lock, extra_lock, ca, skip, args.keep, results)


def builder_rows(engine, builder: str, lock, extra_lock, ca, skip: set[str], keep: bool, results: dict) -> None:
    """The naive and envkit rows of one builder, into ``results``."""
    image, extra_image = lock.images[0], extra_lock.images[0]
    numpy = {p.name: p.version for p in image.packages}["numpy"]
    numpy_extra = {p.name: p.version for p in extra_image.packages}["numpy"]
    made: list[str] = []
    tags: list[str] = []
    check_disk(12 if "naive-extra" in skip else 18)
    naive = {"pins": f"torch=={image.framework_version} numpy=={numpy}", "base": image.base.ref}
    files = render_files(lock, image, "examples/team.yaml", buildkit=builder == "buildkit")
    extra = render_files(extra_lock, extra_image, "examples/team.yaml", buildkit=builder == "buildkit")
    anchor, row = results.setdefault(f"naive {builder}", {}), results.setdefault(f"envkit {builder}", {})
    naive_tag, tag = f"{TAG}:naive-{builder}", f"{TAG}:{builder}"
    tags += [naive_tag, tag, naive_tag + "-numpy20", tag + "-numpy20"]
    try:
        # each envkit build right after the naive build it is compared with: the machine's load drifts
        for kind in ("cold", "warm", "extra"):
            if "naive" not in skip and not (kind == "extra" and "naive-extra" in skip):
                values = dict(naive, pins=f"torch=={image.framework_version} numpy=={numpy_extra}") \
                    if kind == "extra" else naive
                anchor[kind] = build_naive(engine, values, naive_tag + ("-numpy20" if kind == "extra" else ""),
                                           builder, ca, made, no_cache=kind == "cold")
                anchor.setdefault("size", engine.inspect(naive_tag).size)
            row[kind] = build(engine, extra if kind == "extra" else files,
                              tag + ("-numpy20" if kind == "extra" else ""), builder, ca, made,
                              no_cache=kind == "cold")
        row["size"] = engine.inspect(tag).size
        row["layers"] = layers(engine, tag)
        row["shared_layers"] = shared(row["layers"], layers(engine, tag + "-numpy20"))
    finally:
        if not keep:
            cleanup(engine, builder, tags, made)


def reproducible_row(engine, lock, extra_lock, ca, keep: bool) -> dict:
    """`envkit build --reproducible` (the OS stage by BuildKit, the environment layers by envkit): cold = the OS
    stage's steps again and no layer reused; warm = the same build again (the identity check); extra = the numpy
    change, reusing the cuda and framework layers of the cold image."""
    lock, extra_lock = (x.model_copy(update={"team": TAG.split("/")[0]}) for x in (lock, extra_lock))
    row: dict = {}
    outcomes = []
    try:
        for kind, which in (("cold", lock), ("warm", lock), ("extra", extra_lock)):
            image = which.images[0]
            load = os.getloadavg()[0]
            log(f"reproducible {kind} {image.name}: starting (load {load:.2f})")
            started = time.monotonic()
            outcome = build_image(engine, which, image, "examples/team.yaml", ca_bundle=ca, verify=False,
                                  builder="buildkit", reproducible=True, no_cache=kind == "cold",
                                  progress=lambda _name, event: None)
            seconds = time.monotonic() - started
            outcomes.append(outcome)
            log(f"reproducible {kind}: {fmt(seconds)} ({outcome.action}) {outcome.phases}")
            row[kind] = {"seconds": seconds, "load": load, "phases_seconds": outcome.phases, "action": outcome.action}
        row["size"] = engine.inspect(outcomes[0].tag).size
        row["layers"] = layers(engine, outcomes[0].tag)
        row["shared_layers"] = shared(row["layers"], layers(engine, outcomes[2].tag))
    finally:
        if not keep:
            cleanup(engine, REPRODUCIBLE, [t for o in outcomes for t in (o.tag, o.tag + "-os")], [])
    return row


FLOOR_GROUP = """\
COPY requirements/{group}.txt /tmp/envkit/{group}.txt
RUN python3 -c '{fetch}' {server}/{wheel} {sha} /tmp/uv && chmod 755 /tmp/uv{venv} \\
 && UV_CACHE_DIR=/tmp/uv-cache /tmp/uv pip install --python /opt/venv/bin/python {flags} {compile} \\
    --no-index --find-links {server}/wheels/ -r /tmp/envkit/{group}.txt \\
 && rm -rf /tmp/uv /tmp/uv-cache
"""


def floor_row(engine, lock, ca, keep: bool) -> dict:
    """The classic builder's floor, cold only: envkit's OS step and install steps (one RUN per layer group, uv,
    bytecode compiled), but every wheel and the uv program downloaded beforehand and served to the steps from this
    host (an HTTP server on the engine's bridge gateway): no download in the build at all. What is left is apt, uv's
    unzip, the bytecode and the classic builder's commit of each step, which no Dockerfile avoids. Compared with the
    naive classic build (list classic first)."""
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
    import threading

    from envkit.images.wheelhouse import download_wheels
    from envkit.render import installer
    from envkit.support.download import fetch_pinned

    image = lock.images[0]
    files = render_files(lock, image, "examples/team.yaml", buildkit=False)
    # envkit's own OS stage, as rendered; the install steps follow in it
    rendered = files["Dockerfile"].decode()
    if "\nFROM os AS runtime\n" not in rendered:
        sys.exit("the classic render has no `FROM os AS runtime`: floor_row needs its OS stage cut anew")
    os_stage = rendered.split("\nFROM os AS runtime\n")[0] + "\n"
    groups = [g for g in ("cuda", "framework", "extra") if f"requirements/{g}.txt" in files]
    gateway = engine.client.networks.get("bridge").attrs["IPAM"]["Config"][0]["Gateway"]
    (url, sha), wheel = installer.WHEELS[os.uname().machine], installer.wheel_name(os.uname().machine)
    tag = f"{TAG}:{FLOOR}"
    made: list[str] = []

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    with tempfile.TemporaryDirectory(prefix="envkit-bench-floor-") as tmp:
        serve = Path(tmp) / "serve"
        log(f"{FLOOR}: downloading the wheels and uv on this host (not timed)")
        download_wheels(image, serve / "wheels", ca_bundle=ca)
        fetch_pinned(url, sha, serve / wheel, ca_bundle=ca, hint="the uv wheel envkit pins (render/installer.py)")
        server = ThreadingHTTPServer((gateway, 0), partial(Quiet, directory=str(serve)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        address = f"http://{gateway}:{server.server_address[1]}"
        dockerfile = os_stage + "".join(
            FLOOR_GROUP.format(group=g, fetch=installer.FETCH, server=address, wheel=wheel, sha=sha,
                               venv=" && python3 -m venv /opt/venv" if i == 0 else "", flags=installer.FLAGS,
                               compile=installer.COMPILE)
            for i, g in enumerate(groups))
        ctx = stage_context(Path(tmp) / "ctx", {"Dockerfile": dockerfile.encode(),
                                                **{k: v for k, v in files.items() if k.startswith("requirements/")}})
        try:
            row = {"cold": timed(engine, ctx, tag, "classic", None, made, no_cache=True)}
            row["size"] = engine.inspect(tag).size
        finally:
            server.shutdown()
            if not keep:
                cleanup(engine, FLOOR, [tag], made)
    return row


def print_table(results: dict[str, dict]) -> None:
    print()
    print(f"{'build':<17}{'cold':>14}{'warm':>14}{'extra':>14}{'size':>10}  load(1m) at cold start")
    for name, row in results.items():
        builder = name.split()[1]
        anchor = results.get(f"naive {ANCHOR.get(builder, builder)}", {})
        cells = []
        for what in ("cold", "warm", "extra"):
            value = row.get(what)
            if value is None:
                cells.append(f"{'-':>14}")
                continue
            seconds, ratio = value["seconds"], ""
            if not name.startswith("naive") and what in anchor:
                ratio = f" {seconds / anchor[what]['seconds']:.2f}x"
            cells.append(f"{fmt(seconds) + ratio:>14}")
        size = f"{row['size'] / 1e9:.2f}GB" if row.get("size") else "-"
        print(f"{name:<17}{''.join(cells)}{size:>10}  {row['cold']['load']:.2f}")
    print("(envkit cells: seconds and the ratio to the naive build of the same builder, same kind; classic floor:\n"
          " envkit's classic steps with every wheel and uv already on this host, no download in the build)")
    for name, row in results.items():
        if name.startswith("envkit") and "extra" in row:
            print(f"{name}: extra / cold = {row['extra']['seconds'] / row['cold']['seconds']:.3f}; "
                  f"layers shared with the extra image: {row['shared_layers']} of {len(row['layers'])}")
    print()
    print(f"{'cold breakdown':<17}" + "".join(f"{p:>10}" for p in PHASES) + f"{'total':>10}")
    for name, row in results.items():
        phases = row["cold"].get("phases")
        if phases is None:  # (the reproducible row: print_reproducible)
            continue
        print(f"{name:<17}" + "".join(f"{fmt(phases[p]):>10}" for p in PHASES) + f"{fmt(row['cold']['seconds']):>10}")


    print_reproducible(results.get(f"envkit {REPRODUCIBLE}"))


def print_reproducible(row: dict | None) -> None:
    """Where the reproducible builds' time went (their own phases: the builders' breakdown does not apply)."""
    if row is None:
        return
    print()
    for kind in ("cold", "extra"):
        phases = ", ".join(f"{k} {fmt(v)}" for k, v in row[kind]["phases_seconds"].items())
        print(f"envkit {REPRODUCIBLE} {kind}: {phases}")


def build_naive(engine, values: dict[str, str], tag: str, builder: str, ca, made: list[str], *,
                no_cache: bool = False) -> dict:
    """The anchor (``NAIVE`` with the ``base`` and ``pins`` of ``values``); the site CA (when given: a
    TLS-intercepting proxy) is simply copied in, as by hand."""
    with tempfile.TemporaryDirectory(prefix="envkit-bench-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(NAIVE.format(**values))
        (Path(tmp) / "ca.pem").write_bytes(ca.read_bytes() if ca else b"")
        return timed(engine, Path(tmp), tag, builder, None, made, no_cache=no_cache)


def build(engine, files: dict[str, bytes], tag: str, builder: str, ca, made: list[str], *,
          no_cache: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="envkit-bench-") as tmp:
        ctx = stage_context(Path(tmp), files)
        return timed(engine, ctx, tag, builder, ca, made, no_cache=no_cache)


def timed(engine, ctx: Path, tag: str, builder: str, ca, made: list[str], *, no_cache: bool) -> dict:
    label = f"{builder} {'cold' if no_cache else 'build'} {tag}"
    load = os.getloadavg()[0]
    log(f"{label}: starting (load {load:.2f})")
    breakdown = Breakdown()
    events: list[tuple[float, str, str]] = []  # the timeline, in --json (the breakdown can be recomputed from it)
    started = time.monotonic()
    cached = False
    for event in run_build(engine, ctx, tag, {"io.envkit.bench": "build_times"}, builder=builder,
                           ca_bundle=ca, no_cache=no_cache):
        now = time.monotonic() - started
        breakdown.feed(now, event)
        events.append((round(now, 3), event.kind, event.text[:300]))
        if event.kind == "step":
            log(f"  {fmt(now):>7} step {event.step}/{event.total}: {event.text[:90]}")
            cached = event.text.startswith("FROM ")  # FROM makes no image
        elif event.kind == "log" and "Using cache" in event.text:
            cached = True
        elif event.kind == "log" and not cached and (m := _CREATED.match(event.text)):
            made.append(m.group(1))  # an image this build created (classic), not a cache hit
    seconds = time.monotonic() - started
    log(f"{label}: {fmt(seconds)}")
    return {"seconds": seconds, "load": load, "phases": breakdown.phases(), "events": events}


def numpy20(lock, image):
    framework = [p for p in image.packages if p.group == "framework"]
    pins = compile_closure([f"torch=={image.framework_version}", "numpy==2.0.*"], python=image.python,
                           glibc="2.36", index_url=image.index_url,
                           constraints=[Pin(p.name, p.version, p.hashes) for p in framework])
    extras = [Package(name=p.name, version=p.version, hashes=p.hashes, group="extra")
              for p in pins if p.name not in {f.name for f in framework}]
    changed = sealed(image.model_copy(update={"name": "torch25-numpy20", "packages": tuple(framework + extras)}))
    return lock.model_copy(update={"images": (changed,)}), changed


def shared(a: list[str], b: list[str]) -> int:
    """How many lowest layers two images share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def layers(engine, ref) -> list[str]:
    return engine.client.images.get(ref).attrs["RootFS"]["Layers"]


def cleanup(engine, builder, tags, made) -> None:
    log(f"removing the {builder} benchmark's images")
    for ref in tags + list(reversed(made)):
        try:
            engine.client.images.remove(ref, force=ref in tags)
        except Exception:  # noqa: BLE001 - an image still in use by another stays
            pass


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
