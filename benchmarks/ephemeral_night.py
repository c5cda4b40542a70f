"""Bytes moved by one ephemeral night, side by side: a naive Dockerfile, `envkit build` as it is by default, and
`envkit build --reproducible`, both envkit arms with their OS stage kept in the team registry, each against a real
registry and a fleet node of its own, in one run.

Arms (each: a fresh Debian docker-registry on loopback, and a node: a second engine with an empty data root,
tests/integration/second_engine.py, standing for a fleet machine that keeps what it pulled):
  naive         the anchor: build_times.NAIVE (one stage, apt python3 + python3-venv, a venv, `pip install
                --no-cache-dir`) with every package of the lock pinned (no hashes), built by BuildKit
  envkit        the default: `envkit build` (BuildKit: the environment layers from the files alone, on the OS stage
                of its key), the example's rendered context
  reproducible  `envkit build --reproducible` (its OS stage by BuildKit, its environment layers written by envkit)
The two envkit arms do what `envkit nightly --registry` does: after the push the OS stage is mirrored into the
registry by digest, and a runner without it pulls it back before building (app.nightly_publish: _mirror_os_stage,
restore_os_stage).
Nights, each on a wiped runner (everything the arm built removed from this engine, and the BuildKit cache records
that appeared since the arm began; night 0 and the naive arm built `--no-cache`; the base stays, as the nightly
restores it from its mirror):
  0  yesterday: the lock, built cold and pushed; the node pulls it                    -> (c) the cold build's time
  1  the same lock on a fresh runner: built, pushed; the node pulls it                -> (a)
  2  one pip extra changed, on a fresh runner: built, pushed; the node pulls it       -> (b)
Figures per night: build and push seconds; bytes uploaded (the push's layers the registry lacked: the engine's
stream, sized by the pushed manifest's compressed sizes, support.layer_moves); bytes the node pulled (its pull's
layers it lacked); for the envkit arms, the OS stage the runner pulled back. Percentages are of the night's
image as the registry holds it (its layers' compressed bytes). Targets (issue 35): (a) 0 environment bytes uploaded
or pulled, (b) <= 5% of the image's bytes, against ~100% for the naive Dockerfile; (c) the cold build <= 0.8x naive.

`--stack small`: the small stack of the integration tests (numpy and typing-extensions on the example's base; the
extra: typing-extensions), to try the script in minutes. Needs root (the node's dockerd), docker-registry, about
40 GB of disk for the example. Removes what it made (images, registries, the node, the BuildKit cache records that
appeared during the run).

Run: .venv/bin/python benchmarks/ephemeral_night.py [--stack example|small] [--arms naive,envkit,reproducible]
     [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.build_times import build_naive, ca_bundle, check_disk, fmt, log, numpy20  # noqa: E402
from envkit.app.nightly_publish import ImageReport, _mirror_os_stage, restore_os_stage  # noqa: E402
from envkit.engine.docker_engine import connect  # noqa: E402
from envkit.images import os_stage  # noqa: E402
from envkit.images.builder import build_image  # noqa: E402
from envkit.lock import load_lock  # noqa: E402
from envkit.registry.publish import pull_layers, push  # noqa: E402
from envkit.store.history import Store  # noqa: E402
from envkit.support.progress import decimal_size  # noqa: E402
from tests import buildcache  # noqa: E402
from tests.integration.registry import running_registry  # noqa: E402
from tests.integration.second_engine import second_engine  # noqa: E402

ARMS = ("naive", "envkit", "reproducible")
REPO = "bench/night"


def stacks(which: str):
    """The lock of nights 0 and 1, and night 2's (one pip extra changed): (lock, image) each."""
    if which == "small":
        from tests.integration.test_reproducible import lock_with

        return lock_with("night", "4.11.0", numpy="1.26.*"), lock_with("night", "4.12.2", numpy="1.26.*")
    lock = load_lock(ROOT / "examples" / "team.lock")
    return (lock, lock.images[0]), numpy20(lock, lock.images[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", choices=("example", "small"), default="example")
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    if unknown := set(arms) - set(ARMS):
        sys.exit(f"unknown arm(s) {sorted(unknown)}: choose from {', '.join(ARMS)}")
    if args.stack == "example":
        check_disk(40)
    engine, ca = connect(), ca_bundle()
    nights = stacks(args.stack)
    before = buildcache.records() or set()
    results: dict[str, list[dict]] = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        for arm in arms:
            with tempfile.TemporaryDirectory(prefix="envkit-night-") as tmp:
                results[arm] = run_arm(engine, arm, nights, ca, Path(tmp))
    finally:
        buildcache.prune((buildcache.records() or set()) - before)
    print(f"\none ephemeral night, {args.stack} stack, started {started}\n")
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps({"stack": args.stack, "started": started, "arms": results}, indent=2))


def run_arm(engine, arm: str, nights, ca, tmp: Path) -> list[dict]:
    rows: list[dict] = []
    made: set[str] = set()
    cache = buildcache.records() or set()
    with running_registry(tmp / "registry") as registry, second_engine() as address, \
            Store.open(tmp / "history.sqlite") as store:
        node = connect(address)
        repo = f"{registry.host}/{REPO}"
        try:
            for night, (lock, image) in enumerate((nights[0], nights[0], nights[1])):
                wipe(engine, made, cache)
                log(f"{arm}, night {night}: {image.name} on a wiped runner")
                row: dict = {"night": night}
                restored = None
                started = time.monotonic()
                if arm == "naive":  # (the two envkit arms restore their OS stage on a wiped runner, as the nightly)
                    pins = " ".join(f"{p.name}=={p.version}" for p in image.packages)
                    tag = f"envkit-bench/night-naive:{night}"
                    build_naive(engine, {"base": image.base.ref, "pins": pins}, tag, "buildkit", ca, [], no_cache=True)
                else:
                    if night:
                        key = os_stage.os_key(render(lock, image)["Dockerfile"])
                        tag = image_tag(lock, image)
                        restored = restore_os_stage(engine, store, image, tag, key, lambda msg: log(f"  {msg}"))
                        if restored is None:  # a silent rebuild would make the figures a lie
                            sys.exit(f"night {night}: the OS stage of key {key} was not restored from the registry")
                    outcome = build_image(engine, lock, image, "team.yaml", ca_bundle=ca, verify=False,
                                          builder="buildkit", reproducible=arm == "reproducible",
                                          no_cache=night == 0, keep_os_stage=True,  # (as the nightly)
                                          progress=lambda _name, e: None)
                    tag = outcome.tag
                    row["phases"] = dict(outcome.phases)
                row["build_s"] = round(time.monotonic() - started, 1)
                info = engine.inspect(tag)
                made.update({info.id, f"{tag}-os"} if info else {f"{tag}-os"})
                started = time.monotonic()
                pushed = push(engine, tag, repo, f"night{night}")
                row["push_s"] = round(time.monotonic() - started, 1)
                row |= moved("uploaded", pushed.layers)
                if arm != "naive":
                    report = ImageReport(image.name, tag)
                    _mirror_os_stage(engine, store, lock, image, registry.host, report)
                    row["os_stage_mirrored"] = report.pushed
                started = time.monotonic()
                _info, pulled = pull_layers(node, pushed.pinned)
                row["pull_s"] = round(time.monotonic() - started, 1)
                row |= moved("pulled", pulled)
                row["os_layers"] = len(engine.inspect(f"{tag}-os").layers) if engine.inspect(f"{tag}-os") else None
                row["env_uploaded_bytes"] = above(pushed.layers, row["os_layers"])
                row["env_pulled_bytes"] = above(pulled, row["os_layers"])
                if restored is not None:  # the OS stage's layers, as the registry holds them: what the runner pulled
                    row["runner_pulled"] = restored
                    row["runner_pulled_bytes"] = sum(x.bytes or 0 for x in pushed.layers.layers[:row["os_layers"]])
                log(f"{arm}, night {night}: build {fmt(row['build_s'])}, uploaded {decimal_size(row['uploaded_bytes'])}"
                    f" of {decimal_size(row['image_bytes'])}, node pulled {decimal_size(row['pulled_bytes'])}")
                rows.append(row)
        finally:
            wipe(engine, made, cache)
    return rows


def render(lock, image) -> dict[str, bytes]:
    from envkit.render.files import render_files

    return render_files(lock, image, "team.yaml", buildkit=True)


def image_tag(lock, image) -> str:
    from envkit.render.files import image_tag as tag_of

    return tag_of(lock.team, image)


def moved(verb: str, moves) -> dict:
    """A push's or pull's layers: how many moved, their bytes, and the image's bytes as the registry holds it."""
    return {f"{verb}_layers": len(moves.moved), f"{verb}_bytes": moves.moved_bytes, "layers": len(moves.layers),
            "image_bytes": moves.moved_bytes + moves.kept_bytes}


def above(moves, os_layers: int | None) -> int | None:
    """The bytes that moved of the layers above the OS stage's (the environment and the payload); None: no OS stage
    of envkit's own to count from (the naive build)."""
    if os_layers is None:
        return None
    return sum(x.bytes or 0 for x in moves.layers[os_layers:] if x in moves.moved)


def wipe(engine, refs: set[str], cache: set[str]) -> None:
    """Every image of ``refs`` on this engine, with all its tags and digest references, and the BuildKit cache
    records that were not in ``cache`` (the runner wiped)."""
    for ref in sorted(refs):
        info = engine.inspect(ref)
        if info is not None:
            try:
                engine.client.images.remove(info.id, force=True)
            except Exception as exc:  # noqa: BLE001 - said, the run goes on
                log(f"  could not remove {ref}: {exc}")
    refs.clear()
    buildcache.prune((buildcache.records() or set()) - cache)


def print_table(results: dict[str, list[dict]]) -> None:
    naive_cold = results.get("naive", [{}])[0].get("build_s")
    print(f"{'arm':<13} {'night':<16} {'build':>7} {'x naive':>7} {'push':>6} {'uploaded':>17} {'node pulled':>17}"
          f" {'env up / pulled':>19}")
    names = {0: "0 cold", 1: "1 same lock", 2: "2 extra changed"}
    for arm, rows in results.items():
        for row in rows:
            ratio = f"{row['build_s'] / naive_cold:.2f}x" if naive_cold and row["night"] == 0 else ""
            env = ("-" if row["env_uploaded_bytes"] is None else
                   f"{decimal_size(row['env_uploaded_bytes'])} / {decimal_size(row['env_pulled_bytes'])}")
            up, down = (share(row[k], row["image_bytes"]) for k in ("uploaded_bytes", "pulled_bytes"))
            print(f"{arm:<13} {names[row['night']]:<16} {fmt(row['build_s']):>7} {ratio:>7} {fmt(row['push_s']):>6} "
                  f"{up:>17} {down:>17} {env:>19}")
    print("(uploaded, node pulled: bytes and % of that night's image as the registry holds it, compressed; env: of "
          "the layers above the OS stage; x naive: the cold build against the naive one)")
    for arm in ("envkit", "reproducible"):
        for row in results.get(arm, []):
            if row.get("runner_pulled_bytes") is not None:
                print(f"{arm} night {row['night']}: the runner pulled its OS stage back, "
                      f"{decimal_size(row['runner_pulled_bytes'])}")
    for row in results.get("reproducible", []):
        if row.get("phases"):
            print(f"reproducible night {row['night']}: " + ", ".join(f"{k} {fmt(v)}" for k, v in row["phases"].items()))


def share(n: int, total: int) -> str:
    return f"{decimal_size(n)} {100 * n / total:.0f}%" if total else decimal_size(n)


if __name__ == "__main__":
    main()
