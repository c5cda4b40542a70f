"""envkit doctor's ca_bundle and index findings, against throwaway local servers (no network).

A CA made here signs a certificate for ``localhost``; an HTTPS server presents it. Without the CA
bundle the index check must say "not trusted" and how to fix it; with it, answer ok.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from envkit.ops.doctor_index import CA_HINT, PROBE_PROJECT, index_finding, trust_for
from envkit.support.ca_bundle import CA_ENV
from envkit.spec import load_spec
from tests.conftest import MINIMAL

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
TRUST_VARS = (*CA_ENV, "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No proxy and no CA bundle from the host: each test sets what it means."""
    for var in PROXY_VARS + TRUST_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)


# --- a CA and a server certificate ----------------------------------------------------------

def _name(cn: str):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, *, ca: bool, sans: tuple[str, ...] = ()):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(s) for s in sans]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.pem (the test CA), other-ca.pem (a second CA), leaf.pem (a non-CA certificate), and the
    server's certificate for localhost with its key."""
    d = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("envkit doctor test CA", ca_key, "envkit doctor test CA", ca_key, ca=True)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert("another CA", other_key, "another CA", other_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    server = _cert("localhost", key, "envkit doctor test CA", ca_key, ca=False, sans=("localhost",))
    (d / "ca.pem").write_bytes(_pem(ca))
    (d / "two-cas.pem").write_bytes(_pem(ca) + _pem(other))
    (d / "leaf.pem").write_bytes(_pem(server))
    (d / "server.pem").write_bytes(_pem(server))
    (d / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))
    return d


# --- a fake package index: each path answers what the test says -------------------------------

class Index:
    def __init__(self, pki: Path | None = None):
        self.answers: dict[str, tuple[int, str, bytes]] = {}
        self.seen: list[tuple[str, str]] = []  # (path, Accept)
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                index.seen.append((self.path, self.headers.get("Accept", "")))
                status, ctype, body = index.answers.get(self.path, (404, "text/plain", b"not found"))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if pki is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, host: str = "localhost") -> str:
        return f"{self.scheme}://{host}:{self.server.server_address[1]}/simple"

    def answer(self, status: int, ctype: str = "application/vnd.pypi.simple.v1+json", body: bytes = b"{}"):
        self.answers[f"/simple/{PROBE_PROJECT}/"] = (status, ctype, body)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_index():
    index = Index()
    yield index
    index.close()


@pytest.fixture
def https_index(pki):
    index = Index(pki)
    index.answer(200)
    yield index
    index.close()


@contextlib.contextmanager
def _refusing_port():
    """A port that refuses connections for as long as the block runs: bound here, never listening.

    A port only found free and let go can be taken by another test's server before it is dialled."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


# --- ca_bundle ----------------------------------------------------------------------------------

def test_no_bundle_is_ok_and_says_so():
    trust = trust_for()
    assert trust.bundle is None and trust.finding.status == "ok" and "default trust store" in trust.finding.value


def test_a_bundle_is_loaded_and_its_certificates_counted(pki, monkeypatch):
    monkeypatch.setenv("PIP_CERT", str(pki / "two-cas.pem"))
    trust = trust_for()
    assert trust.bundle == pki / "two-cas.pem"
    assert trust.finding.status == "ok" and trust.finding.value == f"{pki / 'two-cas.pem'} ($PIP_CERT, 2 certificates)"
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(pki / "ca.pem"))
    assert trust_for().finding.value == f"{pki / 'ca.pem'} ($ENVKIT_CA_BUNDLE, 1 certificate)"


def test_a_variable_naming_a_missing_file_fails_with_the_path_and_what_is_used_instead(pki, tmp_path, monkeypatch):
    missing = tmp_path / "corp-ca.pem"
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(missing))
    trust = trust_for()
    assert trust.finding.status == "fail" and trust.finding.value == f"$ENVKIT_CA_BUNDLE={missing}: does not exist"
    assert "default trust store" in trust.finding.hint and "ENVKIT_CA_BUNDLE" in trust.finding.hint
    assert trust.bundle is None and trust.usable  # what resolve would do: skip it, verify as usual
    monkeypatch.setenv("PIP_CERT", str(pki / "ca.pem"))
    trust = trust_for()
    assert trust.finding.status == "fail" and f"{pki / 'ca.pem'} from $PIP_CERT" in trust.finding.hint
    assert trust.bundle == pki / "ca.pem"
    monkeypatch.delenv("ENVKIT_CA_BUNDLE")
    monkeypatch.setenv("PIP_CERT", str(tmp_path))
    assert trust_for().finding.value == f"$PIP_CERT={tmp_path}: is not a file"


def test_ca_env_is_the_order_spec_reads(pki, monkeypatch):
    """doctor names the variables Spec.ca_bundle_path reads; the first set to a file wins in both."""
    monkeypatch.setenv(CA_ENV[0], str(pki / "ca.pem"))
    monkeypatch.setenv(CA_ENV[1], str(pki / "two-cas.pem"))
    assert trust_for().bundle == pki / "ca.pem"
    assert f"${CA_ENV[0]}" in trust_for().finding.value


def test_a_file_without_pem_certificates_fails(tmp_path, monkeypatch):
    for name, content in (("empty.pem", b""), ("junk.pem", b"not a certificate\n"),
                          ("der.cer", bytes.fromhex("3082010a0282010100"))):
        (tmp_path / name).write_bytes(content)
        monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(tmp_path / name))
        f = trust_for().finding
        assert f.status == "fail" and f"{tmp_path / name} ($ENVKIT_CA_BUNDLE) holds no PEM certificate" in f.value
        assert "openssl x509 -inform der" in f.hint


def test_an_unreadable_bundle_fails(pki, tmp_path, monkeypatch):
    path = tmp_path / "ca.pem"
    path.write_bytes((pki / "ca.pem").read_bytes())
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads any file: refuse it as the kernel would refuse others
        def refuse(cafile=None):
            raise PermissionError(13, "Permission denied", cafile)

        monkeypatch.setattr("envkit.ops.doctor_index.ssl.create_default_context", refuse)
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(path))
    f = trust_for().finding
    assert f.status == "fail" and f.value == f"{path} ($ENVKIT_CA_BUNDLE) is not readable: Permission denied"
    assert f"chmod a+r {path}" in f.hint


def test_a_bundle_of_no_ca_warns(pki, monkeypatch):
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(pki / "leaf.pem"))
    f = trust_for().finding
    assert f.status == "warn" and "none of them a CA" in f.value


def _spec(write_spec, build: str):
    return load_spec(write_spec(MINIMAL + build))


def test_the_spec_bundle_wins_and_a_missing_one_stops_resolve(pki, tmp_path, write_spec, monkeypatch):
    (tmp_path / "corp.pem").write_bytes((pki / "ca.pem").read_bytes())
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(tmp_path / "nowhere.pem"))  # not read: the spec names one
    trust = trust_for(_spec(write_spec, "build:\n  ca_bundle: corp.pem\n"))
    assert trust.finding.status == "ok" and trust.finding.value == f"{tmp_path / 'corp.pem'} (build.ca_bundle, 1 certificate)"
    trust = trust_for(_spec(write_spec, "build:\n  ca_bundle: gone.pem\n"))
    assert trust.finding.status == "fail" and not trust.usable
    assert trust.finding.value.startswith(f"{tmp_path / 'team.yaml'}:") and "'gone.pem' is not a file" in trust.finding.value


# --- index --------------------------------------------------------------------------------------

def test_an_index_signed_by_an_unknown_ca_is_not_trusted_until_the_bundle_is_given(https_index, pki):
    f = index_finding(https_index.url(), None, timeout=5)
    assert f.status == "fail" and "is not trusted by the default trust store" in f.value and f.hint == CA_HINT
    f = index_finding(https_index.url(), pki / "two-cas.pem", timeout=5)
    assert f.status == "ok" and f.value.startswith(f"{https_index.url()}/{PROBE_PROJECT}/: HTTP 200 in ")
    assert f.value.endswith(" ms")
    assert https_index.seen[-1] == (f"/simple/{PROBE_PROJECT}/", "application/vnd.pypi.simple.v1+json")


def test_a_bundle_without_the_signing_ca_is_named(https_index, tmp_path):
    import certifi

    f = index_finding(https_index.url(), Path(certifi.where()), timeout=5)
    assert f.status == "fail" and f"not trusted by the CA bundle {certifi.where()}" in f.value


def test_a_broken_or_missing_bundle_is_named_as_the_cause(https_index, tmp_path):
    (tmp_path / "junk.pem").write_text("junk\n")
    for bundle in (tmp_path / "junk.pem", tmp_path / "missing.pem"):
        f = index_finding(https_index.url(), bundle, timeout=5)
        assert f.status == "fail" and f"TLS cannot use {bundle}" in f.value and f.hint == "see ca_bundle"


def test_a_certificate_for_another_name(https_index, pki):
    f = index_finding(https_index.url("127.0.0.1"), pki / "ca.pem", timeout=5)
    assert f.status == "fail" and "is not for 127.0.0.1" in f.value


def test_https_to_a_plain_http_server(http_index):
    f = index_finding(http_index.url().replace("http://", "https://"), None, timeout=5)
    assert f.status == "fail" and "does not speak TLS" in f.value


@pytest.mark.parametrize(("status", "ctype", "expect", "words"), [
    (200, "application/vnd.pypi.simple.v1+json", "ok", "HTTP 200"),
    (401, "text/plain", "fail", "the index needs a login"),
    (403, "text/plain", "fail", "the index needs a login"),
    (404, "text/plain", "warn", f"has no '{PROBE_PROJECT}'"),
    (503, "text/plain", "fail", "HTTP 503"),
    (200, "text/html", "fail", "without the simple JSON API (text/html)"),
])
def test_what_the_index_answers(http_index, status, ctype, expect, words):
    http_index.answer(status, ctype)
    f = index_finding(http_index.url(), None, timeout=5)
    assert f.status == expect and words in f.value, f


def test_connection_refused_dns_and_timeout_name_the_proxy_variables():
    with _refusing_port() as port:
        f = index_finding(f"http://127.0.0.1:{port}/simple", None, timeout=5)
    assert f.status == "fail" and "refused the connection" in f.value and "HTTPS_PROXY" in f.hint
    f = index_finding("https://envkit-doctor.invalid/simple", None, timeout=5)
    assert f.status == "fail" and "cannot resolve envkit-doctor.invalid (DNS)" in f.value
    assert "HTTPS_PROXY" in f.hint and "NO_PROXY" in f.hint
    with socket.socket() as silent:  # the kernel completes the handshake; nobody ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        f = index_finding(f"http://127.0.0.1:{silent.getsockname()[1]}/simple", None, timeout=0.5)
    assert f.status == "fail" and "no answer within 0.5 s" in f.value and "HTTPS_PROXY" in f.hint


class _Proxy(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_CONNECT(self):
        self.send_response(407, "Proxy Authentication Required")
        self.send_header("Proxy-Authenticate", 'Basic realm="corp"')
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_proxy_failures_name_the_proxy_without_its_password(monkeypatch):
    with _refusing_port() as port:
        monkeypatch.setenv("HTTPS_PROXY", f"http://alice:s3cret@127.0.0.1:{port}")
        f = index_finding("https://pypi.org/simple", None, timeout=5)
    assert f.status == "fail" and "the proxy http://alice:***@127.0.0.1:" in f.value and "s3cret" not in f.value
    assert f.value.endswith("refused the connection")
    assert "HTTPS_PROXY" in f.hint
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=proxy.serve_forever, args=(0.05,), daemon=True).start()
    try:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
        f = index_finding("https://pypi.org/simple", None, timeout=5)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert f.status == "fail" and "needs a login (HTTP 407)" in f.value and "user:password@" in f.hint
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # a host reached directly is not sent to the proxy
    with _refusing_port() as port:
        f = index_finding(f"http://127.0.0.1:{port}/simple", None, timeout=5)
    assert "proxy" not in f.value


# --- the command --------------------------------------------------------------------------------

def _doctor(*args, env=None):
    from envkit.cli import main

    return CliRunner().invoke(main, ["doctor", *map(str, args)], env=env)


@pytest.fixture
def no_engine(monkeypatch, tmp_path):
    from envkit.errors import EngineError

    def refuse():
        raise EngineError("no engine in this test")

    monkeypatch.setattr("envkit.engine.docker_engine.connect", refuse)
    return tmp_path / "history.sqlite"


def test_doctor_spec_checks_the_spec_index_with_the_spec_bundle(no_engine, https_index, pki, tmp_path, write_spec):
    (tmp_path / "corp.pem").write_bytes((pki / "ca.pem").read_bytes())
    spec = write_spec(MINIMAL + f"build:\n  ca_bundle: corp.pem\n  index_url: {https_index.url()}\n")
    result = _doctor("--spec", spec, "--store", no_engine, "--json")
    assert result.exit_code == 6  # the engine failed; every other check still ran
    found = {f["name"]: f for f in json.loads(result.stdout)["findings"]}
    assert set(found["index"]) == {"name", "status", "value", "hint"}
    assert found["ca_bundle"]["status"] == "ok" and "build.ca_bundle" in found["ca_bundle"]["value"]
    assert found["index"]["status"] == "ok" and found["index"]["value"].startswith(https_index.url())


def test_doctor_offline_skips_the_index(no_engine, monkeypatch):
    monkeypatch.setattr("envkit.ops.doctor.index_finding", lambda *a, **k: pytest.fail("asked the index"))
    for args, env in ((["--offline"], None), ([], {"ENVKIT_OFFLINE": "1"})):
        result = _doctor(*args, "--store", no_engine, "--json", env=env)
        found = {f["name"]: f for f in json.loads(result.stdout)["findings"]}
        assert found["index"]["status"] == "skip" and "https://pypi.org/simple" in found["index"]["value"]


def test_doctor_fails_on_a_missing_bundle_and_skips_the_index(no_engine, tmp_path, write_spec):
    spec = write_spec(MINIMAL + "build:\n  ca_bundle: gone.pem\n")
    result = _doctor("--spec", spec, "--store", no_engine)
    assert result.exit_code == 6
    words = " ".join(result.output.split())  # (doctor wraps its lines to 100 columns)
    assert "'gone.pem' is not a file" in words and "resolve stops at the CA bundle" in words


def test_a_401_says_where_the_login_goes_or_that_the_one_there_was_refused(http_index, tmp_path, monkeypatch):
    http_index.answer(401, "text/plain")
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    f = index_finding(http_index.url(), None, timeout=5)
    assert "machine localhost login USER password TOKEN" in f.hint
    netrc = tmp_path / "netrc"
    netrc.write_text("machine localhost login ci password wrong\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    f = index_finding(http_index.url(), None, timeout=5)
    assert f"the login for localhost in {netrc} was refused" in f.hint


def test_doctor_spec_also_asks_each_variant_index_the_resolver_will_ask(no_engine, monkeypatch):
    """examples/variant.yaml's torch 2.11 comes from download.pytorch.org/whl/cu126 (its V100s): that index
    is probed for torch, with the image that needs it named; an example wholly from PyPI adds nothing."""
    from envkit.ops.doctor_index import framework_indexes
    from tests.conftest import ROOT

    variant = ROOT / "examples" / "variant.yaml"
    assert framework_indexes(load_spec(variant)) == {"https://download.pytorch.org/whl/cu126": ["torch211"]}
    assert framework_indexes(load_spec(ROOT / "examples" / "team.yaml")) == {}
    asked = []

    def probe(url, bundle, **kw):
        from envkit.ops.findings import Finding

        asked.append((url, kw.get("project", PROBE_PROJECT)))
        return Finding("index", "fail" if "pytorch" in url else "ok", f"{url}/…: cannot resolve", "the hint")

    monkeypatch.setattr("envkit.ops.doctor.index_finding", probe)
    found = {f["name"]: f for f in json.loads(_doctor("--spec", variant, "--store", no_engine, "--json").stdout)["findings"]}
    assert asked == [("https://pypi.org/simple", PROBE_PROJECT), ("https://download.pytorch.org/whl/cu126", "torch")]
    assert found["framework_index"]["status"] == "fail" and found["framework_index"]["value"].endswith("(for torch211)")


def test_resolve_and_build_warn_of_a_ca_variable_that_names_no_file(pki, tmp_path, monkeypatch):
    """What doctor fails on, resolve and build say as they skip it (not silently, as before)."""
    from envkit.spec import env_ca_skip_note

    missing = tmp_path / "nope.pem"
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(missing))
    monkeypatch.delenv("PIP_CERT", raising=False)
    assert env_ca_skip_note() == (f"warning: $ENVKIT_CA_BUNDLE={missing} names no file, so it is skipped: TLS is "
                                  "verified with the default trust store")
    monkeypatch.setenv("PIP_CERT", str(pki / "ca.pem"))
    assert env_ca_skip_note().endswith(f"verified with $PIP_CERT ({pki / 'ca.pem'})")
    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(pki / "ca.pem"))
    assert env_ca_skip_note() is None  # the first one names a file: PIP_CERT is not consulted
