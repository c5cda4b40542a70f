"""Registries that require TLS client certificates (mutual TLS): how envkit pairs the engine's
certs.d files, presents them, and what a registry's (or the engine's) refusal becomes.

Offline: a throwaway PKI (tokenserver.make_pki), ``CERTS_D`` pointed at a temporary directory,
and TLS servers on loopback in this process (Python's ssl, TLS 1.3: the "certificate required"
alert; and one that resets the connection in the handshake). The real engine and
docker-registry (Go, TLS 1.2: "bad certificate") are tests/integration/test_registry_mtls.py.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest
import requests

import envkit.registry.tls
from envkit.engine import docker_registry
from envkit.errors import EngineError
from envkit.registry.publish import _stream
from envkit.registry.api import _retrying, _RegistryHTTP
from envkit.registry.auth import ClientCertFailure, RegistryAuthError, TrustFailure, engine_tls_failure, open_session
from envkit.registry.tls import ClientPair, client_pairs, engine_cas
from tests.integration.tokenserver import make_pki

REG = "reg.example:5000"


@pytest.fixture
def certs_d(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "certs.d"
    root.mkdir()
    monkeypatch.setattr(envkit.registry.tls, "CERTS_D", root)
    return root


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("envkit",))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory):
    """A client certificate from another CA: one the registry does not accept."""
    return make_pki(tmp_path_factory.mktemp("stranger"), clients=("envkit",)).clients["envkit"]


def place(directory: Path, files: dict[str, Path | bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_bytes(content.read_bytes() if isinstance(content, Path) else content)
    return directory


def fail_fast(op, registry: str | None = None, retries: int = 3):
    """Run ``op`` as publish and remote do; return (the error, the waits between attempts)."""
    waits: list[float] = []
    with pytest.raises(EngineError) as failed:
        _retrying(op, retries=retries, backoff=1.0, sleep=waits.append, registry=registry,
                  fail=lambda f, n: EngineError(f"could not read ({n} attempts): {f.message}", hint="is it up?"))
    return failed.value, waits


# --- pairing, as the engine pairs --------------------------------------------------------------------

def test_each_cert_is_paired_with_the_key_of_the_same_name_in_name_order(certs_d):
    d = place(certs_d / REG, {"ca.crt": b"x", "b.cert": b"x", "b.key": b"x", "a.cert": b"x", "a.key": b"x",
                              "README": b"x"})
    assert client_pairs(REG) == [ClientPair(d / "a.cert", d / "a.key"), ClientPair(d / "b.cert", d / "b.key")]
    assert engine_cas(REG) == [d / "ca.crt"]  # a .crt is a CA, never a client certificate
    assert client_pairs("other.example:443") == [] and engine_cas("other.example:443") == []


@pytest.mark.parametrize("files", [("client.cert", "ca.crt"), ("client.key", "ca.crt"), ("client.key", "client.crt")])
def test_a_half_without_the_other_fails_naming_both_paths(certs_d, files):
    d = place(certs_d / REG, {name: b"x" for name in files})
    for call in (lambda: client_pairs(REG), lambda: open_session(REG, REG, insecure=False, timeout=5, session=None)):
        with pytest.raises(EngineError) as err:
            call()
        assert str(d / "client.cert") in err.value.message and str(d / "client.key") in err.value.message
        assert f"registry {REG}" in err.value.message
        assert str(d / "client.cert") in err.value.hint and ".crt" in err.value.hint


def test_a_pair_that_does_not_match_or_an_encrypted_key_is_refused_before_any_call(certs_d, pki, stranger):
    cert, key = pki.clients["envkit"]
    d = place(certs_d / REG, {"client.cert": cert, "client.key": stranger[1]})
    with pytest.raises(EngineError) as err:
        open_session(REG, REG, insecure=False, timeout=5, session=None)
    assert f"cannot use client certificate {d / 'client.cert'} with key {d / 'client.key'}" in err.value.message
    assert "KEY_VALUES_MISMATCH" in err.value.message

    from cryptography.hazmat.primitives import serialization
    private = serialization.load_pem_private_key(key.read_bytes(), None)
    place(d, {"client.key": private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.BestAvailableEncryption(b"secret"))})
    with pytest.raises(EngineError) as err:  # not a password prompt
        open_session(REG, REG, insecure=False, timeout=5, session=None)
    assert f"client key {d / 'client.key'} is encrypted" in err.value.message and "openssl pkey" in err.value.hint


# --- envkit's own client against a registry that requires a client certificate ----------------------

class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


class _ResetAfterHandshake(_NotFound):
    def do_GET(self):  # noqa: N802
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()


def _serve(pki, handler=_NotFound, *, require_client: bool = True):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3  # its refusal of a client is the "certificate required" alert
    context.load_cert_chain(pki.cert, pki.key)
    if require_client:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki.ca)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.handle_error = lambda *a: None  # handshake refusals: expected
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


def registry_client(host: str, *, insecure: bool = False, timeout: float = 10.0) -> _RegistryHTTP:
    """envkit's client for ``host``/team/img; ``insecure``: as the engine treats loopback (https is probed first)."""
    reg = _RegistryHTTP.__new__(_RegistryHTTP)
    reg._open(host, insecure, timeout, None)
    reg._aim("team/img", "repository:team/img:pull")
    return reg


@pytest.fixture
def mtls(pki, certs_d):
    """A TLS 1.3 server on loopback that requires a client certificate from ``pki``'s CA; its CA trusted in certs.d."""
    server = _serve(pki)
    host = f"127.0.0.1:{server.server_address[1]}"
    place(certs_d / host, {"ca.crt": pki.ca})
    yield host, certs_d / host
    server.shutdown()


@pytest.mark.parametrize("insecure", [False, True])
def test_without_a_client_certificate_envkit_fails_at_once_naming_the_files_that_fix_it(mtls, insecure):
    host, directory = mtls
    reg = registry_client(host, insecure=insecure)
    assert reg.scheme == "https"  # not the http fallback: TLS is there, it wants a certificate
    err, waits = fail_fast(lambda: reg.get_manifest("v1"))
    assert isinstance(err, RegistryAuthError) and waits == [] and "(1 attempts)" in err.message
    assert f"registry {host} requires a TLS client certificate and envkit presented none" in err.message
    assert "'certificate required'" in err.message
    assert f"{directory}/client.cert and {directory}/client.key" in err.hint and "docker login" not in err.hint


def test_with_the_pair_in_certs_d_envkit_presents_it(mtls, pki):
    host, directory = mtls
    cert, key = pki.clients["envkit"]
    place(directory, {"client.cert": cert, "client.key": key})
    assert _RegistryHTTP(None, f"{host}/team/img").get_manifest("v1") is None  # the server's 404: served
    assert registry_client(host).get_manifest("v1") is None


def test_a_client_certificate_the_registry_does_not_accept_is_named(mtls, stranger):
    host, directory = mtls
    place(directory, {"client.cert": stranger[0], "client.key": stranger[1]})
    err, waits = fail_fast(lambda: registry_client(host).get_manifest("v1"))
    assert isinstance(err, RegistryAuthError) and waits == []
    assert f"registry {host} refused the TLS client certificate {directory / 'client.cert'}" in err.message
    assert "the alert" in err.message and f"{directory}/client.cert" in err.hint


def test_a_reset_during_the_handshake_is_a_refused_client_a_reset_after_it_is_transient(pki, certs_d):
    listener = socket.create_server(("127.0.0.1", 0))
    host = f"127.0.0.1:{listener.getsockname()[1]}"

    def reset_in_handshake():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(4096)  # the ClientHello
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    threading.Thread(target=reset_in_handshake, daemon=True).start()
    try:
        err, waits = fail_fast(lambda: registry_client(host).get_manifest("v1"))
    finally:
        listener.close()
    assert isinstance(err, RegistryAuthError) and waits == []
    assert "closed the connection during the TLS handshake" in err.message and "client.cert" in err.hint

    server = _serve(pki, _ResetAfterHandshake, require_client=False)
    host = f"127.0.0.1:{server.server_address[1]}"
    place(certs_d / host, {"ca.crt": pki.ca})
    reg = registry_client(host, timeout=0.5)  # the probe waits as long for the registry's verdict
    try:
        err, waits = fail_fast(lambda: reg.get_manifest("v1"), retries=2)
    finally:
        server.shutdown()
    assert not isinstance(err, RegistryAuthError) and waits == [1.0, 2.0]  # retried: not about TLS


# --- what the engine says ----------------------------------------------------------------------------

NONE_PRESENTED = f"registry {REG} requires a TLS client certificate and the engine presented none"


@pytest.mark.parametrize("message", [
    f'Get "https://{REG}/v2/": remote error: tls: bad certificate',
    f'Head "https://{REG}/v2/team/img/blobs/sha256:ab": remote error: tls: certificate required',
])
def test_the_engines_refused_client_fails_at_once_in_the_stream_and_as_an_api_error(certs_d, message):
    def in_stream():
        return _stream([{"status": "The push refers to repository"}, {"errorDetail": {"message": message}}],
                       None, None, REG)

    def as_api_error():  # a pull's refusal comes as the API call's 500, before any stream
        response = requests.Response()
        response.status_code = 500
        refusal = docker.errors.APIError("500 Server Error", response=response, explanation=message)

        class Api:  # docker-py's pull, refused by the engine
            def pull(self, *args, **kwargs):
                raise refusal

        return list(docker_registry.pull(SimpleNamespace(api=Api()), f"{REG}/team/img", "sha256:ab", None))

    for op in (in_stream, as_api_error):
        err, waits = fail_fast(op, registry=REG)
        assert isinstance(err, RegistryAuthError) and waits == []
        assert NONE_PRESENTED in err.message and message in err.message
        assert f"{certs_d / REG}/client.cert and {certs_d / REG}/client.key" in err.hint


def test_the_engines_words_classified(certs_d, pki):
    d = certs_d / REG
    refused = engine_tls_failure(REG, "remote error: tls: bad certificate")
    assert isinstance(refused, ClientCertFailure) and NONE_PRESENTED in refused.message
    place(d, {"client.cert": b"x", "client.key": b"x"})
    refused = engine_tls_failure(REG, "remote error: tls: bad certificate")
    assert f"refused the TLS client certificate {d / 'client.cert'} that the engine presented" in refused.message

    for message in ("missing key client.key for client certificate client.cert. Note that CA certificates should "
                    "use the extension .crt", "Missing client certificate client.cert for key client.key"):
        unpaired = engine_tls_failure(REG, message)
        assert isinstance(unpaired, TrustFailure) and not isinstance(unpaired, ClientCertFailure)
        assert str(d / "client.cert") in unpaired.hint and str(d / "client.key") in unpaired.hint

    untrusted = engine_tls_failure(REG, 'Get "https://reg/v2/": x509: certificate signed by unknown authority')
    assert isinstance(untrusted, TrustFailure) and "ca.crt" in untrusted.hint
    for other in ("unauthorized: authentication required", "manifest unknown", "connection refused",
                  "a bad certificate description"):  # no TLS in it: not about the client certificate
        assert engine_tls_failure(REG, other) is None


def test_an_engine_reset_is_asked_about_once_and_named_only_when_the_registry_refuses_the_client(mtls, pki, certs_d):
    """The engine reports a TLS 1.3 refusal it lost to a reset only as the reset: envkit's handshake-and-read
    asks the registry; a registry that accepts the client (the probe times out) leaves it transient."""
    host, directory = mtls
    cut = f'Put "https://{host}/v2/team/img/blobs/uploads/": read tcp 127.0.0.1:5->{host}: read: connection reset by peer'
    refused = engine_tls_failure(host, cut)
    assert isinstance(refused, ClientCertFailure)
    assert f"registry {host} requires a TLS client certificate and the engine presented none" in refused.message
    assert "connection reset by peer" in refused.message and f"{directory}/client.cert" in refused.hint
    cert, key = pki.clients["envkit"]
    place(directory, {"client.cert": cert, "client.key": key})
    assert engine_tls_failure(host, cut) is None  # accepted now: the reset was something else, retried
    server = _serve(pki, require_client=False)
    try:
        assert engine_tls_failure(f"127.0.0.1:{server.server_address[1]}", cut) is None
    finally:
        server.shutdown()


class _NginxNoCert(_NotFound):
    """nginx with `ssl_verify_client on` and no certificate presented: the handshake passes, the answer is a 400 page."""

    def do_GET(self):  # noqa: N802
        body = (b"<html>\r\n<head><title>400 No required SSL certificate was sent</title></head>\r\n<body>\r\n"
                b"<center><h1>400 Bad Request</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
        self.send_response(400)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_nginxs_400_for_a_missing_client_certificate_is_named_as_one(pki, certs_d):
    server = _serve(pki, _NginxNoCert, require_client=False)
    host = f"127.0.0.1:{server.server_address[1]}"
    place(certs_d / host, {"ca.crt": pki.ca})
    try:
        err, waits = fail_fast(lambda: registry_client(host).get_manifest("v1"))
    finally:
        server.shutdown()
    assert isinstance(err, RegistryAuthError) and waits == []
    assert f"registry {host} requires a TLS client certificate and envkit presented none" in err.message
    assert "'No required SSL certificate was sent'" in err.message and f"{certs_d / host}/client.cert" in err.hint
    engine = engine_tls_failure(host, 'error parsing HTTP 400 response body: invalid character \'<\' looking for '
                                      'beginning of value: "<html>\\r\\n<head><title>400 No required SSL certificate '
                                      'was sent</title></head>"')
    assert isinstance(engine, ClientCertFailure) and "the engine presented none" in engine.message
