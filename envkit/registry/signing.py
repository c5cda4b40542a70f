"""Signing at publish: an image envkit pushes gets a cosign signature (``sha256-<hex>.sig``) and each of its
certificates a signed in-toto attestation (``sha256-<hex>.att``, predicate type and predicate
``certify.certificate_predicate``'s: the certificate document), and any other predicates the caller makes (the
image's CycloneDX SBOM and SLSA provenance, ``app.image_attestations``) as signed attestations beside them, when
the runner has a signing key (``--signing-key`` / ``$ENVKIT_SIGNING_KEY``). The old unsigned certificate artifact
(``artifacts.attach_certificate``) is still written beside it for envkit versions that read only that; this envkit
reads it as "unsigned" and never counts it."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..certify.certificate import Certificate
from ..certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE, certificate_predicate
from ..errors import EngineError, TrustError
from ..trust.attest import attest, verify_attestation
from ..trust.cosign import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_TYPE, verify_signature
from ..trust.keys import SigningKey, TrustedKeys
from .api import Sleep, _RegistryHTTP, _retrying
from .remote_parse import _strip_tag
from .signatures import DSSE_TYPE, att_tag, attach_attestation, read_layers, sig_tag, sign_image

if TYPE_CHECKING:
    from ..engine.protocol import Engine


def _layers(engine: Engine | None, registry_repo: str, tag: str, *, retries: int = 4, backoff: float = 1.0,
            sleep: Sleep = time.sleep) -> list:
    reg = _RegistryHTTP(engine, registry_repo, actions="pull")
    return _retrying(lambda: read_layers(reg, tag), retries=retries, backoff=backoff, sleep=sleep,
                     fail=lambda f, n: EngineError(f"cannot read {registry_repo}:{tag}: {f.message}")) or []


def signed_by(engine: Engine | None, registry_repo: str, manifest_digest: str, key: SigningKey, **retry: Any) -> bool:
    """Whether ``sha256-<hex>.sig`` already holds a signature of this image by ``key`` (signing again would add a
    layer each run: ECDSA signatures differ every time)."""
    mine = TrustedKeys({key.fingerprint: key.public})
    for layer in _layers(engine, registry_repo, sig_tag(manifest_digest), **retry):
        try:
            if layer.media_type == SIMPLE_SIGNING_TYPE:
                verify_signature(layer.data, layer.annotations.get(SIGNATURE_ANNOTATION, ""), mine, manifest_digest)
                return True
        except TrustError:
            continue
    return False


def attested(engine: Engine | None, registry_repo: str, manifest_digest: str, key: SigningKey,
             **retry: Any) -> list[tuple[str, dict]]:
    """(predicate type, predicate) of each attestation about ``manifest_digest`` that ``key`` signed and that
    verifies (what signing again must not append a second time)."""
    mine = TrustedKeys({key.fingerprint: key.public})
    found = []
    for layer in _layers(engine, registry_repo, att_tag(manifest_digest), **retry):
        try:
            if layer.media_type == DSSE_TYPE:
                verified = verify_attestation(layer.data, mine, manifest_digest)
                found.append((verified.predicate_type, verified.predicate))
        except TrustError:
            continue
    return found


def sign_published(engine: Engine | None, registry_repo: str, manifest_digest: str, key: SigningKey,
                   certificates: tuple[Certificate, ...] | list[Certificate] = (),
                   documents: Mapping[str, Callable[[], dict]] | None = None, **retry: Any) -> list[str]:
    """Sign ``registry_repo@manifest_digest`` (once per key), attach each certificate as a signed attestation
    about that digest (once per certificate and key), and each of ``documents`` (predicate type -> a function
    making the predicate: the SBOM, the provenance) once per type and key: an image (one digest) already holding
    a verifying attestation of that type by ``key`` gets no second one, and its predicate is not made again.
    Returns the pinned references written."""
    written = []
    if not signed_by(engine, registry_repo, manifest_digest, key, **retry):
        written.append(sign_image(engine, registry_repo, manifest_digest, key, **retry))
    have = attested(engine, registry_repo, manifest_digest, key, **retry)
    todo: list[tuple[str, Callable[[], dict]]] = [
        (CERTIFICATE_PREDICATE_TYPE, functools.partial(certificate_predicate, c)) for c in certificates
        if (CERTIFICATE_PREDICATE_TYPE, c.to_json()) not in have]
    todo += [(kind, make) for kind, make in (documents or {}).items() if kind not in {t for t, _ in have}]
    for kind, make in todo:
        envelope = attest(kind, make(), _strip_tag(registry_repo), manifest_digest, key)
        written.append(attach_attestation(engine, registry_repo, manifest_digest, envelope, kind, **retry))
    return written
