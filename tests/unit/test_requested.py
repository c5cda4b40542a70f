"""The spec's pip: packages after the lock (``LockedImage.requested``): what the expect document and the pin
labels carry for every framework (envkit/frameworks.py), how the expect file's ``requested`` is checked
(the payload's ``expect_problems``, and the harness before it writes or mounts one), and the host's
verdict on the payload's ``requested_imports`` report (certify/certificate.py ``decide``).

As in test_certificate.py, payload documents are made up; the outcome is always ``decide``'s. The
payload's check itself runs in test_payload_imports.py.
"""

from __future__ import annotations

import pytest

from envkit import frameworks
from envkit.payload import contents
from envkit.certify.verdict import decide
from envkit.errors import VerificationError
from envkit.lock import Package
from envkit.render.files import context_for, render_files
from tests.unit.lockfixtures import make_image, make_jax_image, make_lock, make_tf_image
from tests.unit.payload_modules import payload_module
from tests.unit.certify.test_certificate import EXPECT, check, cpu_doc, set_check
from envkit.frameworks import expected

core = payload_module("envkit_check_core")
EXTRAS = (("transformers", "4.46.3"), ("torchaudio", "2.5.1+cu124"), ("accelerate", "1.1.1"))
REQUESTED = {"transformers": "4.46.3", "torchaudio": "2.5.1+cu124", "accelerate": "1.1.1"}


def with_requested(image, names=("transformers", "torchaudio", "accelerate")):
    extra = tuple(Package(name=n, version=v, hashes=("sha256:" + "d" * 64,), group="extra") for n, v in EXTRAS)
    return image.model_copy(update={"packages": image.packages + extra, "requested": names})


# ------------------------------------------------------------------ the expect document
@pytest.mark.parametrize("make", [make_image, make_jax_image, make_tf_image], ids=["torch", "jax", "tf"])
def test_every_frameworks_expect_carries_the_requested_packages_with_their_pins(make):
    plain = make()
    expect = expected(with_requested(plain))
    assert expect == {**expected(plain), "requested": REQUESTED}
    assert "requested" not in expected(plain)  # a spec without pip: packages: the expect file as before


def test_a_requested_name_is_canonical_and_a_package_the_lock_lacks_has_no_version():
    image = with_requested(make_image(), names=("Torch_Audio.Extra", "transformers"))
    assert expected(image)["requested"] == {"torch-audio-extra": None, "transformers": "4.46.3"}


@pytest.mark.parametrize("make", [make_image, make_jax_image, make_tf_image], ids=["torch", "jax", "tf"])
def test_the_pin_label_says_what_the_lock_says(make):
    """`envkit verify IMAGE` without the lock reads the labels: the same requested packages and pins."""
    image = with_requested(make())
    labels = dict(context_for(make_lock(image), image, "team.yaml").labels)
    assert labels["io.envkit.requested"] == "transformers==4.46.3 torchaudio==2.5.1+cu124 accelerate==1.1.1"
    assert frameworks.expect_from_labels(labels) == expected(image)
    assert "io.envkit.requested" not in dict(context_for(make_lock(make()), make(), "team.yaml").labels)


def test_the_rendered_expect_file_holds_them():
    import json
    image = with_requested(make_image())
    files = render_files(make_lock(image), image, "team.yaml")
    assert json.loads(files["envkit/expect.json"])["requested"] == REQUESTED
    label = b'io.envkit.requested="transformers==4.46.3 torchaudio==2.5.1+cu124 accelerate==1.1.1"'
    assert label in files["Dockerfile"]


# --------------------------------------------------------------- the expect file's rules
@pytest.mark.parametrize("value, named", [
    (["torchaudio"], 'requested ["torchaudio"]: must be an object of distributions and versions'),
    (None, "requested null: must be an object"),
    ({"Torch_Audio": "2.5.1"}, "'Torch_Audio' not a canonical name with a version or null"),
    ({"torchaudio": 2.5}, "'torchaudio' not a canonical name"),
    ({"torchaudio": ""}, "'torchaudio' not a canonical name"),
])
def test_the_payload_refuses_a_malformed_requested(value, named):
    problems = core.expect_problems({"requested": value})
    assert any(named in p for p in problems), problems


def test_the_payload_takes_every_requested_envkit_writes():
    for make in (make_image, make_jax_image, make_tf_image):
        assert core.expect_problems(contents.payload_expect(expected(with_requested(make())))) == []
    assert core.expect_problems({"requested": {"torchaudio": None, "a-b-c9": "1.0rc1+local"}}) == []


def test_the_harness_names_what_the_payload_would_refuse_before_running_it():
    """A pin label made by hand (or damaged) would make the payload exit 2 with no report: named here instead."""
    labels = {"io.envkit.framework": "torch==2.5.1", "io.envkit.requested": "Torch_Audio==2.5.1"}
    with pytest.raises(VerificationError, match="'Torch_Audio' not a canonical name"):
        contents.payload_expect(frameworks.expect_from_labels(labels))


# ------------------------------------------------------------------ the host's verdict
def entry(name, status="ok", version=None, error=None, **more):
    return {"name": name, "version": version or REQUESTED.get(name), "expected": REQUESTED.get(name),
            "modules": [name], "imported": [name] if status != "failed" else [], "status": status, "error": error,
            "extension": None, "seconds": 0.5, **more}


def doc_with(entries, status="passed", message="ok"):
    doc = cpu_doc()
    doc["checks"].insert(7, check("requested_imports", status, message, value=entries, expected=REQUESTED))
    return doc


EXPECT_R = {**EXPECT, "requested": REQUESTED}
ALL_OK = [entry("transformers"), entry("torchaudio", extension={"loaded": True, "cuda": "12.4"}), entry("accelerate")]


def test_every_requested_package_importing_verifies():
    assert decide(doc_with(ALL_OK), EXPECT_R, gpu_requested=False) == ("verified", ())
    bare = [*ALL_OK[:2], entry("accelerate", status="no_modules")]  # nothing to import is not a failure
    assert decide(doc_with(bare), EXPECT_R, gpu_requested=False) == ("verified", ())


def test_a_failed_import_fails_with_the_package_and_its_error():
    error = ("torchaudio's compiled extension: RuntimeError: torchaudio's extension was built for CUDA 12.1 "
             "but torch has CUDA 12.4")
    entries = [ALL_OK[0], entry("torchaudio", "failed", error=error), ALL_OK[2]]
    status, reasons = decide(doc_with(entries, "failed", "1 of 3 requested packages failed: ..."), EXPECT_R,
                             gpu_requested=False)
    assert (status, reasons) == ("failed", (f"requested package torchaudio 2.5.1+cu124 failed: {error}",))


def test_the_payloads_word_is_not_taken():
    """A report that says passed over a failed package, another version, or a package it left out still fails."""
    lying = [ALL_OK[0], entry("torchaudio", "failed", error="import torchaudio: OSError: undefined symbol"), ALL_OK[2]]
    assert decide(doc_with(lying), EXPECT_R, gpu_requested=False) == (
        "failed", ("requested package torchaudio 2.5.1+cu124 failed: import torchaudio: OSError: undefined symbol",))
    other = [ALL_OK[0], entry("torchaudio", version="2.5.1"), ALL_OK[2]]  # the cu124 local tag counts
    assert decide(doc_with(other), EXPECT_R, gpu_requested=False) == (
        "failed", ("requested package torchaudio: the lock expects 2.5.1+cu124 but the image has 2.5.1",))
    status, reasons = decide(doc_with(ALL_OK[:2]), EXPECT_R, gpu_requested=False)
    assert status == "failed" and reasons[0].startswith("requested package accelerate: the payload reported nothing")
    odd = [*ALL_OK[:2], entry("accelerate", status="fine")]
    assert decide(doc_with(odd), EXPECT_R, gpu_requested=False) == (
        "failed", ("requested package accelerate 1.1.1 has unknown status 'fine'",))


def test_a_run_without_the_check_or_with_it_skipped_fails_when_the_lock_requests_packages():
    status, reasons = decide(cpu_doc(), EXPECT_R, gpu_requested=False)
    assert status == "failed" and reasons == (
        "the payload did not check the requested packages (transformers, torchaudio, accelerate): "
        "no requested_imports check",)
    skipped = doc_with(None, "skipped", "lock gives no requested packages (the spec's pip: packages)")
    status, reasons = decide(skipped, EXPECT_R, gpu_requested=False)
    assert status == "failed" and len(reasons) == 3 and "requested_imports skipped" in reasons[0]


def test_without_requested_packages_a_skipped_check_is_fine_and_a_failed_one_still_fails():
    skipped = doc_with(None, "skipped", "lock gives no requested packages (the spec's pip: packages)")
    assert decide(skipped, EXPECT, gpu_requested=False) == ("verified", ())
    failed = set_check(doc_with(ALL_OK), "requested_imports", "failed", "something broke")
    assert decide(failed, EXPECT, gpu_requested=False) == (
        "failed", ("check requested_imports failed: something broke",))


def test_the_check_name_is_the_payloads_in_every_framework():
    runner = payload_module("envkit_check_main")
    for name in runner.FRAMEWORKS:
        registry = {n: gpu_only for n, _, gpu_only in runner.framework_module(name).REGISTRY}
        assert registry[frameworks.REQUESTED_CHECK] is False, name  # runs in verify mode too
