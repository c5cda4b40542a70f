"""The offline bundle of a JAX image, end to end (the PyTorch path, with a small closure, is test_bundle.py;
TensorFlow's is test_bundle_tf.py): examples/frameworks.yaml's jax image (jax[cuda13] 0.12.0.1: 23 wheels,
2.65 GB) is bundled, then built from the bundle with the network cut off inside the build and no layer
cache, and the built image verifies with the JAX payload like the online one (with ENVKIT_TEST_FULL_BUNDLES=1:
that build's disk peak, ~12 GB of BuildKit records beside a second 4.8 GB image, is more than CI machines spare;
CI runs the wheelhouse check test_bundle_tf.py runs, inside the example JAX image). BuildKit builds it when it is
available: it bind-mounts the wheelhouse instead of copying it into a 2.65 GB layer, and copies the venv
into the runtime stage much faster than the classic builder (docs/images.md).

The bundle is removed at the end (pytest keeps old tmp directories), and so are the image and the BuildKit
cache records the offline build made (by id: those that appeared during the build).
"""

import json
import os
import shutil
import time

import pytest

from envkit.images.builder import LOCK_LABEL
from envkit.images.bundle_manifest import BUNDLE_LABEL, bundle_size, verify_bundle
from envkit.images.bundle import build_from_bundle, make_bundle
from envkit.images.wheelhouse import check_wheels
from envkit.lock import load_lock, sealed
from tests.buildcache import prune, records
from tests.integration.conftest import ROOT, envkit
from tests.integration.test_buildkit import ca_bundle, collect_created, remove_images
from tests.integration.test_bundle import (FULL_BUNDLE_BUILDS, assert_built_offline,
                                          assert_pip_installs_from_the_bundle_alone, record_builds)

pytestmark = [pytest.mark.integration, pytest.mark.network]

LOCK = ROOT / "examples" / "frameworks.lock"


@pytest.fixture(scope="module")
def jax_bundle(engine, tmp_path_factory):
    lock = load_lock(LOCK)
    # another name, so the bundle's tag is not the example image's (a build from it would take that tag)
    image = sealed(lock.image("jax").model_copy(update={"name": "jax-offline"}))
    lock = lock.model_copy(update={"images": (image,)})
    out = tmp_path_factory.mktemp("jax-bundle") / "jax.bundle"
    started = time.monotonic()
    path = make_bundle(engine, lock, image.name, out, ca_bundle=ca_bundle())
    print(f"jax bundle: {bundle_size(path)} bytes, made in {time.monotonic() - started:.1f} s")
    yield path, image
    shutil.rmtree(path.parent, ignore_errors=True)


def test_the_jax_bundle_holds_every_wheel_of_the_lock_hash_checked(jax_bundle):
    path, image = jax_bundle
    manifest = verify_bundle(path)
    assert manifest["image"] == "jax-offline" and manifest["lock_hash"] == image.hash
    wheels = check_wheels(image.packages, path / "context" / "wheelhouse")  # one per package, the lock's sha256
    assert len(wheels) == len(image.packages) == 23
    assert {w.name.split("-")[0] for w in wheels} >= {"jax", "jaxlib", "jax_cuda13_plugin", "jax_cuda13_pjrt",
                                                      "nvidia_cudnn_cu13", "nvidia_nccl_cu13"}
    assert any(f.startswith("context/debs/os/python3_") for f in manifest["files"])
    assert not any(f.startswith(("context/debs/devel/", "context/debs/nvcc/")) for f in manifest["files"])


def test_pip_installs_the_jax_closure_from_the_bundle_alone(engine, jax_bundle):
    path, image = jax_bundle
    assert_pip_installs_from_the_bundle_alone(engine, path, "jax", image, path.parent / "render")


@pytest.mark.skipif(os.environ.get(FULL_BUNDLE_BUILDS) != "1",
                    reason=f"the full offline JAX build needs ~17 GB of disk at its peak: {FULL_BUNDLE_BUILDS}=1")
def test_the_jax_image_builds_offline_from_its_bundle_and_verifies(engine, jax_bundle, monkeypatch):
    from envkit.engine.buildkit import BuildKitBuilder

    path, image = jax_bundle
    builder = "buildkit" if BuildKitBuilder(engine).available() else "classic"
    calls = record_builds(engine, monkeypatch)
    before = records() or set()
    made: list[str] = []
    started = time.monotonic()
    outcome = build_from_bundle(engine, path, builder=builder, verify=False, no_cache=True,
                                progress=collect_created(made))
    print(f"jax offline build ({builder}): {time.monotonic() - started:.1f} s, image {outcome.size} bytes")
    try:
        assert_built_offline(calls, builder)
        info = engine.inspect(outcome.tag)
        assert info.labels[LOCK_LABEL] == image.hash and info.labels[BUNDLE_LABEL].startswith("sha256:")
        assert info.labels["io.envkit.build"] == "offline" and info.labels["io.envkit.jaxlib"] == "0.12.0.1"
        # `envkit verify`, as for the online image: the payload inside it, against its labels and the bundle's lock
        verified = envkit("verify", outcome.tag, "--lock", path / "envkit.lock", "--json", timeout=600)
        doc = json.loads(verified.stdout)
        assert verified.returncode == 0 and doc["status"] == "verified", verified.stdout[-4000:] + verified.stderr
        assert doc["facts"]["jax"] == "0.12.0.1" and doc["facts"]["cuda"] == image.cuda
    finally:
        remove_images(engine, outcome.image_id, created=made)
        if builder == "buildkit":
            prune((records() or set()) - before)


