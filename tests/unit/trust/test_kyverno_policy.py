"""docs/kyverno-policy.yaml against what envkit writes: the predicate type, every JMESPath key its conditions read,
evaluated on the predicate envkit signs (``certificate_predicate``), the team's key where Kyverno reads it, and the
policy's field names against Kyverno's API.

Kyverno's field names: the kyverno.io/v1 types (``api/kyverno/v1/image_verification_types.go``: ImageVerification,
AttestorSet, Attestor, StaticKeyAttestor, Rekor, CTLog, Attestation; ``AnyAllConditions``/``Condition`` for
conditions) and kyverno.io's "Verify Images Rules" / "Sigstore" pages. Not validated against the ClusterPolicy CRD's
OpenAPI schema (not available offline here)."""

from __future__ import annotations

import re
from pathlib import Path

import jmespath
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from envkit.certify.certificate import Certificate
from envkit.certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE, POLICY_FIELDS, certificate_predicate
from envkit.trust.keys import generate_keys

POLICY = Path(__file__).resolve().parents[3] / "docs" / "kyverno-policy.yaml"
PLACEHOLDER = "REPLACE-WITH-THE-TEAM-envkit.pub"
# The keys each object of the policy may hold, from Kyverno's kyverno.io/v1 types (see the module's docstring)
KYVERNO_FIELDS = {
    "verifyImages[]": {"failureAction", "type", "image", "imageReferences", "skipImageReferences", "key", "roots",
                       "subject", "issuer", "additionalExtensions", "attestors", "attestations", "annotations",
                       "repository", "cosignOCI11", "mutateDigest", "verifyDigest", "validate", "required",
                       "imageRegistryCredentials", "useCache"},
    "attestors[]": {"count", "entries"},
    "entries[]": {"keys", "certificates", "keyless", "attestor", "annotations", "repository", "signatureAlgorithm"},
    "keys": {"publicKeys", "signatureAlgorithm", "kms", "secret", "rekor", "ctlog"},
    "rekor": {"url", "pubkey", "ignoreTlog"},
    "ctlog": {"ignoreSCT", "pubkey", "tsaCertChain"},
    "attestations[]": {"name", "predicateType", "type", "attestors", "conditions"},
    "conditions[]": {"any", "all"},
    "condition": {"key", "operator", "value", "message"},
}
OPERATORS = {"Equals": lambda got, want: got == want, "AnyIn": lambda got, want: got in want}


def certificate(**changes) -> Certificate:
    fields = dict(image="registry.example.org/vision/torch25:2.5.1", image_id="sha256:" + "e" * 64,
                  lock_hash="sha256:" + "1" * 64, gpu_model="NVIDIA H200", driver="570.124.06", status="certified",
                  payload_version="1", payload_sha256="a" * 64, envkit_version="0.1.0",
                  created_at="2026-12-07T00:00:00Z")
    fields.update(changes)
    return Certificate(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def policy() -> dict:
    return yaml.safe_load(POLICY.read_text())


def verify_images(policy: dict) -> dict:
    (rule,) = policy["spec"]["rules"]
    (verify,) = rule["verifyImages"]
    return verify


def conditions(policy: dict) -> list[dict]:
    (attestation,) = verify_images(policy)["attestations"]
    return [c for block in attestation["conditions"] for c in block["all"]]


def admits(policy: dict, predicate: dict) -> bool:
    """Every condition of the policy's attestation, as Kyverno evaluates it: the key's JMESPath on the predicate."""
    for condition in conditions(policy):
        expression = re.fullmatch(r"\{\{\s*(.+?)\s*\}\}", condition["key"])
        assert expression, condition["key"]
        if not OPERATORS[condition["operator"]](jmespath.search(expression.group(1), predicate), condition["value"]):
            return False
    return True


def test_the_policy_is_a_cluster_policy_verifying_images(policy):
    assert (policy["apiVersion"], policy["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    (rule,) = policy["spec"]["rules"]
    assert rule["match"]["any"][0]["resources"]["kinds"] == ["Pod"]
    verify = verify_images(policy)
    assert verify["type"] == "Cosign" and verify["mutateDigest"] and verify["verifyDigest"] and verify["required"]
    assert verify["failureAction"] == "Enforce"


def test_the_attestation_is_the_certificate_predicate_type(policy):
    (attestation,) = verify_images(policy)["attestations"]
    assert attestation["type"] == CERTIFICATE_PREDICATE_TYPE == "https://envkit.dev/certificate/v1"


def test_every_condition_key_is_a_top_level_field_of_the_predicate(policy):
    predicate = certificate_predicate(certificate())
    keys = [re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", c["key"]) for c in conditions(policy)]
    assert all(keys), [c["key"] for c in conditions(policy)]
    names = {k.group(1) for k in keys if k}
    assert names == {"status", "gpu_model"} and names <= set(POLICY_FIELDS)
    assert set(POLICY_FIELDS) <= set(predicate)
    assert {c["operator"] for c in conditions(policy)} <= set(OPERATORS)


def test_the_conditions_admit_a_certified_model_and_nothing_else(policy):
    assert admits(policy, certificate_predicate(certificate()))
    assert admits(policy, certificate_predicate(certificate(gpu_model="NVIDIA H100 80GB HBM3")))
    assert not admits(policy, certificate_predicate(certificate(status="failed", reasons=("arch not covered",))))
    assert not admits(policy, certificate_predicate(certificate(status="verified", gpu_model="none", driver="none")))
    assert not admits(policy, certificate_predicate(certificate(gpu_model="NVIDIA A100-SXM4-80GB")))


def _team_key_in(policy_text: str, pem: str) -> dict:
    """The policy with ``pem`` in place of the placeholder, as the docs say to do before applying it."""
    lines = []
    for line in policy_text.splitlines():
        if line.strip() == PLACEHOLDER:
            indent = line[:len(line) - len(line.lstrip())]
            body = [b for b in pem.strip().splitlines() if not b.startswith("-----")]
            lines.extend(indent + b for b in body)
        else:
            lines.append(line)
    return yaml.safe_load("\n".join(lines))


def test_both_attestors_take_the_teams_cosign_compatible_public_key(tmp_path):
    generate_keys(tmp_path)
    pem = (tmp_path / "envkit.pub").read_text()
    filled = _team_key_in(POLICY.read_text(), pem)
    verify = verify_images(filled)
    (attestation,) = verify["attestations"]
    for attestors in (verify["attestors"], attestation["attestors"]):
        (entry,) = attestors[0]["entries"]
        assert attestors[0]["count"] == 1
        key = serialization.load_pem_public_key(entry["keys"]["publicKeys"].encode())
        assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
        assert key.public_numbers() == serialization.load_pem_public_key(pem.encode()).public_numbers()
        # keys made by envkit are not in Sigstore's public log: Kyverno must not look for them there
        assert entry["keys"]["rekor"] == {"ignoreTlog": True} and entry["keys"]["ctlog"] == {"ignoreSCT": True}


def test_every_field_is_one_kyvernos_api_has(policy):
    def check(obj: dict, kind: str) -> None:
        unknown = set(obj) - KYVERNO_FIELDS[kind]
        assert not unknown, f"{kind}: {unknown}"

    verify = verify_images(policy)
    check(verify, "verifyImages[]")
    for attestors in (verify["attestors"], *(a["attestors"] for a in verify["attestations"])):
        for attestor in attestors:
            check(attestor, "attestors[]")
            for entry in attestor["entries"]:
                check(entry, "entries[]")
                check(entry["keys"], "keys")
                check(entry["keys"]["rekor"], "rekor")
                check(entry["keys"]["ctlog"], "ctlog")
    for attestation in verify["attestations"]:
        check(attestation, "attestations[]")
        for block in attestation["conditions"]:
            check(block, "conditions[]")
            for condition in block.get("all", []) + block.get("any", []):
                check(condition, "condition")
