"""DSSE envelopes (github.com/secure-systems-lab/dsse, protocol.md and envelope.md): the signature is ECDSA P-256
/ SHA-256 (``cryptography``) over PAE(payloadType, payload) =
``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``; the envelope is
``{"payloadType", "payload": base64, "signatures": [{"keyid", "sig": base64}]}``. envkit's keyid is the key's
fingerprint (``keys.fingerprint``)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import TrustError
from .keys import GET_KEY_HINT, SigningKey, TrustedKeys

MALFORMED = "truncated/malformed envelope"
ALTERED = "altered after signing"
TAMPERED = (ALTERED, MALFORMED)  # the reasons that refuse an image outright (the gate, a bundle's carried documents)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign_envelope(payload_type: str, payload: bytes, key: SigningKey) -> bytes:
    sig = key.private.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    doc = {"payloadType": payload_type, "payload": base64.b64encode(payload).decode(),
           "signatures": [{"keyid": key.fingerprint, "sig": base64.b64encode(sig).decode()}]}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str, bytes], ...]  # (keyid, signature)


def open_envelope(data: bytes) -> Envelope:
    """The envelope's parts, unverified; a ``TrustError`` (truncated/malformed envelope) when it is not one."""
    try:
        doc = json.loads(data)
        payload = base64.b64decode(doc["payload"], validate=True)
        sigs = tuple((str(s.get("keyid") or ""), base64.b64decode(s["sig"], validate=True))
                     for s in doc.get("signatures") or [])
        payload_type = doc["payloadType"]
        if not isinstance(payload_type, str):
            raise TypeError(payload_type)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        raise TrustError("the attestation is not a DSSE envelope (truncated or malformed)", reason=MALFORMED) from None
    return Envelope(payload_type, payload, sigs)


def verify_envelope(data: bytes, trusted: TrustedKeys) -> tuple[Envelope, str]:
    """The envelope and the fingerprint of the trusted key whose signature verifies; else a ``TrustError``:
    unsigned, no trusted key configured, signed by unknown key <keyid>, altered after signing."""
    envelope = open_envelope(data)
    if not envelope.signatures:
        raise TrustError("the envelope carries no signature", reason="unsigned")
    if not trusted:
        raise TrustError("no trusted key is configured", reason="no trusted key configured", hint=GET_KEY_HINT)
    message = pae(envelope.payload_type, envelope.payload)
    known = False
    for keyid, sig in envelope.signatures:
        candidates = [keyid] if keyid in trusted.keys else list(trusted.keys)  # a keyid is a hint, not a promise
        known = known or keyid in trusted.keys
        for fp in candidates:
            try:
                trusted.keys[fp].verify(sig, message, ec.ECDSA(hashes.SHA256()))
            except InvalidSignature:
                continue
            return envelope, fp
    if known:
        raise TrustError("the envelope's signature does not verify with the key that made it",
                         reason=ALTERED)
    keyid = envelope.signatures[0][0] or "(no keyid)"
    raise TrustError(f"the envelope is signed by a key not trusted here ({keyid})",
                     reason=f"signed by unknown key {keyid}", hint=GET_KEY_HINT)
