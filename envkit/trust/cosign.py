"""Image signatures in cosign's format (sigstore/cosign ``specs/SIGNATURE_SPEC.md``): a simple-signing payload
naming the image's manifest digest, signed with ECDSA P-256 over the SHA-256 of the payload's bytes (an ASN.1 DER
signature, base64 in the layer annotation ``dev.cosignproject.cosign/signature``). The registry layout (the
``sha256-<hex>.sig`` manifest) is ``registry/signatures.py``'s."""

from __future__ import annotations

import base64
import binascii
import json

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import TrustError
from .keys import GET_KEY_HINT, SigningKey, TrustedKeys

SIMPLE_SIGNING_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN_SIGNATURE_TYPE = "cosign container image signature"


def simple_signing_payload(docker_reference: str, manifest_digest: str, optional: dict | None = None) -> bytes:
    """The payload cosign signs for ``docker_reference`` (the repository) at ``manifest_digest``."""
    doc = {"critical": {"identity": {"docker-reference": docker_reference},
                        "image": {"docker-manifest-digest": manifest_digest},
                        "type": COSIGN_SIGNATURE_TYPE},
           "optional": optional}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def sign_payload(payload: bytes, key: SigningKey) -> str:
    """The base64 DER ECDSA-P256/SHA-256 signature of ``payload``."""
    return base64.b64encode(key.private.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()


def verify_signature(payload: bytes, signature: str, trusted: TrustedKeys, manifest_digest: str) -> tuple[dict, str]:
    """The payload's document and the fingerprint of the trusted key that signed it, when ``signature`` verifies
    with one of ``trusted`` and the payload names ``manifest_digest``; else a ``TrustError`` saying why."""
    if not signature:
        raise TrustError("the signature layer carries no signature", reason="unsigned")
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        raise TrustError("the signature is not base64", reason="truncated/malformed signature") from None
    if not trusted:
        raise TrustError("no trusted key is configured", reason="no trusted key configured", hint=GET_KEY_HINT)
    signer = next((fp for fp, key in trusted.keys.items() if _verifies(key, raw, payload)), None)
    if signer is None:
        raise TrustError(f"no trusted key ({', '.join(sorted(k[:12] for k in trusted.keys))}) verifies the signature",
                         reason="signed by unknown key (or altered after signing)", hint=GET_KEY_HINT)
    try:
        doc = json.loads(payload)
        critical = doc["critical"]
        named, kind = critical["image"]["docker-manifest-digest"], critical["type"]
    except (ValueError, KeyError, TypeError):
        raise TrustError("the signed payload is no simple-signing document", reason="malformed payload") from None
    if kind != COSIGN_SIGNATURE_TYPE:
        raise TrustError(f"the signed payload's type is {kind!r}", reason="malformed payload")
    if named != manifest_digest:
        raise TrustError(f"the signature is for another image {named}", reason=f"for another image {named}")
    return doc, signer


def _verifies(key: ec.EllipticCurvePublicKey, signature: bytes, payload: bytes) -> bool:
    try:
        key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True
