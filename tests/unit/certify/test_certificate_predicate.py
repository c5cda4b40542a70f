"""A certificate as an attestation's predicate: the certificate document, read back as the same Certificate."""

from __future__ import annotations

import pytest

from envkit.certify.certificate import Certificate, CheckRecord
from envkit.certify.certificate_predicate import (CERTIFICATE_PREDICATE_TYPE, POLICY_FIELDS,
                                                  certificate_from_predicate, certificate_predicate)
from envkit.errors import TrustError

LOCK = "sha256:" + "1" * 64


def certificate() -> Certificate:
    return Certificate(image="registry.example.org/vision/torch25:2.5.1", image_id="sha256:" + "e" * 64,
                       lock_hash=LOCK, gpu_model="NVIDIA H200", driver="570.124.06", status="certified",
                       checks=(CheckRecord(name="cuda_train_step", status="passed", value=1.5),),
                       payload_version="1", payload_sha256="a" * 64, envkit_version="0.1.0",
                       created_at="2026-12-07T00:00:00Z")


def test_the_predicate_is_the_certificate_document_and_reads_back():
    cert = certificate()
    predicate = certificate_predicate(cert, lock_hash=LOCK, payload_digest="sha256:" + "a" * 64)
    assert {k: predicate[k] for k in POLICY_FIELDS} == {"status": "certified", "gpu_model": "NVIDIA H200",
                                                         "driver": "570.124.06", "lock_hash": LOCK}
    assert predicate["payload_sha256"] == "a" * 64 and predicate["envkit_version"] == "0.1.0"
    assert certificate_from_predicate(predicate) == cert
    assert CERTIFICATE_PREDICATE_TYPE == "https://envkit.dev/certificate/v1"


def test_a_certificate_for_another_lock_or_payload_is_not_made_a_predicate():
    with pytest.raises(TrustError, match="not the image's sha256:2222") as caught:
        certificate_predicate(certificate(), lock_hash="sha256:" + "2" * 64)
    assert caught.value.reason == "for another lock"
    with pytest.raises(TrustError) as caught:
        certificate_predicate(certificate(), payload_digest="sha256:" + "b" * 64)
    assert caught.value.reason == "for another payload"


def test_a_predicate_that_is_not_a_certificate_is_refused_with_where():
    predicate = certificate_predicate(certificate())
    predicate["status"] = "trusted"
    with pytest.raises(TrustError, match="at status") as caught:
        certificate_from_predicate(predicate)
    assert caught.value.reason == "not a certificate"
    predicate = certificate_predicate(certificate())
    predicate["extra"] = 1
    with pytest.raises(TrustError, match="at extra"):
        certificate_from_predicate(predicate)
