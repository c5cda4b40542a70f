"""A throwaway PKI and a Docker token server, for registries that require authentication.

``make_pki(dir)`` writes a CA, a server certificate for 127.0.0.1 / ::1 / localhost signed by
it (the registry's and the token server's TLS), and a separate token-signing certificate (the
registry's ``auth.token.rootcertbundle``); ``clients=("envkit",)`` adds TLS client certificates
from the same CA (``<name>.cert`` + ``<name>.key``, as certs.d names them), for mutual TLS.

``TokenServer`` implements the token endpoint of the distribution token authentication spec
(docs/spec/auth/token.md and jwt.md): ``GET /token?service=...&scope=...`` with optional Basic
credentials. Wrong credentials get 401; no credentials are an anonymous client; the token grants
the intersection of the requested scopes and the account's rights (a subset is no error). The
token is a JWT (RS256) whose ``x5c`` header carries the signing certificate, which the registry
verifies against its root bundle; claims ``iss``, ``sub``, ``aud`` (the service), ``exp``,
``nbf``, ``iat``, ``jti`` and ``access``. Every request is recorded (account, scopes) so tests
can see what a client asked for and how often.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import secrets
import ssl
import threading
import time
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE = "envkit-test-registry"
ISSUER = "envkit-test-token-issuer"


# --- a throwaway PKI -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate clients trust (PEM)
    cert: Path  # the TLS server certificate for 127.0.0.1, ::1, localhost
    key: Path
    signer_cert: Path  # the token-signing certificate (the registry's rootcertbundle)
    signer_key: Path
    clients: dict[str, tuple[Path, Path]] = field(default_factory=dict)  # name -> (client cert, its key)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_pki(directory: Path, addresses: tuple[str, ...] = (), clients: tuple[str, ...] = ()) -> Pki:
    """``addresses``: more IP addresses the server certificate names, besides the loopback ones;
    ``clients``: names of TLS client certificates to issue (CN = the name, extended key usage clientAuth)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=2)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("envkit test CA")).issuer_name(_name("envkit test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server_key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    server = (x509.CertificateBuilder().subject_name(_name("localhost")).issuer_name(ca.subject)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(later)
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    signer_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signer = (x509.CertificateBuilder().subject_name(_name("envkit test token signer"))
              .issuer_name(_name("envkit test token signer")).public_key(signer_key.public_key())
              .serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(later)
              .sign(signer_key, hashes.SHA256()))
    pki = Pki(directory / "ca.crt", directory / "server.crt", directory / "server.key",
              directory / "token-signer.crt", directory / "token-signer.key",
              {name: (directory / f"{name}.cert", directory / f"{name}.key") for name in clients})
    for name, (cert_path, key_path) in pki.clients.items():
        client_key = ec.generate_private_key(ec.SECP256R1())
        client = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca.subject)
                  .public_key(client_key.public_key()).serial_number(x509.random_serial_number())
                  .not_valid_before(now).not_valid_after(later)
                  .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                  .sign(ca_key, hashes.SHA256()))
        cert_path.write_bytes(client.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, client_key)
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.key, server_key)
    pki.signer_cert.write_bytes(signer.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.signer_key, signer_key)
    return pki


# --- accounts and what they may do ------------------------------------------------------------------

@dataclass(frozen=True)
class Account:
    password: str
    rights: dict[str, tuple[str, ...]]  # "repository:<glob>" or "registry:catalog" -> actions ("*" = all)
    refresh_token: str = ""  # an OAuth2 refresh token (what `docker login` keeps as an identity token)

    def granted(self, kind: str, name: str, actions: list[str]) -> list[str]:
        allowed: set[str] = set()
        for pattern, acts in self.rights.items():
            pkind, _, pname = pattern.partition(":")
            if pkind == kind and fnmatchcase(name, pname):
                allowed |= set(acts)
        return [a for a in actions if a in allowed or "*" in allowed]


ANONYMOUS = Account("", {})


def parse_scope(scope: str) -> tuple[str, str, list[str]] | None:
    """``repository:team/img:pull,push`` -> (repository, team/img, [pull, push]) (the name may hold a port's colon)."""
    kind, _, rest = scope.partition(":")
    name, _, actions = rest.rpartition(":")
    if not kind or not name or not actions:
        return None
    return kind, name, [a for a in actions.split(",") if a]


# --- the token server ------------------------------------------------------------------------------

@dataclass
class TokenServer:
    pki: Pki
    accounts: dict[str, Account]
    ttl: int = 300
    requests: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (account, scopes) per token issued
    refused: list[str] = field(default_factory=list)  # accounts refused (wrong credentials)

    def __post_init__(self) -> None:
        self._key = serialization.load_pem_private_key(self.pki.signer_key.read_bytes(), None)
        der = x509.load_pem_x509_certificate(self.pki.signer_cert.read_bytes()).public_bytes(serialization.Encoding.DER)
        self._x5c = [base64.b64encode(der).decode()]
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def realm(self) -> str:
        assert self._httpd is not None
        return f"https://127.0.0.1:{self._httpd.server_address[1]}/token"

    def mint(self, subject: str, access: list[dict]) -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + self.ttl, "nbf": now - 5, "iat": now,
                  "jti": secrets.token_hex(16), "access": access}
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"x5c": self._x5c})

    def answer_oauth(self, form: dict[str, list[str]]) -> tuple[int, dict]:
        """(HTTP status, JSON body) for ``POST /token`` (docs/spec/auth/oauth.md): a refresh_token or password grant."""
        grant = form.get("grant_type", [""])[0]
        if grant == "refresh_token":
            given = form.get("refresh_token", [""])[0]
            name = next((n for n, a in self.accounts.items() if a.refresh_token and
                         secrets.compare_digest(a.refresh_token, given)), None)
        elif grant == "password":
            name = form.get("username", [""])[0]
            known = self.accounts.get(name)
            if known is None or not secrets.compare_digest(known.password, form.get("password", [""])[0]):
                name = None
        else:
            return 400, {"error": "unsupported_grant_type"}
        if name is None:
            self.refused.append(grant)
            return 401, {"error": "invalid_grant"}
        query = {"service": form.get("service", [SERVICE]), "scope": form.get("scope", [])}
        status, body = self._grant(name, self.accounts[name], query)
        return status, {k: v for k, v in body.items() if k != "token"}

    def answer(self, authorization: str | None, query: dict[str, list[str]]) -> tuple[int, dict]:
        """(HTTP status, JSON body) for one ``GET /token`` request."""
        name = ""
        account = ANONYMOUS
        if authorization:
            kind, _, value = authorization.partition(" ")
            try:
                name, _, password = base64.b64decode(value).decode().partition(":")
            except ValueError:
                kind = ""
            known = self.accounts.get(name)
            if kind.lower() != "basic" or known is None or not secrets.compare_digest(known.password, password):
                self.refused.append(name)
                return 401, {"errors": [{"code": "UNAUTHORIZED", "message": "incorrect username or password"}]}
            account = known
        return self._grant(name, account, query)

    def _grant(self, name: str, account: Account, query: dict[str, list[str]]) -> tuple[int, dict]:
        if query.get("service", [SERVICE])[0] != SERVICE:
            return 400, {"errors": [{"code": "DENIED", "message": "unknown service"}]}
        scopes = [s for value in query.get("scope", []) for s in value.split(" ") if s]
        access = []
        for scope in scopes:
            parsed = parse_scope(scope)
            if parsed is None:
                return 400, {"errors": [{"code": "DENIED", "message": f"bad scope {scope!r}"}]}
            kind, target, actions = parsed
            granted = account.granted(kind, target, actions)
            if granted:
                access.append({"type": kind, "name": target, "actions": granted})
        self.requests.append((name, tuple(scopes)))
        token = self.mint(name, access)
        issued = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return 200, {"token": token, "access_token": token, "expires_in": self.ttl, "issued_at": issued}

    def start(self) -> "TokenServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                url = urlsplit(self.path)
                if url.path != "/token":
                    self.reply(404, {"errors": [{"code": "NOT_FOUND"}]})
                else:
                    self.reply(*server.answer(self.headers.get("Authorization"), parse_qs(url.query)))

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                if urlsplit(self.path).path != "/token":
                    self.reply(404, {"errors": [{"code": "NOT_FOUND"}]})
                else:
                    self.reply(*server.answer_oauth(form))

            def reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Basic realm="envkit test token service"')
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # quiet
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.pki.cert, self.pki.key)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        httpd.daemon_threads = True
        self._httpd = httpd
        threading.Thread(target=httpd.serve_forever, name="envkit-token-server", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
