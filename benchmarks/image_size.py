"""Size of the example image next to what it must hold (its base + the installed Python
environment) and next to a naive single-stage Dockerfile installing the same pins.

Target: the envkit image within 3% of base + environment.

The naive image (`FROM base; apt-get install python3-pip python3-venv; pip install -r ...`, one
stage, default flags) is built once and kept as envkit-bench/naive:<hash of its context>; later
runs reuse it (`docker rmi` it to free the space). The example image is built if it is missing.
No assertions: it prints a table.
Run: .venv/bin/python benchmarks/image_size.py
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.images.base import ensure_base  # noqa: E402
from envkit.images.builder import build_image, run_build, stage_context  # noqa: E402
from envkit.engine.protocol import RunOptions  # noqa: E402
from envkit.engine.docker_engine import connect  # noqa: E402
from envkit.lock import load_lock  # noqa: E402
from envkit.render.files import requirements_text  # noqa: E402

# The naive way, for comparison only (envkit's own Dockerfiles come from templates/).
NAIVE = """\
FROM {base}
RUN apt-get update && apt-get install -y python3-pip python3-venv
COPY ca.pem /etc/ssl/certs/site-ca.pem
COPY requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/venv && PIP_CERT=/etc/ssl/certs/site-ca.pem /opt/venv/bin/pip install -r /tmp/requirements.txt
"""


def main() -> None:
    engine = connect()
    lock = load_lock(ROOT / "examples" / "team.lock")
    image = lock.images[0]
    base = ensure_base(engine, image.base, log)
    ca = ca_bundle()
    log("the example image (built if missing)")
    outcome = build_image(engine, lock, image, "examples/team.yaml", ca_bundle=ca, verify=False,
                          progress=lambda _, event: log(f"  {getattr(event, 'text', event)}"[:140]))
    built = engine.inspect(outcome.tag)
    venv = du(engine, outcome.tag, "/opt/venv")
    naive_tag = naive_image(engine, base.id, image, ca)
    naive = engine.inspect(naive_tag)
    naive_venv = du(engine, naive_tag, "/opt/venv")
    need = base.size + venv

    print()
    print(f"image {outcome.tag} ({built.id[:19]})")
    rows = [("base image (" + image.base.ref + ")", base.size, None),
            ("installed environment (du -sb /opt/venv)", venv, None),
            ("base + environment", need, None),
            ("envkit image", built.size, need),
            ("naive single-stage image", naive.size, need)]
    for name, size, ref in rows:
        ratio = f"{size / ref:6.3f} x base+env ({(size / ref - 1) * 100:+.1f}%)" if ref else ""
        print(f"  {name:<58}{gb(size):>10}  {ratio}")
    print(f"  {'envkit image / naive image':<58}{built.size / naive.size:>10.3f}")
    print(f"  {'naive image environment (du -sb /opt/venv)':<58}{gb(naive_venv):>10}")
    print(f"  target: envkit within 3% of base+env -> {'met' if built.size <= need * 1.03 else 'MISSED'}")
    print()
    print("  envkit image layers (docker history), largest first:")
    for size, created_by in layer_sizes(engine, outcome.tag)[:6]:
        print(f"    {gb(size):>10}  {created_by[:100]}")
    print("  naive image layers, largest first:")
    for size, created_by in layer_sizes(engine, naive_tag)[:4]:
        print(f"    {gb(size):>10}  {created_by[:100]}")


def naive_image(engine, base_id: str, image, ca: Path | None) -> str:
    requirements = requirements_text(image, "framework") + requirements_text(image, "extra")
    dockerfile = NAIVE.format(base=image.base.ref)
    ca_bytes = ca.read_bytes() if ca else b""
    digest = hashlib.sha256("\0".join([base_id, dockerfile, requirements]).encode() + ca_bytes).hexdigest()[:12]
    tag = f"envkit-bench/naive:{digest}"
    if engine.inspect(tag) is not None:
        log(f"reusing {tag}")
        return tag
    log(f"building {tag} (once; minutes)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="envkit-naive-") as tmp:
        files = {"Dockerfile": dockerfile.encode(), "requirements.txt": requirements.encode(), "ca.pem": ca_bytes}
        ctx = stage_context(Path(tmp), files)
        for event in run_build(engine, ctx, tag, {"io.envkit.bench": "naive"}):
            if event.kind == "step":
                log(f"  {time.monotonic() - started:7.0f}s step {event.step}/{event.total}: {event.text[:90]}")
    return tag


def du(engine, ref: str, path: str) -> int:
    result = engine.run(ref, ["du", "-sb", path], RunOptions(timeout=600, network=False, user="0"))
    return int(result.stdout.split()[0])


def layer_sizes(engine, ref: str) -> list[tuple[int, str]]:
    history = engine.client.api.history(ref)
    return sorted(((h["Size"], (h.get("CreatedBy") or "").replace("/bin/bash -o pipefail -c ", ""))
                   for h in history if h["Size"]), reverse=True)


def ca_bundle():
    value = os.environ.get("ENVKIT_CA_BUNDLE") or os.environ.get("PIP_CERT")
    return Path(value) if value and Path(value).is_file() else None


def gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
