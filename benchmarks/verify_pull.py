"""What verifying a signed certificate costs a pull, beside the pull itself (issue 36's target: under 1 s and under 5%
of a warm pull).

A label-only image on the small envkit base (no new layer) is pushed to a real registry (Debian's docker-registry on
loopback), signed in cosign's layout with a fresh key and given two signed certificate attestations (two GPU models),
as a nightly with --signing-key leaves it. Then, each RUNS times (median reported):

  verify      registry/verify.judge_image: read sha256-<hex>.sig and .att over HTTP and verify both (what the gate
              adds to a pull)
  crypto      trust.attest.verify_attestation of one envelope in memory (the signature check alone)
  warm pull   registry.publish.pull_by_digest of the image whose layers the engine already holds (its tag and
              digest reference removed first): manifest, config and the engine's bookkeeping
  layer pull  pull_by_digest of an image with one layer of 100 MB (random bytes) the engine does not hold (removed
              before each run), from the warm registry on loopback: the smallest pull that moves data
  cli pull    `envkit pull REF --no-gpus --require-certified` end to end (a new process: Python start-up, the
              registry reads, the gate, the pull)

Run under the engine lock: flock /tmp/envkit-engine.lock .venv/bin/python benchmarks/verify_pull.py [--runs N]
Removes what it made (images, registry, keys).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.certify.certificate import Certificate  # noqa: E402
from envkit.engine.docker_engine import connect  # noqa: E402
from envkit.registry.api import _RegistryHTTP  # noqa: E402
from envkit.registry.publish import promote, pull_by_digest  # noqa: E402
from envkit.registry.signatures import att_tag, read_layers  # noqa: E402
from envkit.registry.signing import sign_published  # noqa: E402
from envkit.registry.verify import judge_image  # noqa: E402
from envkit.trust.attest import verify_attestation  # noqa: E402
from envkit.trust.keys import generate_keys, load_signing_key, load_trusted_keys  # noqa: E402
from tests.integration.registry import running_registry  # noqa: E402

LOCK = "sha256:" + "e" * 64
STACK = "2.5.1-cu124-py3.11-eeeeeeee"
NO_WAIT = dict(sleep=lambda s: None)


def timed(fn, runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    engine = connect()
    dc = engine.client
    bases = [i for i in dc.images.list(name="envkit-base/debian") if i.tags]
    if not bases:
        sys.exit("no local envkit-base/debian image")
    base = min(bases, key=lambda i: i.attrs["Size"]).tags[0]
    local = "envkit-bench/verify-pull:1"
    labels = {"io.envkit.team": "bench", "io.envkit.image": "verify", "io.envkit.lock-hash": LOCK,
              "org.opencontainers.image.version": STACK}
    dockerfile = "\n".join([f"FROM {base}", *(f'LABEL {k}="{v}"' for k, v in labels.items())])
    image, _ = dc.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=local, pull=False, rm=True)
    fat = "envkit-bench/verify-pull-layer:1"
    dc.images.build(fileobj=io.BytesIO(f"FROM {base}\nRUN head -c 100000000 /dev/urandom > /blob\n".encode()),
                    tag=fat, pull=False, rm=True)
    with tempfile.TemporaryDirectory() as tmp, running_registry(Path(tmp) / "registry") as reg:
        keys = generate_keys(Path(tmp) / "keys")
        key = load_signing_key(keys["private_key"])
        assert key is not None
        trusted = load_trusted_keys(keys["public_key"])
        repo = f"{reg.host}/bench/verify"
        digest = promote(engine, repo, STACK, certified=True, image=local, **NO_WAIT).digest
        certs = [Certificate(image=f"bench/verify:{STACK}", image_id=image.id, lock_hash=LOCK, gpu_model=gpu,
                             driver="570.124.06", status="certified", mode="certify", gpu_count=8,
                             payload_version="bench", payload_sha256="", envkit_version="bench",
                             created_at="2026-12-07T00:00:00Z") for gpu in ("NVIDIA H200", "NVIDIA H100")]
        sign_published(engine, repo, digest, key, certs, **NO_WAIT)
        http = _RegistryHTTP(engine, repo, actions="pull")
        envelope = (read_layers(http, att_tag(digest)) or [])[0].data
        pinned = f"{repo}@{digest}"

        def verify() -> None:
            found = judge_image(http, digest, LOCK, trusted, [])
            assert len(found.certificates) == 2 and "signed_by" in found.signature

        def warm_pull() -> None:
            for ref in (f"{repo}:{STACK}", pinned):
                try:
                    dc.images.remove(ref)
                except Exception:  # noqa: BLE001 - not tagged that way
                    pass
            pull_by_digest(engine, pinned, **NO_WAIT)

        env = {**os.environ, "ENVKIT_TRUSTED_KEYS": keys["public_key"]}
        store = Path(tmp) / "h.sqlite"
        from envkit.store.history import Store

        Store.open(store).close()

        def cli_pull() -> None:
            for ref in (f"{repo}:{STACK}", pinned):
                try:
                    dc.images.remove(ref)
                except Exception:  # noqa: BLE001
                    pass
            proc = subprocess.run([str(ROOT / ".venv/bin/envkit"), "pull", f"{repo}:{STACK}", "--no-gpus",
                                   "--require-certified", "--json", "--store", str(store)], env=env,
                                  capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stdout + proc.stderr

        fat_pinned = f"{reg.host}/bench/layer@" + promote(engine, f"{reg.host}/bench/layer", STACK, certified=False,
                                                            image=fat, **NO_WAIT).digest
        dc.images.remove(fat, force=True)

        def layer_pull() -> None:
            try:
                dc.images.remove(fat_pinned, force=True)
            except Exception:  # noqa: BLE001
                pass
            for summary in dc.api.images(name=f"{reg.host}/bench/layer"):
                dc.images.remove(summary["Id"], force=True)
            pull_by_digest(engine, fat_pinned, **NO_WAIT)

        verify()
        warm_pull()  # once first: the engine then holds every layer
        results = {"verify": timed(verify, args.runs),
                   "crypto": timed(lambda: verify_attestation(envelope, trusted, digest), args.runs),
                   "warm pull": timed(warm_pull, args.runs),
                   "layer pull": timed(layer_pull, max(3, args.runs // 3)),
                   "cli pull": timed(cli_pull, max(3, args.runs // 3))}
        for ref in (f"{repo}:{STACK}", pinned, local, fat_pinned):
            try:
                dc.images.remove(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
    print(f"{'step':12} {'median':>10}  runs")
    for name, (median, times) in results.items():
        print(f"{name:12} {median * 1000:8.1f} ms  {len(times)}")
    ratio = results["verify"][0] / results["warm pull"][0]
    layer = results["verify"][0] / results["layer pull"][0]
    cli = results["verify"][0] / results["cli pull"][0]
    print(f"verify = {results['verify'][0]:.3f} s (target < 1 s); verify / warm pull (no layer moved) = {ratio:.1%}; "
          f"verify / 100 MB layer pull = {layer:.1%}; verify / envkit pull end to end = {cli:.1%} (target < 5%)")
    if args.json:
        args.json.write_text(json.dumps({k: {"median_s": m, "runs_s": t} for k, (m, t) in results.items()}
                                        | {"ratio_warm": ratio, "ratio_layer": layer, "ratio_cli": cli}, indent=2))


if __name__ == "__main__":
    main()
