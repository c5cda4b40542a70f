"""The offline bundle of a TensorFlow image, kept short for CI (the JAX one is built offline end to end in
test_bundle_jax.py, from the same templates): `envkit bundle make` of examples/frameworks.yaml's tf image (50
wheels, 3.66 GB), every wheel of the lock present and sha256-checked; then, inside the example TensorFlow
image with no network, `pip install --dry-run --no-index` of the bundle's requirements from its wheelhouse: pip
resolves the whole closure (dependencies included, hashes required) from the bundle alone. A full offline
TensorFlow build was measured once (docs/images.md). The bundle is removed at the end.
"""

import json
import shutil
import time

import pytest

from envkit.images.wheelhouse import check_wheels
from envkit.images.bundle_manifest import verify_bundle
from envkit.lock import load_lock
from tests.integration.conftest import ROOT, envkit
from tests.integration.test_bundle import assert_pip_installs_from_the_bundle_alone

pytestmark = [pytest.mark.integration, pytest.mark.network]

LOCK = ROOT / "examples" / "frameworks.lock"


@pytest.fixture(scope="module")
def tf_bundle(engine, tmp_path_factory):
    """`envkit bundle make examples/frameworks.yaml --image tf` (the committed lock is reused)."""
    out = tmp_path_factory.mktemp("tf-bundle") / "tf.bundle"
    started = time.monotonic()
    made = envkit("bundle", "make", "examples/frameworks.yaml", "--image", "tf", "--bundle", out, "--json", timeout=1800)
    assert made.returncode == 0, made.stderr[-4000:]
    doc = json.loads(made.stdout)
    print(f"tf bundle: {doc['size_bytes']} bytes, made in {time.monotonic() - started:.1f} s")
    yield out, doc, load_lock(LOCK).image("tf")
    shutil.rmtree(out.parent, ignore_errors=True)


def test_the_tf_bundle_holds_every_wheel_of_the_lock_hash_checked(tf_bundle):
    path, doc, image = tf_bundle
    assert doc["lock_reused"] is True and doc["lock_hash"] == image.hash and doc["wheels"] == len(image.packages)
    manifest = verify_bundle(path)
    assert manifest["tag"] == doc["tag"] and manifest["image"] == "tf"
    wheels = check_wheels(image.packages, path / "context" / "wheelhouse")
    assert len(wheels) == len(image.packages) == 50
    assert {w.name.split("-")[0] for w in wheels} >= {"tensorflow", "nvidia_cudnn_cu12", "nvidia_nccl_cu12",
                                                      "keras", "tensorboard"}


def test_pip_installs_the_tf_closure_from_the_bundle_alone(engine, tf_bundle):
    path, _, image = tf_bundle
    assert_pip_installs_from_the_bundle_alone(engine, path, "tf", image, path.parent / "render")
