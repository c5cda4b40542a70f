"""What a researcher's commands say about images that are not what envkit expects, with the real engine:
an image without python3 (verify), and `envkit run` streaming a job's output as it runs."""

import json

import pytest

from tests.integration.conftest import envkit
from tests.integration.published import LOCK_A, STACK_A, label_image, labels_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def no_python(dc, base):
    """An image with envkit's labels on the bare Debian base: no python3 in it."""
    ref = f"envkit-test-nopython/torch25:{STACK_A}"
    label_image(dc, base, ref, labels_for(LOCK_A, STACK_A), {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0"})
    yield ref
    dc.images.remove(ref, force=True)


def test_verify_of_an_image_without_python3_is_a_verification_failure(no_python):
    proc = envkit("verify", no_python, "--json", timeout=300)
    assert proc.returncode == 8, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["error"] == "VerificationError" and doc["message"].startswith(f"{no_python} has no python3")
    assert "cannot start" not in doc["message"] and "Traceback" not in proc.stderr
