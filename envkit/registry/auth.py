"""Talking to a registry that requires authentication: whose credentials, over which scheme, and
how a 401 challenge is answered (basic, or a bearer token from the registry's token service).

Credentials, in this order (never from a spec):
  1. ``ENVKIT_REGISTRY_USER`` + ``ENVKIT_REGISTRY_PASSWORD`` (both, or neither);
  2. what ``docker login REGISTRY`` stored: ``$DOCKER_CONFIG/config.json`` (default
     ``~/.docker/config.json``), its ``auths`` entry or the credential helper it names
     (``credHelpers`` / ``credsStore``); an identity token (an OAuth2 refresh token) is used
     as such with a token service.

Scheme and trust follow the engine: https, trusting the system's CAs plus every ``*.crt`` in
``/etc/docker/certs.d/<host:port>/`` and presenting the client certificate paired there
(``NAME.cert`` + ``NAME.key``, for registries that require mutual TLS; ``tls`` reads
that directory as the engine does), for the registry and its token service, as the engine
does; ``REQUESTS_CA_BUNDLE`` adds more CAs. For a registry the
engine calls insecure (its insecure-registries setting; without an engine, 127.0.0.0/8), the
engine's fallbacks: https unverified when the certificate does not verify, then plain http.

Challenges (``WWW-Authenticate``) are parsed as RFC 7235 lists: ``Basic realm="..."``, or
``Bearer realm="...",service="...",scope="repository:team/img:pull,push"`` (a quoted value may
hold commas). Bearer tokens are fetched per scope set (the client's own scope plus the
challenge's), as the distribution token spec describes, and reused until they expire.

Authentication failures are ``AuthFailure``s: permanent, and turned into ``RegistryAuthError``
(which names the registry, the account and where its credentials came from, never the secret).
A registry that demands a client certificate envkit or the engine did not present, or refuses the
one presented (a TLS alert, or a connection cut that a fresh handshake shows to be one), is a
``ClientCertFailure``: an ``AuthFailure`` whose hint names the certs.d files that fix it.
"""

from __future__ import annotations

import base64
import os
import re
import time
import warnings
from dataclasses import dataclass, field

import requests
import urllib3

from ..engine.docker_registry import login_config_file, stored_login
from ..errors import EngineError
from . import tls

USER_ENV = "ENVKIT_REGISTRY_USER"
PASSWORD_ENV = "ENVKIT_REGISTRY_PASSWORD"
CLIENT_ID = "envkit"


class RegistryAuthError(EngineError):
    """The registry (or its token service) refused, or was given no, credentials."""


class Failure(Exception):
    """A failed registry call: transient (retried with backoff) or permanent (fails at once)."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class AuthFailure(Failure):
    """Permanent; ``api._retrying`` turns it into a ``RegistryAuthError`` with this hint."""

    def __init__(self, message: str, hint: str):
        super().__init__(message, False)
        self.hint = hint


class TrustFailure(Failure):
    """Permanent: the registry's TLS certificate is not trusted (by the engine, or by envkit), or the
    TLS files in certs.d cannot be used (``hint`` says how to fix them)."""

    def __init__(self, message: str, registry: str, hint: str | None = None):
        super().__init__(message, False)
        self.hint = hint or tls.trust_hint(registry)


class ClientCertFailure(AuthFailure):
    """Permanent: the registry wants a TLS client certificate that was not presented, or refused the one that was."""


def login_hint(registry: str) -> str:
    return (f"run `docker login {registry}` (or set both {USER_ENV} and {PASSWORD_ENV}) with an account that may "
            f"do this; the environment variables win over docker login")


# --- credentials -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Credentials:
    user: str  # "" for an identity token
    secret: str = field(repr=False)
    source: str  # where they came from, for messages
    identity_token: bool = False

    @property
    def who(self) -> str:
        return f"user {self.user!r}" if self.user else "an identity token"

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.user}:{self.secret}".encode()).decode()


def env_credentials() -> Credentials | None:
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if bool(user) != bool(password):
        missing = PASSWORD_ENV if user else USER_ENV
        raise EngineError(f"{missing} is not set but {USER_ENV if user else PASSWORD_ENV} is",
                          hint=f"set both {USER_ENV} and {PASSWORD_ENV}, or neither (then `docker login` is used)")
    return Credentials(user, password, f"{USER_ENV}/{PASSWORD_ENV}") if user and password else None


def docker_config_path() -> str:
    """Where `docker login` keeps credentials here: ``$DOCKER_CONFIG/config.json``, else ``~/.docker/config.json``."""
    found = login_config_file()
    if found:
        return found
    where = os.path.join(os.environ.get("DOCKER_CONFIG") or os.path.join("~", ".docker"), "config.json")
    return f"{where} (absent)"


def credentials_for(registry: str) -> Credentials | None:
    """The environment's credentials, else what `docker login` stored for ``registry``; None when neither."""
    creds = env_credentials()
    if creds:
        return creds
    path = login_config_file()
    if not path:
        return None
    try:
        helper, entry = stored_login(path, registry)
    except Exception as exc:  # a broken helper or file: say so, never fail with its text (it may echo secrets)
        raise RegistryAuthError(f"cannot read the credentials for registry {registry} from {path} "
                                f"({type(exc).__name__})", hint=login_hint(registry)) from None
    source = f"docker-credential-{helper} (named in {path})" if helper else path
    user = entry.get("username") or entry.get("Username") or ""
    password = entry.get("password") or entry.get("Password")
    token = entry.get("IdentityToken") or entry.get("identitytoken")
    if user and password:
        return Credentials(user, password, source)
    if token:
        return Credentials(user, token, source, identity_token=True)
    return None


def engine_refusal(registry: str, creds: Credentials | None, message: str) -> AuthFailure:
    """The engine's push or pull was refused (``message``: the engine's words), with ``creds`` or none."""
    who = (f"{creds.who} (credentials from {creds.source})" if creds else
           "an anonymous client (no credentials: none in the environment or from `docker login`)")
    return AuthFailure(f"registry {registry} refused {who}: {message}", hint=login_hint(registry))


# --- challenges ---------------------------------------------------------------------------------------

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PARAM = re.compile(rf'\s*({_TOKEN})\s*=\s*(?:"((?:[^"\\]|\\.)*)"|({_TOKEN}))\s*(?:,|$)')
_SCHEME = re.compile(rf"\s*,?\s*({_TOKEN})(?:\s+|$)")


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lower case
    params: dict[str, str]


def parse_challenges(header: str) -> list[Challenge]:
    """``WWW-Authenticate`` -> its challenges, in order (RFC 7235; quoted values may hold commas)."""
    found: list[Challenge] = []
    pos = 0
    while pos < len(header):
        m = _PARAM.match(header, pos) if found else None
        if m:
            value = m.group(2) if m.group(2) is not None else m.group(3)
            found[-1].params[m.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
            pos = m.end()
            continue
        m = _SCHEME.match(header, pos)
        if not m or m.end() == pos:
            break  # token68 or junk: the rest cannot be read
        found.append(Challenge(m.group(1).lower(), {}))
        pos = m.end()
    return found


# --- transport: scheme and trust ------------------------------------------------------------------

def client_refusal(registry: str, detail: str, who: str = "envkit") -> ClientCertFailure:
    """``registry`` refused ``who``'s TLS client certificate, or wanted one and got none (``detail``: what was said)."""
    try:
        pairs = tls.client_pairs(registry)
    except EngineError:
        pairs = []
    if not pairs:
        return ClientCertFailure(f"registry {registry} requires a TLS client certificate and {who} presented none "
                                 f"(no NAME.cert and NAME.key pair in {tls.certs_dir(registry)}/): {detail}",
                                 tls.client_cert_hint(registry))
    return ClientCertFailure(f"registry {registry} refused the TLS client certificate {pairs[0].cert} that {who} "
                             f"presented: {detail}",
                             f"is {pairs[0].cert} issued by a CA the registry trusts for clients, for client "
                             f"authentication, and unexpired? {tls.client_cert_hint(registry)}")


def tls_refusal(registry: str, exc: requests.RequestException, host: str | None = None,
                timeout: float = 1.5) -> ClientCertFailure | None:
    """The ``ClientCertFailure`` that ``exc`` (from envkit's own call to ``host``, default ``registry``) means: a
    TLS alert refusing the client, or a connection cut that a fresh handshake (waiting at most ``timeout`` seconds
    for the registry's verdict, ``tls.refuses_client``) shows to be one; None when it means something else."""
    alert = tls.CLIENT_REFUSED.search(str(exc)) if isinstance(exc, requests.exceptions.SSLError) else None
    if alert:
        return client_refusal(registry, f"the TLS handshake ended with the alert {tls.alert_name(alert)!r}")
    if not tls.connection_cut(exc):
        return None
    try:
        pairs = tls.client_pairs(registry)
    except EngineError:
        return None
    how = tls.refuses_client(host or registry, pairs[0] if pairs else None, min(timeout, 1.5))
    return client_refusal(registry, how) if how else None


ENGINE_CUT = re.compile(r"connection reset by peer|broken pipe|: EOF\b", re.I)  # Go's words for a cut connection


def engine_tls_failure(registry: str, message: str) -> Failure | None:
    """What the engine's words about TLS mean (an untrusted registry, unpaired client files in certs.d, a
    refused client certificate), as a permanent failure with its fix; None when they are about something else."""
    if tls.UNTRUSTED.search(message):
        return TrustFailure(f"the engine does not trust its certificate: {message}", registry)
    m = tls.UNPAIRED.search(message)
    if m:
        key, cert = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
        directory = tls.certs_dir(registry)
        return TrustFailure(f"the engine cannot use the TLS client files in {directory}: {message}", registry,
                            hint=tls.unpaired_hint(directory / cert, directory / key))
    if tls.CLIENT_REFUSED.search(message) or tls.PROXY_REFUSED.search(message):
        return client_refusal(registry, message, "the engine")
    if ENGINE_CUT.search(message):  # TLS 1.3 often loses the refusal's alert to a reset: ask the registry once
        try:
            pairs = tls.client_pairs(registry)
        except EngineError:
            return None  # unpaired files: the engine would have said so
        how = tls.refuses_client(registry, pairs[0] if pairs else None)
        return client_refusal(registry, f"{how} (the engine said: {message})", "the engine") if how else None
    return None


def open_session(registry: str, host: str, insecure: bool, timeout: float,
                 session: requests.Session | None) -> tuple[requests.Session, str]:
    """A session trusting what the engine trusts for ``registry``, and the scheme to use (``https``/``http``).

    A secure registry is https. An insecure one is probed as the engine does: https, then https
    without verification, then http (also when nothing answers: the real call then says why).
    """
    session = session or requests.Session()
    cas, pairs = tls.engine_cas(registry), tls.client_pairs(registry)
    if cas or pairs:  # for the registry and its token service, as the engine's transport for this registry does
        session.mount("https://", tls.TrustAdapter(tls.tls_context(cas, pairs[0] if pairs else None)))
    if not insecure:
        return session, "https"
    for verify in (True, False):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                session.get(f"https://{host}/v2/", timeout=min(timeout, 5.0), verify=verify)
        except urllib3.exceptions.HTTPError:
            return session, "http"  # an address urllib3 cannot even parse: the real call says why
        except requests.RequestException as exc:
            if verify and isinstance(exc, requests.exceptions.SSLError) and "CERTIFICATE_VERIFY_FAILED" in str(exc):
                continue  # a certificate we cannot verify: the engine skips verification for insecure registries
            if not tls_refusal(registry, exc, host, timeout):
                return session, "http"  # no TLS there (e.g. "wrong version number"), or nothing answers
            # else https that wants a client certificate: the real call says so
        session.verify = verify
        return session, "https"
    return session, "http"


# --- answering challenges -----------------------------------------------------------------------------

@dataclass
class Authenticator:
    """One registry's authorization state, shared by the clients of its repositories."""

    registry: str
    session: requests.Session
    timeout: float
    basic: str | None = None  # the Authorization value for a Basic registry, once challenged
    tokens: dict[tuple[str, ...], tuple[str, float]] = field(default_factory=dict)  # scopes -> (token, expiry)
    _creds: Credentials | None = None
    _loaded: bool = False

    def credentials(self) -> Credentials | None:
        if not self._loaded:
            self._creds, self._loaded = credentials_for(self.registry), True
        return self._creds

    def header(self, scope: str) -> dict[str, str]:
        """What to send before any challenge: the Basic header, or a live token covering ``scope``."""
        if self.basic:
            return {"Authorization": self.basic}
        now = time.monotonic()
        for scopes, (token, expiry) in self.tokens.items():
            if scope in scopes and expiry > now:
                return {"Authorization": f"Bearer {token}"}
        return {}

    def answer(self, header: str, scope: str, sent: dict[str, str]) -> dict[str, str]:
        """The Authorization header that answers the challenge ``header``; ``sent``: what was just refused."""
        challenges = parse_challenges(header)
        bearer = next((c for c in challenges if c.scheme == "bearer" and c.params.get("realm")), None)
        if bearer is not None:
            return self._bearer(bearer, scope, sent)
        if any(c.scheme == "basic" for c in challenges):
            return self._basic(sent)
        raise AuthFailure(f"registry {self.registry} asks for an authentication envkit does not speak "
                          f"({header[:80] or 'no WWW-Authenticate header'})",
                          hint="envkit speaks Basic and Bearer (token) authentication")

    def _basic(self, sent: dict[str, str]) -> dict[str, str]:
        creds = self.credentials()
        if creds is None:
            raise self.missing()
        if creds.identity_token:
            raise AuthFailure(f"registry {self.registry} wants a password, but the credentials from {creds.source} "
                              f"are an identity token", hint=login_hint(self.registry))
        if sent.get("Authorization") == creds.basic():
            raise self.refused(creds)
        self.basic = creds.basic()
        return {"Authorization": self.basic}

    def _bearer(self, challenge: Challenge, scope: str, sent: dict[str, str]) -> dict[str, str]:
        wanted = [s for s in (challenge.params.get("scope") or "").split(" ") if s]
        scopes = tuple(sorted({scope, *wanted}))
        cached = self.tokens.get(scopes)
        if cached and cached[1] > time.monotonic():
            if sent.get("Authorization") != f"Bearer {cached[0]}":
                return {"Authorization": f"Bearer {cached[0]}"}  # a live token for these scopes, not yet sent
            raise self.denied(scopes)  # that very token was refused: the account lacks the right
        token, expires_in = self._fetch(challenge.params["realm"], challenge.params.get("service"), scopes)
        self.tokens[scopes] = (token, time.monotonic() + max(expires_in - 5, 1))
        return {"Authorization": f"Bearer {token}"}

    def _fetch(self, realm: str, service: str | None, scopes: tuple[str, ...]) -> tuple[str, int]:
        creds = self.credentials()
        what = f"a token from {realm} (the token service of registry {self.registry})"
        try:
            if creds is not None and creds.identity_token:
                form = {"grant_type": "refresh_token", "refresh_token": creds.secret, "client_id": CLIENT_ID,
                        "scope": " ".join(scopes), **({"service": service} if service else {})}
                r = self.session.post(realm, data=form, timeout=self.timeout)
            else:
                query = [("scope", s) for s in scopes] + ([("service", service)] if service else [])
                headers = {"Authorization": creds.basic()} if creds else {}
                r = self.session.get(realm, params=query, headers=headers, timeout=self.timeout)
        except (requests.ConnectionError, requests.Timeout) as exc:
            errno = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
            raise Failure(f"cannot get {what}: {errno.group(1).strip() if errno else type(exc).__name__}",
                          True) from None
        except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:  # a realm no retry will reach
            raise Failure(f"cannot get {what}: {type(exc).__name__}: {str(exc)[:200]}", False) from None
        if r.status_code in (401, 403):
            raise self.refused(creds) if creds else self.missing()
        if r.status_code >= 400:
            raise Failure(f"getting {what}: HTTP {r.status_code} {r.reason}",
                           r.status_code >= 500 or r.status_code == 429)
        try:
            body = r.json()
            token = body.get("token") or body.get("access_token")
            expires_in = int(body.get("expires_in") or 60)  # the spec's default
        except (ValueError, AttributeError, TypeError):
            token, expires_in = None, 0
        if not token:
            raise AuthFailure(f"{what} answered without a token", hint="is the realm in the registry's challenge "
                                                                       "its token service?")
        return str(token), expires_in

    # the three ways authentication fails
    def missing(self) -> AuthFailure:
        return AuthFailure(f"registry {self.registry} requires credentials and none were found "
                           f"({USER_ENV}/{PASSWORD_ENV} are not set; no `docker login` entry for {self.registry} in "
                           f"{docker_config_path()})", hint=login_hint(self.registry))

    def refused(self, creds: Credentials) -> AuthFailure:
        return AuthFailure(f"registry {self.registry} refused the credentials of {creds.who} from {creds.source} "
                           f"(wrong user or password?)", hint=login_hint(self.registry))

    def denied(self, scopes: tuple[str, ...]) -> AuthFailure:
        creds = self.credentials()
        if creds is None:
            return self.missing()
        return AuthFailure(f"registry {self.registry} denied {creds.who} (credentials from {creds.source}) "
                           f"access to {' '.join(scopes)}",
                           hint=f"ask the registry's administrators for that right; {login_hint(self.registry)}")
