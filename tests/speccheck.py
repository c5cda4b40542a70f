"""An independent verifier of what envkit signs, written from the public specs alone and sharing no code with
envkit: sigstore/cosign specs/SIGNATURE_SPEC.md (the ``sha256-<hex>.sig`` manifest, simple-signing payload,
ECDSA-P256/SHA-256 signature in the ``dev.cosignproject.cosign/signature`` annotation), cosign's attestation layout
(``sha256-<hex>.att``, ``application/vnd.dsse.envelope.v1+json`` layers), the DSSE protocol (PAE) and in-toto
Statement v1. DSSE envelopes are checked twice: here with ``cryptography``, and with securesystemslib's own
``dsse.Envelope.verify``. SLSA provenance v1 predicates (https://slsa.dev/spec/v1.0/provenance) are read by the
official protobuf definition that in-toto-attestation ships compiled, with the spec's REQUIRED fields checked by
name (``check_provenance``)."""

from __future__ import annotations

import base64
import hashlib
import json

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIG_ANNOTATION = "dev.cosignproject.cosign/signature"
DSSE_LAYER = "application/vnd.dsse.envelope.v1+json"
IN_TOTO = "application/vnd.in-toto+json"


def spki_sha256(public_pem: bytes) -> str:
    key = serialization.load_pem_public_key(public_pem)
    return hashlib.sha256(key.public_bytes(serialization.Encoding.DER,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


def tag_for(digest: str, suffix: str) -> str:
    """SIGNATURE_SPEC's tag-based discovery: replace ':' with '-', append the suffix."""
    return digest.replace(":", "-") + suffix


def check_signature_layer(manifest: dict, blob: bytes, layer: dict, public_pem: bytes, digest: str) -> dict:
    """One layer of a .sig manifest: its descriptor matches the blob, the payload names ``digest``, and the
    annotation's signature verifies with ``public_pem`` (raises on any failure). Returns the payload."""
    assert manifest["schemaVersion"] == 2
    assert layer["mediaType"] == SIMPLE_SIGNING
    assert layer["digest"] == "sha256:" + hashlib.sha256(blob).hexdigest() and layer["size"] == len(blob)
    payload = json.loads(blob)
    assert payload["critical"]["type"] == "cosign container image signature"
    assert payload["critical"]["image"]["docker-manifest-digest"] == digest
    assert "docker-reference" in payload["critical"]["identity"]
    public = serialization.load_pem_public_key(public_pem)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    public.verify(base64.b64decode(layer["annotations"][SIG_ANNOTATION]), blob, ec.ECDSA(hashes.SHA256()))
    return payload


def pae(payload_type: bytes, body: bytes) -> bytes:
    return b"DSSEv1 " + str(len(payload_type)).encode() + b" " + payload_type + b" " + str(len(body)).encode() \
        + b" " + body


def check_envelope(envelope: bytes, public_pem: bytes, digest: str) -> dict:
    """A DSSE envelope holding an in-toto Statement v1 about ``digest``, signed by ``public_pem``: verified with
    ``cryptography`` from the spec, and with securesystemslib's DSSE. Returns the statement."""
    doc = json.loads(envelope)
    assert doc["payloadType"] == IN_TOTO
    body = base64.b64decode(doc["payload"])
    public = serialization.load_pem_public_key(public_pem)
    assert isinstance(public, ec.EllipticCurvePublicKey)
    sig = doc["signatures"][0]
    public.verify(base64.b64decode(sig["sig"]), pae(IN_TOTO.encode(), body), ec.ECDSA(hashes.SHA256()))
    assert sig["keyid"] == spki_sha256(public_pem)
    sslib_verify(envelope, public_pem)
    statement = json.loads(body)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert {"sha256": digest.split(":", 1)[1]} in [s["digest"] for s in statement["subject"]]
    assert isinstance(statement["predicateType"], str) and isinstance(statement["predicate"], dict)
    return statement


def sslib_verify(envelope: bytes, public_pem: bytes) -> None:
    """securesystemslib's own DSSE verification (raises its VerificationError when no signature verifies)."""
    doc = json.loads(envelope)
    public = serialization.load_pem_public_key(public_pem)
    key = SSlibKey.from_crypto(public, keyid=spki_sha256(public_pem), scheme="ecdsa-sha2-nistp256")
    Envelope.from_dict(doc).verify([key], 1)


def check_provenance(predicate: dict):
    """``predicate`` as SLSA provenance v1's official protobuf definition reads it (unknown fields refused, every
    name and type as the spec's, timestamps RFC 3339), with the spec's REQUIRED fields present, which protobuf
    cannot mark: ``buildDefinition.buildType`` and ``externalParameters``, ``runDetails.builder.id`` (a URI); each
    resolved dependency a valid ResourceDescriptor; ``builder.version`` a map of strings to strings. Returns the
    parsed message."""
    message = json_format.ParseDict(predicate, provenance_pb2.Provenance(),  # type: ignore[attr-defined]
                                    ignore_unknown_fields=False)
    assert message.build_definition.build_type and message.build_definition.HasField("external_parameters")
    assert message.run_details.builder.id.startswith("https://"), message.run_details.builder.id
    assert all(isinstance(k, str) and isinstance(v, str)
               for k, v in predicate["runDetails"]["builder"].get("version", {}).items())
    for dependency in message.build_definition.resolved_dependencies:
        ResourceDescriptor.copy_from_pb(dependency).validate()
    return message
