"""in-toto attestations (Statement v1, github.com/in-toto/attestation spec/v1) in DSSE envelopes: what envkit
says about an image (its certificate, SBOM, provenance: any predicate dict), bound to the image's manifest digest
and signed. ``attest`` makes one; ``verify_attestation`` returns its statement or says why it does not count."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import TrustError
from .dsse import MALFORMED, sign_envelope, verify_envelope
from .keys import SigningKey, TrustedKeys

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# The predicate types are owned by the modules that build each predicate: certify.certificate_predicate
# (CERTIFICATE_PREDICATE_TYPE), trust.sbom (SBOM_PREDICATE_TYPE), trust.provenance (PROVENANCE_PREDICATE_TYPE).


def statement(predicate_type: str, predicate: dict, subject_name: str, subject_digest: str) -> dict:
    algorithm, _, value = subject_digest.partition(":")
    if algorithm != "sha256" or len(value) != 64:
        raise TrustError(f"{subject_digest!r} is not a sha256 manifest digest", reason="bad subject",
                         hint="attest an image by its manifest digest (sha256:<64 hex>)")
    return {"_type": STATEMENT_TYPE, "subject": [{"name": subject_name, "digest": {"sha256": value}}],
            "predicateType": predicate_type, "predicate": predicate}


def attest(statement_predicate_type: str, predicate: dict, subject_name: str, subject_digest: str,
           key: SigningKey) -> bytes:
    """A DSSE envelope (bytes) holding the signed in-toto Statement of ``predicate`` about ``subject_digest``."""
    doc = statement(statement_predicate_type, predicate, subject_name, subject_digest)
    return sign_envelope(PAYLOAD_TYPE, json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(), key)


@dataclass(frozen=True)
class Verified:
    statement: dict
    signed_by: str  # the trusted key's fingerprint

    @property
    def predicate_type(self) -> str:
        return str(self.statement["predicateType"])

    @property
    def predicate(self) -> dict:
        return dict(self.statement["predicate"])


def verify_attestation(envelope: bytes, trusted: TrustedKeys, subject_digest: str) -> Verified:
    """The statement when ``envelope`` verifies with a trusted key and its subject is ``subject_digest``; else a
    ``TrustError`` whose ``reason`` says why it does not count."""
    opened, signer = verify_envelope(envelope, trusted)
    if opened.payload_type != PAYLOAD_TYPE:
        raise TrustError(f"the envelope holds {opened.payload_type!r}, not an in-toto statement", reason=MALFORMED)
    try:
        doc = json.loads(opened.payload)
        if doc["_type"] != STATEMENT_TYPE or not isinstance(doc["predicate"], dict):
            raise TypeError(doc["_type"])
        digests = [f"sha256:{s['digest']['sha256']}" for s in doc["subject"]]
        str(doc["predicateType"])
    except (ValueError, KeyError, TypeError):
        raise TrustError("the signed payload is not an in-toto Statement v1", reason=MALFORMED) from None
    if subject_digest not in digests:
        other = digests[0] if digests else "(none)"
        raise TrustError(f"the attestation is for another image {other}", reason=f"for another image {other}")
    return Verified(doc, signer)
