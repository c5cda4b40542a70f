"""`envkit doctor`'s index check against the real PyPI, through whatever sits in front of it here.

With $PIP_CERT (the proxy's CA bundle where a TLS-intercepting proxy stands in front of PyPI) the
check answers ok; with certifi's public roots alone it answers ok where nothing intercepts, and
"not trusted" with the fix where a proxy does. Skipped when PyPI cannot be reached at all.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envkit.ops.doctor_index import CA_HINT, index_finding, trust_for
from envkit.index.urls import DEFAULT_INDEX

pytestmark = pytest.mark.network


@pytest.fixture
def pip_cert(monkeypatch) -> Path:
    cert = os.environ.get("PIP_CERT")
    if not cert or not Path(cert).is_file():
        pytest.skip("no $PIP_CERT on this host")
    monkeypatch.delenv("ENVKIT_CA_BUNDLE", raising=False)
    return Path(cert)


def test_pypi_answers_with_the_site_ca(pip_cert):
    trust = trust_for()
    assert trust.bundle == pip_cert and trust.finding.status == "ok", trust.finding
    f = index_finding(DEFAULT_INDEX, trust.bundle)
    if f.status == "fail" and ("DNS" in f.value or "refused" in f.value or "no answer" in f.value):
        pytest.skip(f"PyPI unreachable from here: {f.value}")
    assert f.status == "ok", f
    assert f.value.startswith(f"{DEFAULT_INDEX}/six/") and ": HTTP 200 in " in f.value


def test_pypi_with_public_roots_only(pip_cert):
    import certifi

    f = index_finding(DEFAULT_INDEX, Path(certifi.where()))
    if f.status == "fail" and ("DNS" in f.value or "refused" in f.value or "no answer" in f.value):
        pytest.skip(f"PyPI unreachable from here: {f.value}")
    assert f.status == "ok" or ("not trusted" in f.value and f.hint == CA_HINT), f


@pytest.mark.integration
def test_doctor_reports_the_engines_disk(engine):
    """engine.disk_usage over docker-py, and the finding made of it, on the real engine (local: measured)."""
    from envkit.ops.doctor import disk_finding

    usage = engine.disk_usage()
    assert usage["root"] and usage["images_bytes"] > 0 and usage["build_cache_bytes"] >= 0
    f = disk_finding(engine)
    assert f.status in ("ok", "warn", "fail") and f" GiB free on {usage['root']} (images " in f.value
