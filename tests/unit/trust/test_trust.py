"""Keys, cosign signatures and DSSE attestations (envkit/trust/), each checked by the spec-based verifier in
tests/speccheck.py (which shares no code with envkit's signing) and refused with its reason when tampered with."""

from __future__ import annotations

import base64
import json
import stat

import pytest
from securesystemslib.exceptions import VerificationError as SslibVerificationError

from envkit.certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE
from envkit.errors import TrustError
from envkit.trust import attest as att
from envkit.trust import cosign, dsse, keys
from tests import speccheck

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


@pytest.fixture
def pair(tmp_path, monkeypatch):
    monkeypatch.delenv(keys.PASSWORD_ENV, raising=False)
    monkeypatch.delenv(keys.TRUSTED_KEYS_ENV, raising=False)
    monkeypatch.delenv(keys.SIGNING_KEY_ENV, raising=False)
    made = keys.generate_keys(tmp_path / "k")
    return keys.load_signing_key(made["private_key"]), keys.load_trusted_keys(made["public_key"]), made


def test_generate_writes_private_0600_and_public_spki(pair, tmp_path):
    signing, trusted, made = pair
    assert stat.S_IMODE((tmp_path / "k" / "envkit.key").stat().st_mode) == 0o600
    pub = (tmp_path / "k" / "envkit.pub").read_bytes()
    assert pub.startswith(b"-----BEGIN PUBLIC KEY-----")
    assert made["fingerprint"] == signing.fingerprint == speccheck.spki_sha256(pub)
    assert list(trusted.keys) == [signing.fingerprint]
    assert "PRIVATE" not in repr(signing) and "private" not in repr(signing).split("(", 1)[1].split(",")[0]
    with pytest.raises(TrustError, match="does not overwrite"):
        keys.generate_keys(tmp_path / "k")


def test_encrypted_key_needs_its_password(tmp_path, monkeypatch):
    monkeypatch.setenv(keys.PASSWORD_ENV, "s3cret")
    made = keys.generate_keys(tmp_path)
    assert b"ENCRYPTED PRIVATE KEY" in (tmp_path / "envkit.key").read_bytes()
    assert keys.load_signing_key(made["private_key"]).fingerprint == made["fingerprint"]
    monkeypatch.delenv(keys.PASSWORD_ENV)
    with pytest.raises(TrustError, match="ENVKIT_KEY_PASSWORD"):
        keys.load_signing_key(made["private_key"])


def test_keys_from_environment_and_directories(pair, tmp_path, monkeypatch):
    signing, _, made = pair
    second = keys.generate_keys(tmp_path / "k2")
    monkeypatch.setenv(keys.SIGNING_KEY_ENV, made["private_key"])
    assert keys.load_signing_key(None).fingerprint == signing.fingerprint
    monkeypatch.setenv(keys.TRUSTED_KEYS_ENV, f"{tmp_path / 'k'},{second['public_key']}")
    assert set(keys.load_trusted_keys(None).keys) == {made["fingerprint"], second["fingerprint"]}
    assert keys.load_trusted_keys("").keys.keys() == {made["fingerprint"], second["fingerprint"]}
    monkeypatch.delenv(keys.TRUSTED_KEYS_ENV)
    assert not keys.load_trusted_keys(None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TrustError, match="no .pub file"):
        keys.load_trusted_keys(str(tmp_path / "empty"))
    with pytest.raises(TrustError, match="not a PEM public key"):
        keys.load_trusted_keys(made["private_key"])
    assert keys.describe_key(tmp_path / "k" / "envkit.key")["fingerprint"] == made["fingerprint"]


def test_cosign_signature_verifies_by_the_spec_and_by_envkit(pair):
    signing, trusted, made = pair
    payload = cosign.simple_signing_payload("127.0.0.1:5000/vision/torch25", DIGEST)
    sig = cosign.sign_payload(payload, signing)
    layer = {"mediaType": cosign.SIMPLE_SIGNING_TYPE, "digest": "sha256:" + __import__("hashlib").sha256(
        payload).hexdigest(), "size": len(payload), "annotations": {cosign.SIGNATURE_ANNOTATION: sig}}
    pub = open(made["public_key"], "rb").read()
    speccheck.check_signature_layer({"schemaVersion": 2}, payload, layer, pub, DIGEST)
    doc, signer = cosign.verify_signature(payload, sig, trusted, DIGEST)
    assert signer == signing.fingerprint and doc["critical"]["image"]["docker-manifest-digest"] == DIGEST
    with pytest.raises(TrustError) as exc:
        cosign.verify_signature(payload, sig, trusted, OTHER)
    assert exc.value.reason == f"for another image {DIGEST}"
    with pytest.raises(TrustError) as exc:
        cosign.verify_signature(payload.replace(b"vision", b"vizion"), sig, trusted, DIGEST)
    assert "signed by unknown key" in exc.value.reason
    with pytest.raises(TrustError, match="no trusted key"):
        cosign.verify_signature(payload, sig, keys.TrustedKeys(), DIGEST)


def test_attestation_verifies_by_the_spec_securesystemslib_and_envkit(pair):
    signing, trusted, made = pair
    envelope = att.attest(CERTIFICATE_PREDICATE_TYPE, {"status": "certified"}, "reg/vision/torch25", DIGEST, signing)
    pub = open(made["public_key"], "rb").read()
    statement = speccheck.check_envelope(envelope, pub, DIGEST)
    assert statement["predicateType"] == CERTIFICATE_PREDICATE_TYPE
    verified = att.verify_attestation(envelope, trusted, DIGEST)
    assert verified.signed_by == signing.fingerprint and verified.predicate == {"status": "certified"}


def _reason(envelope: bytes, trusted: keys.TrustedKeys, digest: str = DIGEST) -> str:
    with pytest.raises(TrustError) as exc:
        att.verify_attestation(envelope, trusted, digest)
    return exc.value.reason


def test_tampered_attestations_are_refused_with_their_reason(pair, tmp_path):
    signing, trusted, made = pair
    envelope = att.attest(CERTIFICATE_PREDICATE_TYPE, {"status": "failed"}, "r", DIGEST, signing)
    doc = json.loads(envelope)
    statement = json.loads(base64.b64decode(doc["payload"]))
    statement["predicate"]["status"] = "certified"
    altered = json.dumps({**doc, "payload": base64.b64encode(json.dumps(statement).encode()).decode()}).encode()
    assert _reason(altered, trusted) == "altered after signing"
    with pytest.raises(SslibVerificationError):  # the library's own DSSE check agrees
        speccheck.sslib_verify(altered, open(made["public_key"], "rb").read())
    assert _reason(envelope, trusted, OTHER) == f"for another image {DIGEST}"
    assert _reason(json.dumps({**doc, "signatures": []}).encode(), trusted) == "unsigned"
    assert _reason(envelope[: len(envelope) // 2], trusted) == "truncated/malformed envelope"
    assert _reason(envelope, keys.TrustedKeys()) == "no trusted key configured"
    other = keys.generate_keys(tmp_path / "other")
    mallory = keys.load_signing_key(other["private_key"])
    forged = att.attest(CERTIFICATE_PREDICATE_TYPE, {"status": "certified"}, "r", DIGEST, mallory)
    assert _reason(forged, trusted) == f"signed by unknown key {mallory.fingerprint}"
    assert _reason(envelope, keys.load_trusted_keys(other["public_key"])) == f"signed by unknown key {signing.fingerprint}"
    assert att.verify_attestation(forged, keys.load_trusted_keys(f"{made['public_key']},{other['public_key']}"),
                                  DIGEST).signed_by == mallory.fingerprint  # rotation: both keys trusted


def test_pae_is_the_spec_s():
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert dsse.pae("t", b"") == speccheck.pae(b"t", b"")


def test_statement_needs_a_sha256_digest(pair):
    with pytest.raises(TrustError, match="not a sha256"):
        att.attest("x", {}, "r", "latest", pair[0])
