"""What the registry's signatures and attestations of one image are worth to this reader.

A registry certificate counts only when its DSSE envelope verifies with a trusted key (``trust.keys``), its
subject is the manifest digest being read (a tag is resolved to its digest first: moving ``:certified`` or a stack
tag gains nothing) and its lock hash is the image's label. Everything else is kept with why it does not count
("unsigned" for the old ``<stack>.cert-<gpu>`` artifacts, "signed by unknown key <fingerprint>", "for another
image <digest>", "altered after signing", "truncated/malformed envelope", "no trusted key configured", "for
another lock <hash>") and never counts.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from ..certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE, certificate_from_predicate
from ..errors import EnvkitError, TrustError
from ..trust.attest import verify_attestation
from ..trust.cosign import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_TYPE, verify_signature
from ..trust.keys import TrustedKeys
from .api import _RegistryHTTP
from .remote_parse import RemoteCertificate, perf_metrics
from .signatures import DSSE_TYPE, PREDICATE_ANNOTATION, att_tag, read_layers, read_manifest_layers, sig_tag


@dataclass(frozen=True)
class ImageTrust:
    signature: dict  # {"signed_by": fingerprint} or {"why": reason}
    certificates: list[RemoteCertificate]  # the ones that count
    uncounted: list[dict] = field(default_factory=list)  # {"source", "gpu_model", "status", "why", ...}
    attestations: list[dict] = field(default_factory=list)  # every attestation: predicate type, signer or why

    def to_json(self) -> dict:
        return {"signature": self.signature, "uncounted_certificates": self.uncounted,
                "attestations": self.attestations}


def judge_image(reg: _RegistryHTTP, digest: str, lock_hash: str | None, trusted: TrustedKeys,
                legacy: list[RemoteCertificate]) -> ImageTrust:
    """The image's signature, its counted certificates and what does not count (``legacy``: the old unsigned
    certificate artifacts attached to it)."""
    uncounted = [{**_brief(c), "source": f"registry artifact {c.tag}", "why": "unsigned"} for c in legacy]
    counted, attestations = [], []
    found = read_manifest_layers(reg, att_tag(digest))
    pinned = f"{reg.registry}/{reg.path}@{found[0]}" if found else ""
    for layer in found[1] if found else []:
        claimed = layer.annotations.get(PREDICATE_ANNOTATION, "")
        if layer.media_type != DSSE_TYPE:
            continue
        try:
            verified = verify_attestation(layer.data, trusted, digest)
        except TrustError as exc:
            attestations.append({"predicate_type": claimed, "why": exc.reason})
            if claimed == CERTIFICATE_PREDICATE_TYPE:
                uncounted.append({**_claimed(layer.data), "source": f"attestation {att_tag(digest)}",
                                  "why": exc.reason})
            continue
        attestations.append({"predicate_type": verified.predicate_type, "signed_by": verified.signed_by})
        if verified.predicate_type != CERTIFICATE_PREDICATE_TYPE:
            continue
        try:
            cert = _certificate(verified.predicate, pinned, digest, verified.signed_by)
        except EnvkitError as exc:
            uncounted.append({"source": f"attestation {att_tag(digest)}", "why": f"unreadable: {exc.message}"})
            continue
        if lock_hash and cert.lock_hash != lock_hash:
            uncounted.append({**_brief(cert), "source": f"attestation {att_tag(digest)}",
                              "why": f"for another lock {cert.lock_hash}"})
            continue
        counted.append(cert)
    return ImageTrust(_signature(reg, digest, trusted), counted, uncounted, attestations)


def _signature(reg: _RegistryHTTP, digest: str, trusted: TrustedKeys) -> dict:
    layers = [layer for layer in read_layers(reg, sig_tag(digest)) or [] if layer.media_type == SIMPLE_SIGNING_TYPE]
    if not layers:
        return {"why": "unsigned"}
    why = "unsigned"
    for layer in layers:
        try:
            _, signer = verify_signature(layer.data, layer.annotations.get(SIGNATURE_ANNOTATION, ""), trusted, digest)
        except TrustError as exc:
            why = exc.reason
            continue
        return {"signed_by": signer}
    return {"why": why}


def _certificate(predicate: dict, pinned: str, digest: str, signer: str) -> RemoteCertificate:
    cert = certificate_from_predicate(predicate)
    return RemoteCertificate(att_tag(digest), pinned, digest, cert.status, cert.gpu_model, cert.driver,
                             cert.created_at, tuple(cert.reasons), cert.image_id, cert.lock_hash, perf_metrics(cert),
                             cert.to_json(), signed_by=signer)


def _brief(cert: RemoteCertificate) -> dict:
    return {"gpu_model": cert.gpu_model, "status": cert.status, "driver": cert.driver, "created_at": cert.created_at}


def _claimed(envelope: bytes) -> dict:
    """What a certificate that does not verify claims (shown beside why it does not count; never trusted)."""
    try:
        statement = json.loads(base64.b64decode(json.loads(envelope)["payload"]))
        cert = statement["predicate"]
        return {"gpu_model": str(cert.get("gpu_model")), "status": str(cert.get("status")),
                "driver": str(cert.get("driver")), "created_at": str(cert.get("created_at"))}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
