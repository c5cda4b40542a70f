"""support/ca_bundle.site_certificates: what of a CA bundle a classic build passes as ENVKIT_SITE_CA."""

import datetime
from pathlib import Path

import certifi
import pytest

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from envkit.support.ca_bundle import site_certificates  # noqa: E402


def _site_ca() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a TLS-intercepting proxy's CA")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def test_a_whole_trust_store_with_the_site_ca_passes_only_the_site_ca(tmp_path):
    """A host's whole store (the public roots, 220 kB on this machine) would not fit a build argument (128 kB); the
    image's own ca-certificates has the public roots, so only what is not one of them is passed."""
    site = _site_ca()
    bundle = tmp_path / "bundle.pem"
    bundle.write_text(Path(certifi.where()).read_text() + "\n# the site's\n" + site)
    assert bundle.stat().st_size > 128_000
    assert site_certificates(bundle) == site.strip() + "\n"


def test_a_bundle_of_public_roots_only_passes_nothing(tmp_path):
    bundle = tmp_path / "roots.pem"
    bundle.write_text(Path(certifi.where()).read_text())
    assert site_certificates(bundle) == ""
