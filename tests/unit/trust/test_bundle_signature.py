"""An offline bundle's signature (envkit/trust/bundle.py) over real bundle directories that ``make_bundle`` writes
(its network and engine parts replaced by small files, as in test_bundle_frameworks), with real keys: the genuine
bundle verifies (also by the spec-based verifier in tests/speccheck.py, which shares no code with envkit's signing);
unsigned, signed by an untrusted key, a manifest or a file altered after signing, an altered envelope and an
envelope taken from another bundle are each refused with their reason."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from envkit import __version__
from envkit.errors import BuildError, TrustError
from envkit.images.bundle import make_bundle
from envkit.images.bundle_manifest import MANIFEST, SIGNATURE, bundle_attestations, verify_bundle
from envkit.trust import keys
from envkit.trust.bundle import NOT_CHECKED, bundle_sealer, check_bundle_signature
from envkit.trust.sbom import SBOM_PREDICATE_TYPE
from tests import speccheck
from tests.unit.images import test_bundle_frameworks
from tests.unit.lockfixtures import make_jax_image, make_lock, make_tf_image

offline_parts = test_bundle_frameworks.offline_parts  # the fixture: make_bundle without network or engine


@pytest.fixture
def team(tmp_path, monkeypatch):
    for name in (keys.PASSWORD_ENV, keys.TRUSTED_KEYS_ENV, keys.SIGNING_KEY_ENV):
        monkeypatch.delenv(name, raising=False)
    made = keys.generate_keys(tmp_path / "team")
    return keys.load_signing_key(made["private_key"]), keys.load_trusted_keys(made["public_key"]), made


def make(tmp_path, name, key, image=None, attestations=None):
    image = image or make_jax_image()
    return make_bundle(object(), make_lock(image), image.name, tmp_path / name, ca_bundle=None,
                       attestations=attestations, seal=bundle_sealer(key, image) if key else None)


def reason(bundle, trusted) -> str:
    with pytest.raises(TrustError) as caught:
        check_bundle_signature(bundle, trusted)
    assert caught.value.exit_code == 8
    return caught.value.reason


def test_a_signed_bundle_verifies_by_envkit_and_by_the_spec(offline_parts, tmp_path, team):
    key, trusted, made = team
    image = make_jax_image()
    bundle = make(tmp_path, "b", key, image)
    manifest = (bundle / MANIFEST).read_bytes()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    checked = check_bundle_signature(bundle, trusted)
    assert checked == {"checked": True, "signed_by": key.fingerprint, "manifest": digest}
    statement = speccheck.check_envelope((bundle / SIGNATURE).read_bytes(), open(made["public_key"], "rb").read(),
                                         digest)
    assert statement["subject"] == [{"name": "manifest.json", "digest": {"sha256": digest.split(":")[1]}}]
    assert statement["predicateType"] == SBOM_PREDICATE_TYPE
    meta = statement["predicate"]["metadata"]
    facts = {p["name"]: p["value"] for p in meta["properties"]}
    assert facts["envkit:lock_hash"] == image.hash == json.loads(manifest)["lock_hash"]
    assert facts["envkit:image"] == image.name and facts["envkit:envkit_version"] == __version__
    assert meta["component"]["name"] == json.loads(manifest)["tag"] and meta["timestamp"]
    assert {c["name"] for c in statement["predicate"]["components"]} == {p.name for p in image.packages}
    # the manifest still checks every file (the signature is the one file it does not list), and the signature is
    # not one of the image's carried documents
    assert SIGNATURE not in verify_bundle(bundle)["files"] and bundle_attestations(bundle) == {}


def test_the_manifest_hashes_every_file_but_itself_and_the_signature(offline_parts, tmp_path, team):
    bundle = make(tmp_path, "b", team[0])
    listed = set(json.loads((bundle / MANIFEST).read_text())["files"])
    on_disk = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()}
    assert on_disk - listed == {MANIFEST, SIGNATURE} and listed <= on_disk


def test_an_unsigned_bundle_is_refused_where_keys_are_trusted(offline_parts, tmp_path, team):
    bundle = make(tmp_path, "b", None)
    assert not (bundle / SIGNATURE).exists()
    assert reason(bundle, team[1]) == "unsigned"


def test_no_trusted_key_checks_nothing_and_says_so(offline_parts, tmp_path, team):
    signed, unsigned = make(tmp_path, "s", team[0]), make(tmp_path, "u", None)
    assert check_bundle_signature(signed, keys.TrustedKeys()) == {"checked": False, "why": NOT_CHECKED,
                                                                   "signed": True}
    assert check_bundle_signature(unsigned, keys.TrustedKeys())["checked"] is False


def test_a_bundle_signed_by_an_untrusted_key_is_refused(offline_parts, tmp_path, team):
    other = keys.generate_keys(tmp_path / "other")
    bundle = make(tmp_path, "b", keys.load_signing_key(other["private_key"]))
    assert reason(bundle, team[1]) == f"signed by unknown key {other['fingerprint']}"
    # trusting both keys (a rotation) accepts it
    both = keys.load_trusted_keys(f"{team[2]['public_key']},{other['public_key']}")
    assert check_bundle_signature(bundle, both)["signed_by"] == other["fingerprint"]


def test_a_manifest_altered_after_signing_is_refused(offline_parts, tmp_path, team):
    bundle = make(tmp_path, "b", team[0])
    signed = "sha256:" + hashlib.sha256((bundle / MANIFEST).read_bytes()).hexdigest()
    doc = json.loads((bundle / MANIFEST).read_text())
    doc["base"]["id"] = "sha256:" + "e" * 64  # another base, the files unchanged: verify_bundle alone passes it
    (bundle / MANIFEST).write_text(json.dumps(doc))
    verify_bundle(bundle)
    assert reason(bundle, team[1]) == f"for another manifest {signed}"


def test_a_file_altered_after_signing_fails_the_manifest_the_signature_binds(offline_parts, tmp_path,
                                                                             team):
    bundle = make(tmp_path, "b", team[0])
    (bundle / "envkit.lock").write_bytes((bundle / "envkit.lock").read_bytes() + b"\n")
    (bundle / "attestations" / "forged.dsse.json").write_bytes(b"{}")  # added beside the signature
    assert check_bundle_signature(bundle, team[1])["checked"] is True  # the manifest itself is the signed one
    with pytest.raises(BuildError, match="does not match its manifest") as caught:
        verify_bundle(bundle)
    assert "envkit.lock: changed" in caught.value.hint and "attestations/forged.dsse.json: not in the manifest" \
        in caught.value.hint


@pytest.mark.parametrize("part", ["payload", "sig", "truncated"])
def test_an_altered_envelope_is_refused(offline_parts, tmp_path, team, part):
    bundle = make(tmp_path, "b", team[0])
    envelope = json.loads((bundle / SIGNATURE).read_bytes())
    if part == "payload":
        statement = json.loads(base64.b64decode(envelope["payload"]))
        statement["predicate"]["metadata"]["properties"][0]["value"] = "0" * 64
        envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
        data = json.dumps(envelope).encode()
    elif part == "sig":
        sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
        sig[-1] ^= 1
        envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
        data = json.dumps(envelope).encode()
    else:
        data = (bundle / SIGNATURE).read_bytes()[:100]
    (bundle / SIGNATURE).write_bytes(data)
    expected = "truncated/malformed envelope" if part == "truncated" else "altered after signing"
    assert reason(bundle, team[1]) == expected


def test_an_envelope_swapped_from_another_bundle_is_refused(offline_parts, tmp_path, team):
    key, trusted, _ = team
    bundle, other = make(tmp_path, "jax", key), make(tmp_path, "tf", key, make_tf_image())
    other_digest = check_bundle_signature(other, trusted)["manifest"]
    (bundle / SIGNATURE).write_bytes((other / SIGNATURE).read_bytes())
    assert reason(bundle, trusted) == f"for another manifest {other_digest}"


def test_a_carried_document_cannot_take_the_signatures_name(offline_parts, tmp_path, team):
    with pytest.raises(BuildError, match="the bundle's own signature"):
        make(tmp_path, "b", None, attestations={SIGNATURE.split("/", 1)[1]: b"{}"})
    carried = make(tmp_path, "c", team[0], attestations={"sbom.dsse.json": b"{}"})
    assert bundle_attestations(carried) == {"sbom.dsse.json": b"{}"}  # hashed, the signature beside it
    assert check_bundle_signature(carried, team[1])["checked"] is True
