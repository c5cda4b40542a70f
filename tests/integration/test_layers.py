"""Layers in order of change: an image that differs only in its extra packages reuses
every layer below them (the OS and the whole framework environment)."""

import json

import pytest

from envkit.images.builder import build_image, pick_builder
from envkit.index.closure import compile_closure
from envkit.lock import Package, load_lock, sealed
from tests.integration.conftest import ROOT

pytestmark = pytest.mark.integration


def test_changing_only_an_extra_reuses_the_framework_layer(example_build, engine):
    doc, _ = example_build
    lock = load_lock(ROOT / "examples" / "team.lock")
    a = lock.images[0]
    framework = [p for p in a.packages if p.group == "framework"]
    # same framework closure, a different numpy: resolved against A's framework pins
    pins = compile_closure([f"torch=={a.framework_version}", "numpy==2.0.*"], python=a.python, glibc="2.36",
                           index_url=a.index_url, constraints=[_pin(p) for p in framework])
    extras = [Package(name=p.name, version=p.version, hashes=p.hashes, group="extra")
              for p in pins if p.name not in {f.name for f in framework}]
    assert [p.version for p in extras if p.name == "numpy"][0].startswith("2.0.")
    b = sealed(a.model_copy(update={"name": "torch25-numpy20", "packages": tuple(framework + extras)}))
    lock_b = lock.model_copy(update={"images": (b,)})

    # the example's builder: its outcome's, or, when an earlier build was kept (`make demo` before the suite), the one
    # `auto` picks here, whose render that image's identity matched ("auto" itself would count the classic render)
    builder = doc["images"][0]["builder"] or pick_builder(engine, doc["builder"])
    outcome = build_image(engine, lock_b, b, "examples/team.yaml", ca_bundle=_ca(), progress=lambda *a: None,
                          verify=False, builder=builder)
    try:
        layers_a = _layers(engine, doc["images"][0]["image_id"])  # (by id: a tag may be moved by another build)
        layers_b = _layers(engine, outcome.tag)
        # base, OS packages + user, the CUDA wheels, the rest of the framework: identical; the extras' differ
        shared = len(_layers(engine, a.base.ref)) + _layers_through_framework(lock, a, builder)
        assert layers_a[:shared] == layers_b[:shared]
        assert layers_a[shared:] != layers_b[shared:]
        print(json.dumps({"shared_layers": shared, "of": len(layers_a), "build_seconds": round(outcome.seconds, 1)}))
    finally:
        engine.client.images.remove(outcome.tag, force=True)


def _layers_through_framework(lock, image, builder) -> int:
    """The layers the rendered online Dockerfile of ``builder`` makes above its base, up to and including the
    framework's install step: every RUN and COPY of the os and runtime stages (each makes a layer; BuildKit's
    installer stage is in no layer of the image)."""
    from envkit.render.files import render_files

    text = render_files(lock, image, "examples/team.yaml", buildkit=builder == "buildkit")["Dockerfile"].decode()
    count, stage = 0, None
    for line in text.splitlines():
        if line.startswith("FROM "):
            stage = line.split(" AS ")[-1].strip()
        if line.startswith(("RUN ", "COPY ")) and stage in ("os", "runtime"):
            count += 1
        if stage == "runtime" and ("-r /tmp/envkit/framework.txt" in line or "-r /tmp/envkit-framework.txt" in line):
            return count
    raise AssertionError("no framework install step in the rendered Dockerfile")


def _pin(p):
    from envkit.index.closure import Pin

    return Pin(p.name, p.version, p.hashes)


def _layers(engine, tag):
    return engine.client.images.get(tag).attrs["RootFS"]["Layers"]


def _ca():
    import os
    from pathlib import Path

    value = os.environ.get("ENVKIT_CA_BUNDLE") or os.environ.get("PIP_CERT")
    return Path(value) if value and Path(value).is_file() else None
