"""The registry's HTTP API (the distribution API), and how envkit treats a registry's failures.

``_RegistryHTTP`` is just enough of the API for ``publish`` (read a tag's manifest, re-point a
tag at exactly that manifest, upload a certificate artifact) and ``remote`` (manifests, blobs,
a repository's tags and the registry's catalog, read without pulling).

Credentials, the scheme (https, or the engine's fallbacks for an insecure registry), trust
(the engine's ``/etc/docker/certs.d``) and answering 401 challenges are ``auth``'s.

Failures are ``_Failure``s, transient (connection errors, 5xx and 429 answers) or permanent
(denied, unknown image, a bad manifest, an untrusted certificate, a registry refusing the TLS
client certificate or its absence); ``_retrying`` retries the transient ones with
exponential backoff and turns the last one into the caller's ``EngineError`` (a
``RegistryAuthError`` when the registry refused or lacked credentials, a client certificate
included).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import socket
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypedDict, TypeVar

import requests
import urllib3

from ..engine.protocol import EngineCallError
from ..errors import EngineError
from .auth import (  # noqa: F401  (publish and remote import them from here)
    PASSWORD_ENV,
    USER_ENV,
    Authenticator,
    AuthFailure,
    RegistryAuthError,
    TrustFailure,
    client_refusal,
    engine_tls_failure,
    open_session,
    tls_refusal,
)
from .auth import Failure as _Failure
from .remote_parse import split_repository
from .tls import PROXY_REFUSED, UNTRUSTED  # noqa: F401  (publish and remote import UNTRUSTED from here)

if TYPE_CHECKING:
    from ..engine.protocol import Engine

class DeleteUnsupported(_Failure):
    """Permanent: the registry does not delete manifests (distribution's ``storage.delete.enabled`` is off)."""

    def __init__(self, message: str):
        super().__init__(message, False)


MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)

# Engine messages that mean "try again later" vs "this will never work".
_TRANSIENT = re.compile(
    r"connection refused|connection reset|broken pipe|i/o timeout|timed? ?out|\bEOF\b|TLS handshake|"
    r"no route to host|network is unreachable|temporar|try again|unexpected HTTP status: 5\d\d|"
    r"\b50[0234]\b|service unavailable|bad gateway|gateway time-?out|internal server error|"
    r"too ?many ?requests|\b429\b",
    re.IGNORECASE,
)
_PERMANENT = re.compile(
    r"unauthori[sz]ed|authentication required|denied|forbidden|does not exist locally|no such image|"
    r"manifest unknown|name unknown|manifest invalid|blob unknown|invalid reference|repository name",
    re.IGNORECASE,
)

Sleep = Callable[[float], None]
T = TypeVar("T")


class Retries(TypedDict):
    """How ``_retrying`` retries: ``retries`` times, waiting ``backoff`` * 2**n seconds with ``sleep``."""

    retries: int
    backoff: float
    sleep: Sleep


# --- names, credentials, http or https -------------------------------------------------------------


def _insecure(engine: Engine | None, registry: str) -> bool:
    """Does the engine treat this registry as insecure (its insecure-registries setting)?

    For an insecure registry the engine tries https without verifying, then plain http
    (``registry.auth.open_session`` does the same). Without an engine (``engine`` None: a
    researcher reading the registry from a login node), the engine's default applies:
    127.0.0.0/8 only.
    """
    cfg = engine.registry_config() if engine is not None else {}
    index = (cfg.get("IndexConfigs") or {}).get(registry)
    if index is not None:
        return not index.get("Secure", True)
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    host = host.strip("[]")
    try:
        addrs = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            addrs = [ipaddress.ip_address(a[4][0]) for a in socket.getaddrinfo(host, None)]
        except (OSError, ValueError):
            return False
    cidrs = [ipaddress.ip_network(c, strict=False) for c in cfg.get("InsecureRegistryCIDRs") or ["127.0.0.0/8"]]
    return any(a in net for a in addrs for net in cidrs if a.version == net.version)


# --- failures and retries ----------------------------------------------------------------------------

def _classify(message: str) -> bool:
    """True when an engine or registry message describes a transient failure."""
    return bool(_TRANSIENT.search(message)) and not _PERMANENT.search(message)


def _from_exception(exc: Exception, registry: str | None = None) -> _Failure:
    if isinstance(exc, _Failure):
        return exc
    if isinstance(exc, EngineCallError):  # the engine refused its push or pull
        message = exc.explanation
        tls = engine_tls_failure(registry, message) if registry else None  # the engine's TLS to ``registry``
        if tls is not None:
            return tls
        code = exc.status_code or 0
        return _Failure(message, code >= 500 and not _PERMANENT.search(message) or code == 429)
    if isinstance(exc, (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)):
        return _Failure(str(exc) or type(exc).__name__, True)
    raise exc


def _retrying(op: Callable[[], T], *, retries: int, backoff: float, sleep: Sleep,
              fail: Callable[[_Failure, int], EngineError], registry: str | None = None) -> T:
    """Run ``op``; retry transient failures ``retries`` times, waiting backoff * 2**n seconds.
    ``registry``: the one an engine call in ``op`` talks to (its TLS refusals are then permanent)."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return op()
        except Exception as exc:  # classified below; anything unexpected propagates
            failure = _from_exception(exc, registry)
        if not failure.retryable or attempt > retries:
            error = fail(failure, attempt)
            if isinstance(failure, AuthFailure):
                raise RegistryAuthError(error.message, hint=failure.hint) from None
            if isinstance(failure, TrustFailure):
                raise EngineError(error.message, hint=failure.hint) from None
            raise error from None
        sleep(backoff * (2 ** (attempt - 1)))


# --- the registry's HTTP API (manifests only) --------------------------------------------------------

@dataclass(frozen=True)
class _Manifest:
    digest: str
    media_type: str
    raw: bytes

    @property
    def config_digest(self) -> str | None:
        try:
            return (json.loads(self.raw).get("config") or {}).get("digest")
        except ValueError:
            return None

    @property
    def blobs(self) -> list[tuple[str, int]] | None:
        """An image manifest's layers: each blob's digest and compressed size, lowest first (None: an index, or
        unreadable)."""
        try:
            layers = json.loads(self.raw).get("layers")
            return [(str(x["digest"]), int(x["size"])) for x in layers] if isinstance(layers, list) else None
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


class _RegistryHTTP:
    """Just enough of the distribution API, with basic or token auth: GET and PUT manifests,
    GET and PUT blobs, a repository's tags and the registry's catalog (both paged).

    Clients made by ``repository()`` share the first one's session, scheme and authorization
    (the Basic header, the tokens per scope)."""

    def __init__(self, engine: Engine | None, registry_repo: str, timeout: float = 30.0, *,
                 actions: str = "pull,push", session: requests.Session | None = None) -> None:
        registry, path = split_repository(registry_repo)
        self._open(registry, _insecure(engine, registry), timeout, session)
        self._aim(path, f"repository:{path}:{actions}")

    def _open(self, registry: str, insecure: bool, timeout: float, session: requests.Session | None) -> None:
        self.registry = registry
        self.host = "registry-1.docker.io" if registry in ("docker.io", "index.docker.io") else registry
        self.timeout = timeout
        self.session, self.scheme = open_session(registry, self.host, insecure, timeout, session)
        self.root = f"{self.scheme}://{self.host}/v2"
        self.auth = Authenticator(registry, self.session, timeout)

    def _aim(self, path: str, scope: str) -> None:
        self.path = path
        self.base = f"{self.root}/{path}" if path else self.root
        self.scope = scope

    @classmethod
    def at(cls, engine: Engine | None, registry: str, timeout: float = 30.0, *,
           session: requests.Session | None = None) -> "_RegistryHTTP":
        """A client for the whole registry (its catalog); ``repository`` gives one per repository."""
        self = cls.__new__(cls)
        self._open(registry, _insecure(engine, registry), timeout, session)
        self._aim("", "registry:catalog:*")
        return self

    def repository(self, path: str, *, actions: str = "pull") -> "_RegistryHTTP":
        """The same registry, session, scheme and authorization, for one repository (read-only by default)."""
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._aim(path, f"repository:{path}:{actions}")
        return other

    def _request(self, method: str, url: str, headers: dict, **kw: Any) -> requests.Response:
        with warnings.catch_warnings():  # an insecure registry's unverified https, as the engine does it
            warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
            try:
                return self.session.request(method, url, headers=headers, timeout=self.timeout, **kw)
            except requests.ConnectionError as exc:  # SSLError included
                if isinstance(exc, requests.exceptions.SSLError) and UNTRUSTED.search(str(exc)):
                    raise TrustFailure(f"{url.split('?', 1)[0]}: its TLS certificate is not trusted "
                                       f"(certificate verify failed)", self.registry) from None
                refused = tls_refusal(self.registry, exc, self.host, self.timeout)  # refused client: not transient
                if refused is not None:
                    raise refused from None
                raise
            except (requests.Timeout, requests.exceptions.ChunkedEncodingError):
                raise  # transient (``_from_exception``)
            except (requests.RequestException, urllib3.exceptions.HTTPError) as exc:
                # not a connection problem and never one a retry fixes: a URL urllib3 cannot parse (a DNS label
                # over 63 characters), a redirect loop, a malformed header. The registry's failure, named as
                # such; left alone it would reach the CLI as a requests/urllib3 error, "the engine stopped
                # answering".
                reason = str(exc.args[0] if exc.args else exc)[:300] or type(exc).__name__
                raise _Failure(f"{method} {url.split('?', 1)[0]}: {type(exc).__name__}: {reason}", False) from None

    def _send(self, method: str, url: str, **kw: Any) -> requests.Response:
        """One call, answering up to two 401 challenges (a token for new scopes, then a refusal is final)."""
        headers = dict(kw.pop("headers", {}))
        sent = self.auth.header(self.scope)
        r = self._request(method, url, {**headers, **sent}, **kw)
        refused = PROXY_REFUSED.search(r.text[:2000]) if r.status_code == 400 else None
        if refused:  # nginx's ssl_verify_client, over HTTP
            title = refused.group(0)
            raise client_refusal(self.registry, f"HTTP 400 {title!r} from {url.split('?', 1)[0]}")
        for _ in range(2):
            if r.status_code != 401:
                return r
            sent = self.auth.answer(r.headers.get("WWW-Authenticate", ""), self.scope, sent)
            r = self._request(method, url, {**headers, **sent}, **kw)
        if r.status_code == 401:
            raise self.auth.denied((self.scope,))
        return r

    @staticmethod
    def _raise_for(r: requests.Response, what: str) -> None:
        if r.status_code < 400:
            return
        text = r.text.strip().replace("\n", " ")[:300]
        transient = r.status_code >= 500 or r.status_code == 429
        raise _Failure(f"{what}: HTTP {r.status_code} {r.reason}: {text}", transient)

    def get_manifest(self, reference: str) -> _Manifest | None:
        r = self._send("GET", f"{self.base}/manifests/{reference}", headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if r.status_code == 404:
            return None
        self._raise_for(r, f"reading {self.registry}/{self.path}:{reference}")
        digest = r.headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(r.content).hexdigest()
        media_type = (r.headers.get("Content-Type") or "").split(";")[0].strip()
        if media_type not in MANIFEST_TYPES:
            try:
                media_type = json.loads(r.content).get("mediaType") or MANIFEST_TYPES[0]
            except (ValueError, AttributeError):
                raise _Failure(f"{self.registry}/{self.path}:{reference} is not a JSON manifest", False) from None
        return _Manifest(digest, media_type, r.content)

    def put_blob(self, data: bytes) -> str:
        """Upload ``data`` as a blob (monolithic upload), unless the registry has it already."""
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self._send("HEAD", f"{self.base}/blobs/{digest}").status_code == 200:
            return digest
        r = self._send("POST", f"{self.base}/blobs/uploads/")
        self._raise_for(r, f"starting a blob upload to {self.registry}/{self.path}")
        location = requests.compat.urljoin(self.base + "/", r.headers["Location"])
        sep = "&" if "?" in location else "?"
        r = self._send("PUT", f"{location}{sep}digest={digest}", data=data,
                       headers={"Content-Type": "application/octet-stream"})
        self._raise_for(r, f"uploading a blob to {self.registry}/{self.path}")
        return digest

    def get_blob(self, digest: str) -> bytes:
        """A blob's bytes, checked against its digest (a missing blob is a permanent failure)."""
        r = self._send("GET", f"{self.base}/blobs/{digest}")
        self._raise_for(r, f"reading blob {digest} of {self.registry}/{self.path}")
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm == "sha256" and hashlib.sha256(r.content).hexdigest() != hexdigest:
            raise _Failure(f"blob {digest} of {self.registry}/{self.path} does not match its digest", False)
        return r.content

    def list_tags(self) -> list[str] | None:
        """Every tag of the repository (all pages), or None when the registry has no such repository."""
        return self._paged(f"{self.base}/tags/list", "tags", f"listing the tags of {self.registry}/{self.path}")

    def catalog(self) -> list[str] | None:
        """Every repository in the registry (all pages of ``/v2/_catalog``); None when it answers 404: no catalog
        endpoint (hosted registries), or no registry at all (``not_a_registry`` tells which)."""
        return self._paged(f"{self.root}/_catalog", "repositories", f"listing the repositories of {self.registry}")

    def not_a_registry(self) -> str | None:
        """None when ``GET /v2/`` answers as the distribution API's base does (the ``Docker-Distribution-API-Version:
        registry/2.0`` header, or 200 with a JSON object, or 401 with a challenge); else what it answered."""
        r = self._request("GET", f"{self.root}/", {})
        if r.status_code >= 500 or r.status_code == 429:
            self._raise_for(r, f"asking {self.root}/ whether it is a registry")
        if (r.headers.get("Docker-Distribution-API-Version") or "").startswith("registry/2"):
            return None
        if r.status_code == 401 and r.headers.get("WWW-Authenticate"):
            return None
        if r.status_code == 200:
            try:
                if isinstance(r.json(), dict):
                    return None
            except ValueError:
                pass
        kind = (r.headers.get("Content-Type") or "no content type").split(";")[0]
        server = f", server {r.headers['Server']!r}" if r.headers.get("Server") else ""
        return (f"GET {self.root}/ answered HTTP {r.status_code} {r.reason} ({kind}{server}) without the "
                f"Docker-Distribution-API-Version header")

    def _paged(self, url: str, key: str, what: str, page: int = 1000) -> list[str] | None:
        found: list[str] = []
        params: dict | None = {"n": page}
        while url:
            r = self._send("GET", url, params=params)
            if r.status_code == 404:
                return None
            self._raise_for(r, what)
            try:
                found += [str(v) for v in (r.json().get(key) or [])]
            except (ValueError, AttributeError, TypeError):
                raise _Failure(f"{what}: the answer is not the JSON the distribution API defines", False) from None
            nxt = r.links.get("next", {}).get("url")
            url, params = (requests.compat.urljoin(url, nxt), None) if nxt else ("", None)
        return found

    def delete_manifest(self, digest: str) -> bool:
        """``DELETE /v2/<repo>/manifests/<digest>`` (every tag on it goes too): True when deleted, False when it
        was already gone; ``DeleteUnsupported`` when the registry has deletion switched off (HTTP 405)."""
        r = self._send("DELETE", f"{self.base}/manifests/{digest}")
        if r.status_code == 404:
            return False
        if r.status_code == 405:
            raise DeleteUnsupported(f"HTTP 405 {r.text.strip()[:200]}")
        self._raise_for(r, f"deleting {self.registry}/{self.path}@{digest}")
        return True

    def put_manifest(self, tag: str, manifest: _Manifest) -> str:
        r = self._send("PUT", f"{self.base}/manifests/{tag}", data=manifest.raw,
                       headers={"Content-Type": manifest.media_type})
        self._raise_for(r, f"tagging {self.registry}/{self.path}:{tag}")
        return r.headers.get("Docker-Content-Digest") or manifest.digest
