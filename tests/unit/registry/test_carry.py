"""What an offline bundle carries of its image's registry signatures and attestations (``registry.carry``), judged
with the site's keys: real keys, real cosign signatures and DSSE envelopes (``trust``); the registry read itself is
tested against the real registry (tests/integration/test_trust_attestations.py)."""

from __future__ import annotations

import json

import pytest

from envkit.certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE
from envkit.errors import TrustError
from envkit.images.bundle_manifest import ATTESTATIONS, MANIFEST, SIGNATURE
from envkit.registry.carry import CARRIED_NAME, check_bundle_carried, judge_carried
from envkit.trust import keys
from envkit.trust.attest import attest
from envkit.trust.cosign import sign_payload, simple_signing_payload
from envkit.trust.provenance import PROVENANCE_PREDICATE_TYPE

DIGEST = "sha256:" + "d" * 64
OTHER = "sha256:" + "e" * 64
LOCK = "sha256:" + "1" * 64
REPO = "registry.example.org/vision/torch25"
PREFIX = DIGEST.replace(":", "-")


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    made = keys.generate_keys(tmp_path_factory.mktemp("team"))
    return keys.load_signing_key(made["private_key"]), keys.load_trusted_keys(made["public_key"])


@pytest.fixture(scope="module")
def mallory(tmp_path_factory):
    return keys.load_signing_key(keys.generate_keys(tmp_path_factory.mktemp("mallory"))["private_key"])


def documents(key, *, lock=LOCK, subject=DIGEST) -> dict[str, bytes]:
    payload = simple_signing_payload(REPO, subject)
    return {f"{PREFIX}.sig.0.payload.json": payload, f"{PREFIX}.sig.0.b64": sign_payload(payload, key).encode(),
            f"{PREFIX}.att.0.dsse.json": attest(CERTIFICATE_PREDICATE_TYPE, {"status": "certified",
                                                                             "lock_hash": lock}, REPO, subject, key),
            f"{PREFIX}.att.1.dsse.json": attest(PROVENANCE_PREDICATE_TYPE, {"runDetails": {}}, REPO, subject, key)}


def test_genuine_documents_verify_for_the_digest_their_names_carry(team):
    key, trusted = team
    judged = judge_carried(documents(key), trusted, LOCK)
    assert [(j["kind"], j.get("predicate_type"), j.get("signed_by")) for j in judged] == [
        ("attestation", CERTIFICATE_PREDICATE_TYPE, key.fingerprint),
        ("attestation", PROVENANCE_PREDICATE_TYPE, key.fingerprint), ("signature", None, key.fingerprint)]
    assert all(CARRIED_NAME.fullmatch(name) for name in documents(key))


def test_what_does_not_count_is_listed_with_why(team, mallory):
    key, trusted = team
    untrusted = judge_carried(documents(mallory), trusted, LOCK)
    assert all(j["why"].startswith("signed by unknown key") and "signed_by" not in j for j in untrusted)
    another_lock = judge_carried(documents(key, lock="sha256:" + "2" * 64), trusted, LOCK)[0]
    assert another_lock["why"] == "for another lock sha256:" + "2" * 64 and "signed_by" not in another_lock
    replayed = {name: data for name, data in documents(key, subject=OTHER).items()}  # another image's, renamed
    assert {j["why"] for j in judge_carried(replayed, trusted, LOCK) if j["kind"] == "attestation"} == \
        {f"for another image {OTHER}"}


@pytest.mark.parametrize("how", ["altered", "truncated"])
def test_a_document_altered_after_signing_or_truncated_refuses_the_bundle(team, how):
    key, trusted = team
    docs = documents(key)
    name = f"{PREFIX}.att.0.dsse.json"
    envelope = json.loads(docs[name])
    if how == "altered":
        envelope["payload"] = envelope["payload"][:-8] + "AAAAAAA="
        docs[name] = json.dumps(envelope).encode()
    else:
        docs[name] = docs[name][: len(docs[name]) // 2]
    with pytest.raises(TrustError) as err:
        judge_carried(docs, trusted, LOCK)
    assert err.value.exit_code == 8 and name in err.value.message


def test_the_bundle_check_reads_attestations_beside_the_bundles_own_signature(team, tmp_path):
    key, trusted = team
    (tmp_path / ATTESTATIONS).mkdir()
    for name, data in documents(key).items():
        (tmp_path / ATTESTATIONS / name).write_bytes(data)
    (tmp_path / SIGNATURE).write_bytes(b"{}")  # the bundle's own: not one of the image's documents
    (tmp_path / MANIFEST).write_text(json.dumps({"lock_hash": LOCK}))
    checked = check_bundle_carried(tmp_path, trusted)
    assert checked["checked"] and len(checked["documents"]) == 3
    assert all(d.get("signed_by") == key.fingerprint for d in checked["documents"])
    unchecked = check_bundle_carried(tmp_path, keys.TrustedKeys({}))
    assert unchecked == {"checked": False, "documents": [{"file": n} for n in sorted(documents(key))]}
