"""Signatures and attestations in the registry, in cosign's layout (sigstore/cosign ``specs/SIGNATURE_SPEC.md``):
tag-based discovery, for registries without the referrers API.

* ``sha256-<hex>.sig`` in the image's repository: an OCI image manifest with one layer per signature, each a
  simple-signing payload (``application/vnd.dev.cosign.simplesigning.v1+json``) with its base64 signature in the
  layer annotation ``dev.cosignproject.cosign/signature`` (``sign_image``).
* ``sha256-<hex>.att``: one layer per attestation, each a DSSE envelope (``application/vnd.dsse.envelope.v1+json``)
  with the annotation ``predicateType`` (``attach_attestation``).

A new signature or attestation is appended to the manifest already there (one certificate per GPU model, a new key
during a rotation), never written over it. What the layers say is judged by ``registry/verify.py``.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import EngineError
from ..trust.cosign import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_TYPE, sign_payload, simple_signing_payload
from ..trust.keys import SigningKey
from .api import Sleep, _Failure, _Manifest, _RegistryHTTP, _retrying
from .remote_parse import _strip_tag

if TYPE_CHECKING:
    from ..engine.protocol import Engine

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DSSE_TYPE = "application/vnd.dsse.envelope.v1+json"
PREDICATE_ANNOTATION = "predicateType"
SIG_SUFFIX, ATT_SUFFIX = ".sig", ".att"


def sig_tag(digest: str) -> str:
    """``sha256:<hex>`` -> ``sha256-<hex>.sig`` (SIGNATURE_SPEC's tag-based discovery)."""
    return digest.replace(":", "-") + SIG_SUFFIX


def att_tag(digest: str) -> str:
    return digest.replace(":", "-") + ATT_SUFFIX


@dataclass(frozen=True)
class Layer:
    """One signature or attestation: its media type, its bytes and its annotations."""

    media_type: str
    data: bytes
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.data).hexdigest()

    def descriptor(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.data),
                "annotations": dict(self.annotations)}


def read_layers(reg: _RegistryHTTP, tag: str) -> list[Layer] | None:
    """The layers (with their blobs) of the manifest tagged ``tag``; None when there is no such tag. A layer whose
    blob is missing is skipped; a manifest that is not JSON raises a permanent ``_Failure``."""
    found = read_manifest_layers(reg, tag)
    return None if found is None else found[1]


def read_manifest_layers(reg: _RegistryHTTP, tag: str) -> tuple[str, list[Layer]] | None:
    """``read_layers`` with the manifest's digest."""
    manifest = reg.get_manifest(tag)
    if manifest is None:
        return None
    try:
        descriptors = [d for d in json.loads(manifest.raw).get("layers") or [] if isinstance(d, dict)]
    except (ValueError, AttributeError):
        raise _Failure(f"{reg.registry}/{reg.path}:{tag} is not a JSON manifest", False) from None
    layers = []
    for d in descriptors:
        try:
            data = reg.get_blob(str(d.get("digest")))
        except _Failure as failure:
            if failure.retryable:
                raise
            continue
        layers.append(Layer(str(d.get("mediaType") or ""), data,
                            {str(k): str(v) for k, v in (d.get("annotations") or {}).items()}))
    return manifest.digest, layers


def _manifest_of(layers: list[Layer]) -> tuple[bytes, _Manifest]:
    """cosign's object: an OCI image manifest whose config lists the layers as its diff ids."""
    config = json.dumps({"architecture": "", "os": "", "config": {}, "created": "0001-01-01T00:00:00Z",
                         "history": [{"created": "0001-01-01T00:00:00Z"}],
                         "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in layers]}},
                        sort_keys=True, separators=(",", ":")).encode()
    doc = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
           "config": {"mediaType": OCI_CONFIG, "digest": "sha256:" + hashlib.sha256(config).hexdigest(),
                      "size": len(config)},
           "layers": [layer.descriptor() for layer in layers]}
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return config, _Manifest("sha256:" + hashlib.sha256(raw).hexdigest(), OCI_MANIFEST, raw)


def append_layers(reg: _RegistryHTTP, tag: str, new: list[Layer]) -> str:
    """Add ``new`` to the manifest tagged ``tag`` (made when there is none; a layer already there is kept once) and
    push it; returns the manifest's digest."""
    layers = read_layers(reg, tag) or []
    have = {layer.digest for layer in layers}
    layers += [layer for layer in new if layer.digest not in have]
    config, manifest = _manifest_of(layers)
    reg.put_blob(config)
    for layer in layers:
        reg.put_blob(layer.data)
    return reg.put_manifest(tag, manifest)


def _attach(engine: Engine | None, registry_repo: str, tag: str, layers: list[Layer], what: str, *, retries: int,
            backoff: float, sleep: Sleep) -> str:
    reg = _RegistryHTTP(engine, registry_repo)
    fail = lambda f, n: EngineError(f"cannot attach {what} to {registry_repo} in registry "  # noqa: E731
                                    f"{reg.registry}: {f.message}",
                                    hint="the image stays pushed; the next signed nightly run attaches it again")
    digest = _retrying(lambda: append_layers(reg, tag, layers), retries=retries, backoff=backoff, sleep=sleep,
                       fail=fail)
    return f"{_strip_tag(registry_repo)}@{digest}"


def sign_image(engine: Engine | None, registry_repo: str, manifest_digest: str, key: SigningKey, *, retries: int = 4,
               backoff: float = 1.0, sleep: Sleep = time.sleep) -> str:
    """Sign ``registry_repo@manifest_digest`` in cosign's layout (``sha256-<hex>.sig``); returns the signature
    manifest's pinned reference."""
    payload = simple_signing_payload(_strip_tag(registry_repo), manifest_digest)
    layer = Layer(SIMPLE_SIGNING_TYPE, payload, {SIGNATURE_ANNOTATION: sign_payload(payload, key)})
    return _attach(engine, registry_repo, sig_tag(manifest_digest), [layer], "the image's signature",
                   retries=retries, backoff=backoff, sleep=sleep)


def attach_attestation(engine: Engine | None, registry_repo: str, manifest_digest: str, envelope: bytes,
                       predicate_type: str, *, retries: int = 4, backoff: float = 1.0,
                       sleep: Sleep = time.sleep) -> str:
    """Append a DSSE envelope (``trust.attest.attest``) to ``sha256-<hex>.att``; returns that manifest's pinned
    reference."""
    layer = Layer(DSSE_TYPE, envelope, {PREDICATE_ANNOTATION: predicate_type})
    return _attach(engine, registry_repo, att_tag(manifest_digest), [layer], f"the {predicate_type} attestation",
                   retries=retries, backoff=backoff, sleep=sleep)
