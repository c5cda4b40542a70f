"""TensorFlow images after the lock: framework facts (envkit/frameworks.py), the rendered context,
the refusal that remains (devel), and the host's verdict on a TensorFlow payload document.

As in test_frameworks.py, payload documents fake the device FACTS only; the outcome is always
``decide``'s.
"""

from __future__ import annotations

import copy
import json

import pytest

from envkit import frameworks
from envkit.certify.verdict import decide
from envkit.payload.harness import expect_from_labels
from envkit.errors import BuildError, EnvkitError
from envkit.lock import load_lock
from envkit.render.files import context_for, render_files
from tests.conftest import ROOT
from tests.unit.lockfixtures import make_lock, make_tf_image
from tests.unit.payload_modules import payload_sources, rendered_payload
from envkit.frameworks import expected

FRAMEWORKS_LOCK = ROOT / "examples" / "frameworks.lock"
TF = make_tf_image()
EXPECT = expected(TF)
STATIC = ("python_version", "tensorflow_version", "cuda_runtime", "cudnn_version", "nccl_version", "build_info",
          "pip_check", "cpu_train_step")
BUILT_FOR = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]  # tf.sysconfig.get_build_info() in the 2.20.0 image
H200 = {"index": 0, "name": "NVIDIA H200", "cc": "9.0", "memory_gib": None}
L40S = {"index": 1, "name": "NVIDIA L40S", "cc": "8.9", "memory_gib": None}
M60 = {"index": 1, "name": "Tesla M60", "cc": "5.2", "memory_gib": None}


# ------------------------------------------------------------------- what the lock says
def test_tf_expect_comes_from_the_lock_without_the_catalogs_arch_list():
    assert EXPECT == {"framework": "tensorflow", "tensorflow": "2.20.0", "cuda": "12.9.79", "cudnn": "9.28.0.42",
                      "nccl": "2.32.3", "python": "3.13", "driver_floor": "525.60.13"}


def test_tf_labels_say_what_the_lock_says_and_stamp_no_arch_list():
    labels = dict(context_for(make_lock(TF), TF, "team.yaml").labels)
    assert labels["io.envkit.framework"] == "tensorflow==2.20.0"
    assert (labels["io.envkit.cuda"], labels["io.envkit.cudnn"], labels["io.envkit.nccl"]) == (
        "12.9.79", "9.28.0.42", "2.32.3")
    assert "io.envkit.arch-list" not in labels and "io.envkit.min-cc" not in labels
    assert frameworks.of_labels(labels) is frameworks.TENSORFLOW
    assert expect_from_labels(labels) == EXPECT


def test_tf_dockerfile_is_the_runtime_flavour():
    lock = load_lock(FRAMEWORKS_LOCK)
    image = lock.image("tf")
    files = render_files(lock, image, "examples/frameworks.yaml")
    text = files["Dockerfile"].decode()
    assert text.count("FROM ") == 2 and "FROM envkit-base/debian:trixie-minbase-" in text  # os, runtime
    assert "--require-hashes" in text and 'NVIDIA_REQUIRE_CUDA="cuda>=12.0"' in text
    assert "torch" not in text.lower() and "jax" not in text.lower()
    framework = files["requirements/framework.txt"].decode()
    assert "tensorflow==2.20.0 \\\n    --hash=sha256:" in framework
    cuda = files["requirements/cuda.txt"].decode()  # the CUDA wheels: a layer of their own
    for pin in ("nvidia-cudnn-cu12==9.28.0.42", "nvidia-nccl-cu12==2.32.3", "nvidia-cuda-runtime-cu12==12.9.79"):
        assert f"{pin} \\\n    --hash=sha256:" in cuda, pin
    assert json.loads(files["envkit/expect.json"]) == expected(image)
    assert rendered_payload(files) == payload_sources()


# ------------------------------------------------------------------------- refusals
def test_tf_images_bundle():
    frameworks.require_bundle(TF)


def test_devel_flavour_refuses_tf_with_the_reason_and_the_way_out():
    image = make_tf_image(flavour="devel")
    with pytest.raises(EnvkitError) as err:
        render_files(make_lock(image), image, "team.yaml")
    message, hint = err.value.message, err.value.hint
    assert "devel flavour, which envkit makes only for PyTorch and JAX images" in message
    assert "(TensorFlow 2.20.0 is locked, CUDA 12.9)" in message
    assert "no tensorflow[and-cuda] release installs CUDA 12.4" in message and "Debian's 12.4 toolkit" in message
    assert "flavour: runtime" in hint and "CUDA 13 and flavour: devel" in hint


# --------------------------------------------------------------------- the verdict
def check(name, status="passed", message="ok"):
    return {"name": name, "status": status, "value": None, "expected": None, "message": message, "seconds": 0.1}


def gpu_doc(gpus=(H200,), driver="580.95.05", **facts):
    base = {"framework": "tensorflow", "python": "3.13.5", "tensorflow": "2.20.0", "cuda": "12.9.79",
            "cudnn": "9.28.0.42", "nccl": "2.32.3", "build_cuda": "12.5.1", "build_cudnn": "9",
            "arch_list": list(BUILT_FOR), "driver": driver, "gpus": [dict(g) for g in gpus]}
    base.update(facts)
    return {"schema": "envkit.payload/1", "payload": {"version": "1", "sha256": "f" * 64}, "mode": "certify",
            "status": "certified", "facts": base,
            "checks": [check(n) for n in STATIC] + [check(n) for n in frameworks.TENSORFLOW.gpu_checks],
            "telemetry": [], "seconds": 30.0}


def cpu_doc(**facts):
    doc = gpu_doc(gpus=(), driver=None, **facts)
    doc.update(mode="verify", status="verified")
    doc["checks"] = [check(n) for n in STATIC] + [check(n, "skipped", "no CUDA device visible")
                                                  for n in frameworks.TENSORFLOW.gpu_checks]
    return doc


def set_check(doc, name, status, message=""):
    doc = copy.deepcopy(doc)
    for c in doc["checks"]:
        if c["name"] == name:
            c.update(status=status, message=message)
    return doc


def test_tf_certified_on_h200_and_l40s_and_verified_on_cpu():
    assert decide(gpu_doc(gpus=(H200, L40S)), EXPECT, gpu_requested=True) == ("certified", ())
    assert decide(cpu_doc(), EXPECT, gpu_requested=False) == ("verified", ())


@pytest.mark.parametrize("fact, value, words", [
    ("cudnn", "9.28.1.4", ["cuDNN: the lock expects 9.28.0.42 but the image has 9.28.1.4 (compared on every component)"]),
    ("cudnn", None, ["cuDNN: the lock expects 9.28.0.42 but the image has none"]),
    ("tensorflow", "2.19.1", ["tensorflow: the lock expects 2.20.0 but the image has 2.19.1"]),
    ("tensorflow", None, ["tensorflow: the lock expects 2.20.0 but the image has none"]),
    ("cuda", "12.9.86", ["CUDA runtime", "12.9.79", "12.9.86"]),
    ("nccl", "2.32.4", ["NCCL", "2.32.3", "2.32.4"]),
])
def test_tf_version_mismatch_fails_with_the_reason_even_when_the_payload_says_passed(fact, value, words):
    for doc, requested in ((gpu_doc(**{fact: value}), True), (cpu_doc(**{fact: value}), False)):
        status, reasons = decide(doc, EXPECT, gpu_requested=requested)
        assert status == "failed"
        assert any(all(w in r for w in words) for r in reasons), reasons


@pytest.mark.parametrize("facts, reason", [
    ({"build_cuda": "12.9.86"}, "CUDA runtime: the image has 12.9.79 but tensorflow was built against 12.9.86 "
                                "(it needs the same major, not older)"),
    ({"build_cuda": "13.0"}, "CUDA runtime: the image has 12.9.79 but tensorflow was built against 13.0"),
    ({"build_cudnn": "10"}, "cuDNN: the image has 9.28.0.42 but tensorflow was built against 10"),
    ({"build_cudnn": "9.30"}, "cuDNN: the image has 9.28.0.42 but tensorflow was built against 9.30"),
])
def test_what_tensorflow_was_built_against_must_run_with_what_is_installed(facts, reason):
    """The payload's build_info check, re-derived on the host: a payload that says passed is not believed."""
    status, reasons = decide(gpu_doc(**facts), EXPECT, gpu_requested=True)
    assert status == "failed" and any(r.startswith(reason) for r in reasons), reasons
    assert decide(gpu_doc(build_cuda=None, build_cudnn=None), EXPECT, gpu_requested=True) == ("certified", ())


def test_tensorflow_local_tag_is_ignored():
    assert decide(gpu_doc(tensorflow="2.20.0+nv25.02"), EXPECT, gpu_requested=True) == ("certified", ())


def test_mismatch_reported_by_the_payload_is_a_reason():
    doc = set_check(cpu_doc(cudnn="9.28.1.4"), "cudnn_version", "failed",
                    "cuDNN 9.28.1.4 (nvidia-cudnn) does not match expected 9.28.0.42")
    status, reasons = decide(doc, EXPECT, gpu_requested=False)
    assert status == "failed"
    assert reasons[0] == "check cudnn_version failed: cuDNN 9.28.1.4 (nvidia-cudnn) does not match expected 9.28.0.42"


def test_coverage_is_judged_on_what_tensorflow_was_built_for():
    """The catalog's list for 2.20 has sm_50 (an M60 would pass); the image's own has none below sm_60."""
    status, reasons = decide(gpu_doc(gpus=(H200, M60)), EXPECT, gpu_requested=True)
    assert status == "failed"
    assert reasons == ("arch list sm_60 sm_70 sm_80 sm_89 compute_90 has no kernels for Tesla M60 (cc 5.2)",)
    status, reasons = decide(gpu_doc(arch_list=None), EXPECT, gpu_requested=True)
    assert status == "failed" and reasons == ("arch list (none) has no kernels for NVIDIA H200 (cc 9.0)",)


def test_a_lock_that_gives_an_arch_list_is_compared():
    """Should the catalog's list ever be the build's, carrying it in the expect document compares them."""
    expect = {**EXPECT, "arch_list": ["sm_35", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "compute_80"]}
    status, reasons = decide(gpu_doc(), expect, gpu_requested=True)
    assert status == "failed" and any(r.startswith("arch list: the lock expects compute_80 sm_35") for r in reasons)


def test_required_tf_gpu_checks_must_really_pass():
    assert frameworks.TENSORFLOW.required_gpu_checks == ("gpu_devices", "cc_covered", "gpu_train_step")
    for name in frameworks.TENSORFLOW.required_gpu_checks:
        status, reasons = decide(set_check(gpu_doc(), name, "skipped", "no CUDA device visible"), EXPECT,
                                 gpu_requested=True)
        assert status == "failed" and any(f"GPU check {name} did not pass (skipped)" in r for r in reasons)
    for name in ("memory", "matmul_tflops"):  # probes: they may skip; only the required three certify
        assert decide(set_check(gpu_doc(), name, "skipped"), EXPECT, gpu_requested=True)[0] == "certified"


def test_tf_gpu_check_claimed_passed_without_a_gpu_fails():
    doc = set_check(cpu_doc(), "gpu_train_step", "passed", "bfloat16 loss fell")
    status, reasons = decide(doc, EXPECT, gpu_requested=False)
    assert status == "failed" and "claims GPU check gpu_train_step passed with no GPU visible" in reasons
    assert decide(cpu_doc(), EXPECT, gpu_requested=True) == (
        "failed", ("certification asked for a GPU but none is visible in the container",))


def test_framework_is_the_locks_not_the_payloads():
    """A TensorFlow document judged against a JAX lock fails on the JAX pins."""
    from tests.unit.lockfixtures import make_jax_image

    status, reasons = decide(gpu_doc(), expected(make_jax_image()), gpu_requested=True)
    assert status == "failed" and "jax: the lock expects 0.12.0.1 but the image has none" in reasons
