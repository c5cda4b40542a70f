"""Certificates in the registry, beside the image they certify: an OCI artifact (`<stack>.cert-<gpu>`, its
`subject` the image's manifest) attached, fetched and read over the registry's HTTP API."""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING

from ..errors import EngineError
from .api import Sleep, _Failure, _Manifest, _RegistryHTTP, _retrying
from .publish import _check_tag
from .remote_parse import CERTIFICATE_TYPE, CertificateArtifact, _strip_tag, certificate_tag

if TYPE_CHECKING:
    from ..engine.protocol import Engine

EMPTY_TYPE = "application/vnd.oci.empty.v1+json"


def attach_certificate(engine: Engine, registry_repo: str, stack_tag: str, certificate: bytes, *, gpu_slug: str,
                       status: str, retries: int = 4, backoff: float = 1.0, sleep: Sleep = time.sleep) -> str:
    """Store a certificate in the registry beside the image it certifies.

    An OCI artifact (artifactType ``application/vnd.envkit.certificate.v1+json``) whose
    ``subject`` is the image's manifest, tagged ``<stack_tag>.cert-<gpu>`` so any registry
    (with or without the referrers API) keeps it and a researcher can read what the image was
    certified on before pulling it. Returns ``registry/repo@sha256:...`` of the artifact.
    """
    reg = _RegistryHTTP(engine, registry_repo)
    fail = lambda f, n: EngineError(f"cannot attach the certificate to {registry_repo}:{stack_tag} in registry "  # noqa: E731
                                    f"{reg.registry}: {f.message}", hint="the certificate is still in the store")
    subject = _retrying(lambda: reg.get_manifest(stack_tag), retries=retries, backoff=backoff, sleep=sleep, fail=fail)
    if subject is None:
        raise EngineError(f"{registry_repo}:{stack_tag} is not in the registry; push the image before its certificate")
    empty = b"{}"
    config = _retrying(lambda: reg.put_blob(empty), retries=retries, backoff=backoff, sleep=sleep, fail=fail)
    layer = _retrying(lambda: reg.put_blob(certificate), retries=retries, backoff=backoff, sleep=sleep, fail=fail)
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": CERTIFICATE_TYPE,
        "config": {"mediaType": EMPTY_TYPE, "digest": config, "size": len(empty)},
        "layers": [{"mediaType": CERTIFICATE_TYPE, "digest": layer, "size": len(certificate),
                    "annotations": {"org.opencontainers.image.title": "certificate.json"}}],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest, "size": len(subject.raw)},
        "annotations": {"io.envkit.certificate.status": status, "io.envkit.certificate.gpu": gpu_slug},
    }, sort_keys=True, separators=(",", ":")).encode()
    tag = certificate_tag(stack_tag, gpu_slug)
    _check_tag(tag)
    artifact = _Manifest("sha256:" + hashlib.sha256(manifest).hexdigest(), "application/vnd.oci.image.manifest.v1+json",
                         manifest)
    digest = _retrying(
        lambda: reg.put_manifest(tag, artifact), retries=retries, backoff=backoff, sleep=sleep, fail=fail
    )
    return f"{_strip_tag(registry_repo)}@{digest}"


def fetch_certificate_artifact(reg: _RegistryHTTP, tag: str) -> CertificateArtifact | None:
    """Read the artifact tagged ``tag`` and its certificate blob; None when there is no such tag.

    Raises ``_Failure`` (permanent) when the tag holds something that is not an envkit certificate artifact.
    """
    ref = f"{reg.registry}/{reg.path}:{tag}"
    manifest = reg.get_manifest(tag)
    if manifest is None:
        return None
    try:
        doc = json.loads(manifest.raw)
        layers = [layer for layer in doc.get("layers") or [] if layer.get("mediaType") == CERTIFICATE_TYPE]
        layer = layers[0]["digest"]
        subject = (doc.get("subject") or {}).get("digest")
        annotations = dict(doc.get("annotations") or {})
    except (ValueError, AttributeError, TypeError, IndexError, KeyError):
        raise _Failure(f"{ref} is not an envkit certificate artifact (no {CERTIFICATE_TYPE} layer)", False) from None
    return CertificateArtifact(ref, manifest.digest, subject, annotations, reg.get_blob(layer))


def read_certificate(engine: Engine, registry_repo: str, stack_tag: str, gpu_slug: str) -> bytes | None:
    """The certificate attached to ``registry_repo:stack_tag`` for ``gpu_slug``, if any."""
    reg = _RegistryHTTP(engine, registry_repo, actions="pull")
    tag = certificate_tag(stack_tag, gpu_slug)
    fail = lambda f, n: EngineError(f"cannot read the certificate {registry_repo}:{tag} from registry "  # noqa: E731
                                    f"{reg.registry}: {f.message}",
                                    hint="is the registry up? an artifact that is no certificate can be "
                                         "re-attached by the next nightly run")
    artifact = _retrying(lambda: fetch_certificate_artifact(reg, tag), retries=2, backoff=1.0, sleep=time.sleep,
                         fail=fail)
    return artifact.data if artifact else None
