"""doctor's trust and package index checks: the CA bundle resolve and build will verify TLS with (loaded as TLS
loads it, its certificates counted), and the package index (the spec's, and each variant index its images need)
asked for one small page through that bundle and the proxy variables, each failure named with its fix."""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..catalog.files import load_catalog
from ..errors import EnvkitError, SpecError
from ..index.login import check_netrc_text, keyring_logins, login_hint, login_source
from ..index.urls import JSON_ACCEPT
from ..resolve.plan import plan
from ..store.backends import redact
from ..support.ca_bundle import PEM_HINT, env_ca_bundle, env_ca_skipped, env_ca_source
from .findings import Finding

if TYPE_CHECKING:
    from ..spec import Spec


PROBE_PROJECT = "six"  # a small page (~20 kB) that every PyPI mirror holds
INDEX_TIMEOUT = 10.0  # seconds, to connect and to read
CA_HINT = "set ENVKIT_CA_BUNDLE or build.ca_bundle to your proxy's CA bundle (PEM)"


MIRROR_HINT = ("where PyTorch's own index cannot be reached, set build.variant_index_url to a mirror of it "
               "(e.g. \"https://mirror.corp.example/pytorch/whl/{variant}\")")


PROXY_HINT = ("behind a proxy, set HTTPS_PROXY (e.g. http://proxy.corp:3128) and NO_PROXY (hosts reached "
              "directly, e.g. an internal mirror)")


@dataclass(frozen=True)
class Trust:
    """The CA bundle resolve and build verify TLS with (None: the default trust store), and its finding.
    ``usable`` is False where resolve stops before asking the index (the spec's own bundle is missing)."""

    finding: Finding
    bundle: Path | None
    usable: bool = True


# --- trust and the package index --------------------------------------------------------------
def framework_indexes(spec: Spec) -> dict[str, list[str]]:
    """The indexes other than the spec's that resolve will ask (a non-default PyTorch variant's own: the spec's
    ``build.variant_index_url`` mirror, else the catalog's, e.g. download.pytorch.org/whl/cu126), each with the
    images that need it, from the catalog alone (``plan``). An image the plan refuses is left out: `envkit resolve`
    says why."""
    catalog = load_catalog()
    found: dict[str, list[str]] = {}
    for image in spec.images:
        try:
            chosen = plan(spec, catalog, only=[image.name])[0].chosen
        except EnvkitError:
            continue
        if chosen.index and chosen.index != (spec.build.index_url or ""):
            found.setdefault(chosen.index, []).append(image.name)
    return found


def trust_for(spec: Spec | None=None) -> Trust:
    """The bundle resolve and build would take (``Spec.ca_bundle_path``: the spec's, else the first of
    CA_ENV naming a file), whether it holds PEM certificates, and any variable that names nothing."""
    try:
        bundle = spec.ca_bundle_path() if spec is not None else env_ca_bundle()
    except SpecError as exc:
        where = f"{exc.location}: " if exc.location else ""
        return Trust(Finding("ca_bundle", "fail", where + exc.message,
                             f"{exc.hint}; resolve and build stop here" if exc.hint else ""), None, usable=False)
    if spec is not None and spec.build.ca_bundle:
        source = "build.ca_bundle"
        skipped = []
    else:
        found = env_ca_source()
        source = f"${found[0]}" if found else ""
        skipped = env_ca_skipped()
    if skipped:
        var, value = skipped[0]
        what = "is not a file" if Path(value).exists() else "does not exist"
        instead = f"{bundle} from {source}" if bundle else "the default trust store"
        return Trust(Finding("ca_bundle", "fail", f"${var}={value}: {what}",
                             f"resolve and build skip it and verify TLS with {instead}; point ${var} at your "
                             f"proxy's CA bundle (PEM), or unset it"), bundle)
    if bundle is None:
        return Trust(Finding("ca_bundle", "ok", "none: TLS verified with the default trust store",
                             f"behind a TLS-intercepting proxy, {CA_HINT}"), None)
    return Trust(_bundle_finding(bundle, source), bundle)


def _bundle_finding(bundle: Path, source: str) -> Finding:
    """Load ``bundle`` as TLS verification will, and count its certificates."""
    try:
        stats = ssl.create_default_context(cafile=str(bundle)).cert_store_stats()
    except PermissionError as exc:
        return Finding("ca_bundle", "fail", f"{bundle} ({source}) is not readable: {exc.strerror}",
                       f"make it readable by this user (chmod a+r {bundle}), or point {source} at a readable copy")
    except ssl.SSLError as exc:
        return Finding("ca_bundle", "fail", f"{bundle} ({source}) holds no PEM certificate ({exc.reason or exc})",
                       PEM_HINT)
    except OSError as exc:
        return Finding("ca_bundle", "fail", f"{bundle} ({source}) cannot be read: {exc.strerror or exc}",
                       f"point {source} at your proxy's CA bundle (PEM)")
    n, cas = stats["x509"], stats["x509_ca"]
    value = f"{bundle} ({source}, {n} certificate{'s' * (n != 1)})"
    if cas == 0:
        return Finding("ca_bundle", "warn", value + ", none of them a CA",
                       "a proxy's bundle holds its root CA certificate (CA:TRUE); ask for that one")
    return Finding("ca_bundle", "ok", value)


def index_finding(index_url: str, bundle: Path | None, *, timeout: float = INDEX_TIMEOUT,
                  project: str = PROBE_PROJECT) -> Finding:
    """Ask ``index_url`` for one small project's page as the resolver does (PEP 691 JSON, TLS verified
    with ``bundle`` in place of the default trust store), and say what stands in the way."""
    import requests


    probe = f"{index_url.rstrip('/')}/{project}/"
    proxy = _proxy_for(probe)
    via = f" via proxy {proxy}" if proxy else ""

    start = time.monotonic()
    try:
        check_netrc_text()  # requests reads it for every request
        with keyring_logins([index_url]):  # as the resolver logs in: netrc, else the keyring
            tls: dict[str, Any] = {"verify": str(bundle)} if bundle is not None else {}
            resp = requests.get(probe, headers={"Accept": JSON_ACCEPT}, timeout=timeout, **tls)
    except (requests.RequestException, OSError) as exc:
        return _failure(probe, exc, bundle, proxy, timeout)
    except SpecError as exc:  # a netrc file that is not text, or cannot be parsed
        return Finding("index", "fail", f"{probe}: {exc.message}", f"{exc.location}: {exc.hint}")
    ms = round((time.monotonic() - start) * 1000)
    answered = f"{probe}{via}: HTTP {resp.status_code} in {ms} ms"
    host = urlsplit(probe).netloc
    if resp.status_code in (401, 403):
        try:
            source = login_source(index_url)
            hint = (f"the login for {urlsplit(probe).hostname} in {source} was refused: check the user and token"
                    if source else login_hint(index_url))
        except SpecError as exc:  # a netrc file that cannot be parsed: requests skipped it
            hint = f"{exc.location}: {exc.message}; {exc.hint}"
        return Finding("index", "fail", f"{answered}: the index needs a login",
                       hint + (f"; or the proxy's policy refuses {host}" if proxy else ""))
    if resp.status_code == 407:
        return Finding("index", "fail", f"{answered}: the proxy needs a login",
                       "put the proxy's credentials in HTTPS_PROXY (http://user:password@proxy:port)")
    if resp.status_code == 404:
        return Finding("index", "warn", f"{answered}: the index answers but has no {project!r}",
                       "check that the index URL is a simple API root (PyPI: https://pypi.org/simple)")
    if not resp.ok:
        return Finding("index", "fail", f"{answered}", "the index is failing; retry, or ask whoever runs it")
    if "json" not in resp.headers.get("content-type", ""):
        return Finding(
            "index",
            "fail",
            f"{answered}, without the simple JSON API ({resp.headers.get('content-type', 'no content-type')})",
            f"envkit's resolver reads PEP 691 ({JSON_ACCEPT}); use an index that serves it",
        )
    return Finding("index", "ok", answered)


def _proxy_for(url: str) -> str:
    """The proxy requests takes for ``url`` from HTTPS_PROXY/ALL_PROXY and NO_PROXY, without its password."""
    import requests


    proxies = requests.utils.get_environ_proxies(url)
    proxy = proxies.get(urlsplit(url).scheme) or proxies.get("all") or ""
    return redact(proxy)


def _tls_failure(probe: str, exc: Exception, bundle: Path | None) -> Finding:
    """What failed in the TLS handshake: the certificate's name, age or issuer, the CA bundle, TLS itself."""
    parts = urlsplit(probe)
    host = parts.hostname or parts.netloc
    text = str(exc)
    trusted_by = f"the CA bundle {bundle}" if bundle is not None else "the default trust store"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        if any(s in text for s in ("Hostname mismatch", "IP address mismatch", "doesn't match")):
            return Finding("index", "fail", f"{probe}: the TLS certificate is not for {host}",
                           "use the host name the index's certificate names in the index URL")
        if "expired" in text:
            return Finding("index", "fail", f"{probe}: the TLS certificate has expired",
                           "ask whoever runs the index (or the proxy) to renew it")
        return Finding("index", "fail", f"{probe}: the TLS certificate is not trusted by {trusted_by} "
                                        f"(unknown issuer: a TLS-intercepting proxy?)", CA_HINT)
    if bundle is not None and any(s in text for s in ("NO_CERTIFICATE_OR_CRL_FOUND", "PEM lib", "X509:")):
        return Finding("index", "fail", f"{probe}: TLS cannot use {bundle}: {_reason(exc)}", "see ca_bundle")
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text:
        return Finding("index", "fail", f"{probe}: {parts.netloc} does not speak TLS",
                       "an http:// index? give its URL with http://")
    return Finding("index", "fail", f"{probe}: TLS failed: {_reason(exc)}", CA_HINT)


def _failure(probe: str, exc: Exception, bundle: Path | None, proxy: str, timeout: float) -> Finding:
    """Name what stopped the request: trust, DNS, connection, proxy or time, and the fix for each."""
    import requests

    parts = urlsplit(probe)
    host = parts.hostname or parts.netloc
    text = str(exc)
    if isinstance(exc, requests.exceptions.SSLError):
        return _tls_failure(probe, exc, bundle)
    if isinstance(exc, requests.exceptions.ProxyError):
        if "407" in text:
            return Finding("index", "fail", f"{probe}: the proxy {proxy} needs a login (HTTP 407)",
                           "put the proxy's credentials in HTTPS_PROXY (http://user:password@proxy:port)")
        what = "refused the connection" if "refused" in text else f"failed: {_reason(exc)}"
        return Finding("index", "fail", f"{probe}: the proxy {proxy} {what}",
                       "check HTTPS_PROXY (host and port), or list the index's host in NO_PROXY "
                       "if it is reached directly")
    if isinstance(exc, requests.exceptions.Timeout):
        return Finding(
            "index",
            "fail",
            f"{probe}: no answer within {timeout:g} s" + (f" via proxy {proxy}" if proxy else ""),
            f"the proxy {proxy} is slow or drops it; check HTTPS_PROXY"
            if proxy
            else f"a firewall may drop direct traffic: {PROXY_HINT}",
        )
    if isinstance(exc, requests.exceptions.ConnectionError):
        if any(s in text for s in ("NameResolutionError", "Name or service not known", "not resolve",
                                   "Temporary failure in name resolution", "nodename nor servname")):
            return Finding("index", "fail", f"{probe}: cannot resolve {host} (DNS)",
                           f"this host cannot look up {host}: {PROXY_HINT}")
        what = "refused the connection" if "refused" in text else f"cannot be reached: {_reason(exc)}"
        return Finding("index", "fail", f"{probe}: {parts.netloc} {what}", PROXY_HINT)
    if isinstance(exc, OSError) and bundle is not None and not isinstance(exc, requests.RequestException):
        return Finding("index", "fail", f"{probe}: TLS cannot use {bundle}: {exc}", "see ca_bundle")
    return Finding("index", "fail", f"{probe}: {_reason(exc)}", "")


def _reason(exc: Exception) -> str:
    """The innermost reason urllib3 gives (its MaxRetryError wraps it), shortened for a table."""
    inner = exc.args[0] if exc.args else exc
    inner = getattr(inner, "reason", None) or inner
    return str(inner)[:200]
