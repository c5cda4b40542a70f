"""A certificate as the predicate of a signed attestation (``https://envkit.dev/certificate/v1``).

The predicate is the certificate document itself (``Certificate.to_json``), so its fields are at the top level
under the names the certificate already has: ``status`` ("certified" | "verified" | "failed"), ``gpu_model``
("NVIDIA H200"), ``driver``, ``lock_hash``, ``payload_sha256``, ``reasons``, ``checks``, ``facts``,
``envkit_version``, ``created_at``, ... An admission policy reads them by those names (``docs/kyverno-policy.yaml``:
``{{ status }}``, ``{{ gpu_model }}``), and ``ls``/``show`` read a verified predicate back as a ``Certificate``
(``certificate_from_predicate``). This module is the one owner of that shape: the signer and the readers call it.
"""

from __future__ import annotations

from pydantic import ValidationError

from ..errors import TrustError
from .certificate import Certificate

CERTIFICATE_PREDICATE_TYPE = "https://envkit.dev/certificate/v1"  # the attestation's predicateType (owned here)
# The predicate's fields an admission policy conditions on (docs/kyverno-policy.yaml): each a top-level key
POLICY_FIELDS = ("status", "gpu_model", "driver", "lock_hash")


def certificate_predicate(cert: Certificate, *, lock_hash: str | None = None,
                          payload_digest: str | None = None) -> dict:
    """The predicate of ``cert``'s attestation: the certificate document. ``lock_hash`` (the image's
    ``io.envkit.lock-hash`` label) and ``payload_digest`` (the payload envkit ran), when given, must be the
    certificate's own: a certificate about another lock or another payload is not signed for this image."""
    if lock_hash is not None and lock_hash != cert.lock_hash:
        raise TrustError(f"the certificate of {cert.image} is for lock {cert.lock_hash}, not the image's {lock_hash}",
                         reason="for another lock", hint="certify the image as it is built from the current lock")
    if payload_digest is not None and payload_digest.removeprefix("sha256:") != cert.payload_sha256:
        raise TrustError(f"the certificate of {cert.image} was made by payload {cert.payload_sha256}, not "
                         f"{payload_digest}", reason="for another payload",
                         hint="sign the certificate the payload that ran made, unchanged")
    return cert.to_json()


def certificate_from_predicate(predicate: dict) -> Certificate:
    """The ``Certificate`` a verified attestation's predicate holds (the model's rules: unknown keys refused)."""
    try:
        return Certificate.model_validate(predicate)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the top"
        raise TrustError(f"the attestation's predicate is not an envkit certificate: {first['msg']} at {where}",
                         reason="not a certificate",
                         hint="a certificate attestation's predicate is the document envkit wrote") from None
