"""`envkit doctor`: is this host ready to build and certify, and does the package index answer
through the CA bundle and proxy that resolve and build will use?"""

from __future__ import annotations

import os
import shutil
import ssl
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..engine.space import DISK_FAIL, DISK_WARN, free_bytes, reclaim_hint
from ..certify.gate import host_gpus
# the variables a CA bundle comes from when the spec names none, in order: doctor names one that points
# nowhere (the choice itself skips it quietly)

PROBE_PROJECT = "six"  # a small page (~20 kB) that every PyPI mirror holds
INDEX_TIMEOUT = 10.0  # seconds, to connect and to read
CA_HINT = "set ENVKIT_CA_BUNDLE or build.ca_bundle to your proxy's CA bundle (PEM)"
MIRROR_HINT = ("where PyTorch's own index cannot be reached, set build.variant_index_url to a mirror of it "
               "(e.g. \"https://mirror.corp.example/pytorch/whl/{variant}\")")
PROXY_HINT = ("behind a proxy, set HTTPS_PROXY (e.g. http://proxy.corp:3128) and NO_PROXY (hosts reached "
              "directly, e.g. an internal mirror)")


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok | warn | fail | skip
    value: str
    hint: str = ""

    def to_json(self) -> dict:
        return asdict(self)


# A failing check exits with its area's code (README's table); every other check is the engine's or this host's (6).
EXIT_CODES = {"ca_bundle": 2, "catalog": 2, "index": 3, "framework_index": 3, "store": 9}


def exit_code(findings: list[Finding]) -> int:
    """0 when no check fails; else the first failing check's code (engine and host 6, CA bundle and catalog 2,
    package index 3, history store 9), in the order doctor checks."""
    failed = [f for f in findings if f.status == "fail"]
    return EXIT_CODES.get(failed[0].name, 6) if failed else 0


@dataclass(frozen=True)
class Trust:
    """The CA bundle resolve and build verify TLS with (None: the default trust store), and its finding.
    ``usable`` is False where resolve stops before asking the index (the spec's own bundle is missing)."""

    finding: Finding
    bundle: Path | None
    usable: bool = True


def diagnose(connect, store_url: str | None = None, *, spec_path: Path | None = None,
             offline: bool = False) -> list[Finding]:
    """``connect`` returns an engine or raises EngineError; ``store_url`` as ``--store`` takes it;
    ``spec_path``: check that spec's index and CA bundle; ``offline``: ask no index."""
    from ..errors import EnvkitError
    from ..index.urls import DEFAULT_INDEX
    from ..spec import load_spec

    spec = load_spec(spec_path) if spec_path is not None else None

    findings: list[Finding] = []
    engine = None
    try:
        engine = connect()
        v = engine.version()
        findings.append(Finding("engine", "ok", f"{v['engine']} {v['version']} (API {v['api']}, {v['os']}/{v['arch']})"))
        has_nvidia = engine.nvidia_runtime()
        findings.append(Finding("nvidia_runtime", "ok" if has_nvidia else "warn",
                                "registered" if has_nvidia else "not registered",
                                "" if has_nvidia else "install the NVIDIA Container Toolkit to certify on GPUs "
                                "(nvidia-ctk runtime configure --runtime=docker); builds and verification work without it"))
    except EnvkitError as exc:
        findings.append(Finding("engine", "fail", exc.message, exc.hint or ""))
    gpus, why = host_gpus()
    if why is None:
        findings.append(Finding("gpus", "ok", "; ".join(f"{g.name}, {g.driver}, {g.cc}" for g in gpus)))
    elif shutil.which("nvidia-smi"):
        findings.append(Finding("gpus", "fail", why))
    else:
        findings.append(Finding("gpus", "skip", why,
                                "images can be built and verified here; certification needs a GPU host"))
    deb = shutil.which("debootstrap") or (os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap")
    findings.append(Finding("debootstrap", "ok" if deb else "warn", deb or "not installed",
                            "" if deb else "apt-get install debootstrap, to make `bootstrap:` bases"))
    trust = trust_for(spec)
    findings.append(trust.finding)
    index_url = (spec.build.index_url if spec else None) or DEFAULT_INDEX
    if offline:
        findings.append(Finding("index", "skip", f"{index_url} not asked (--offline)"))
    elif not trust.usable:
        findings.append(Finding("index", "skip", f"{index_url} not asked: resolve stops at the CA bundle",
                                "fix ca_bundle first"))
    else:
        findings.append(index_finding(index_url, trust.bundle))
        for url, images in (framework_indexes(spec) if spec is not None else {}).items():
            found = index_finding(url, trust.bundle, project="torch")  # a variant index holds its framework
            hint = found.hint
            if found.status == "fail" and not spec.build.variant_index_url and "login" not in found.value:
                hint = (f"{hint}; " if hint else "") + MIRROR_HINT
            findings.append(Finding("framework_index", found.status, f"{found.value} (for {', '.join(images)})", hint))
    if engine is not None:
        findings.append(disk_finding(engine))
        findings.append(buildkit_finding(engine))
        from ..engine.docker_gc import DockerImageHost

        findings.append(containers_finding(DockerImageHost(engine.client)))
    findings.append(scratch_finding())
    findings.append(catalog_finding())
    findings.append(store_finding(store_url))
    return findings


# --- trust and the package index --------------------------------------------------------------
def framework_indexes(spec) -> dict[str, list[str]]:
    """The indexes other than the spec's that resolve will ask (a non-default PyTorch variant's own: the spec's
    ``build.variant_index_url`` mirror, else the catalog's, e.g. download.pytorch.org/whl/cu126), each with the
    images that need it, from the catalog alone (``plan``). An image the plan refuses is left out: `envkit resolve`
    says why."""
    from ..catalog.files import load_catalog
    from ..errors import EnvkitError
    from ..resolve.plan import plan

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


def trust_for(spec=None) -> Trust:
    """The bundle resolve and build would take (``Spec.ca_bundle_path``: the spec's, else the first of
    CA_ENV naming a file), whether it holds PEM certificates, and any variable that names nothing."""
    from ..errors import SpecError
    from ..support.ca_bundle import env_ca_bundle, env_ca_skipped, env_ca_source

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
        from ..support.ca_bundle import PEM_HINT

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

    from ..index.urls import JSON_ACCEPT

    probe = f"{index_url.rstrip('/')}/{project}/"
    proxy = _proxy_for(probe)
    via = f" via proxy {proxy}" if proxy else ""
    from ..errors import SpecError
    from ..index.login import check_netrc_text, keyring_logins, login_hint, login_source

    start = time.monotonic()
    try:
        check_netrc_text()  # requests reads it for every request
        with keyring_logins([index_url]):  # as the resolver logs in: netrc, else the keyring
            resp = requests.get(probe, headers={"Accept": JSON_ACCEPT}, timeout=timeout,
                                **({"verify": str(bundle)} if bundle is not None else {}))
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
        return Finding("index", "fail",
                       f"{answered}, without the simple JSON API ({resp.headers.get('content-type', 'no content-type')})",
                       f"envkit's resolver reads PEP 691 ({JSON_ACCEPT}); use an index that serves it")
    return Finding("index", "ok", answered)


def _proxy_for(url: str) -> str:
    """The proxy requests takes for ``url`` from HTTPS_PROXY/ALL_PROXY and NO_PROXY, without its password."""
    import requests

    from ..store.backends import redact

    proxies = requests.utils.get_environ_proxies(url)
    proxy = proxies.get(urlsplit(url).scheme) or proxies.get("all") or ""
    return redact(proxy)


def _failure(probe: str, exc: Exception, bundle: Path | None, proxy: str, timeout: float) -> Finding:
    """Name what stopped the request: trust, DNS, connection, proxy or time, and the fix for each."""
    import requests

    parts = urlsplit(probe)
    host = parts.hostname or parts.netloc
    text = str(exc)
    trusted_by = f"the CA bundle {bundle}" if bundle is not None else "the default trust store"
    if isinstance(exc, requests.exceptions.SSLError):
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
    if isinstance(exc, requests.exceptions.ProxyError):
        if "407" in text:
            return Finding("index", "fail", f"{probe}: the proxy {proxy} needs a login (HTTP 407)",
                           "put the proxy's credentials in HTTPS_PROXY (http://user:password@proxy:port)")
        what = "refused the connection" if "refused" in text else f"failed: {_reason(exc)}"
        return Finding("index", "fail", f"{probe}: the proxy {proxy} {what}",
                       "check HTTPS_PROXY (host and port), or list the index's host in NO_PROXY "
                       "if it is reached directly")
    if isinstance(exc, requests.exceptions.Timeout):
        return Finding("index", "fail", f"{probe}: no answer within {timeout:g} s" + (f" via proxy {proxy}" if proxy else ""),
                       f"the proxy {proxy} is slow or drops it; check HTTPS_PROXY" if proxy
                       else f"a firewall may drop direct traffic: {PROXY_HINT}")
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


def disk_finding(engine) -> Finding:
    """Free space where the engine keeps images (a full disk fails builds midway), and what to reclaim."""
    try:
        usage = engine.disk_usage()
    except Exception as exc:  # noqa: BLE001 - an engine that cannot say is a warning, not a crash
        return Finding("disk", "warn", f"the engine did not report its disk usage: {exc}")
    gib = 1 << 30
    held = f"images {usage['images_bytes'] / gib:.1f} GiB, BuildKit cache {usage['build_cache_bytes'] / gib:.1f} GiB"
    root = usage.get("root")
    free = free_bytes(root)
    if free is None:
        return Finding("disk", "skip", f"{held}; free space not measured (the engine's {root or 'data root'} is not on "
                                       "this host)")
    value = f"{free / gib:.1f} GiB free on {root} ({held})"
    if free >= DISK_WARN:
        return Finding("disk", "ok", value)
    hint = reclaim_hint(usage)
    return Finding("disk", "fail" if free < DISK_FAIL else "warn",
                   value + (": too little for a CUDA framework build (about 6 GB and as much again to build it)"
                            if free < DISK_FAIL else ": a few CUDA framework builds will fill it"), hint)


def containers_finding(host) -> Finding:
    """The stopped containers a killed envkit left (``host``: gc's view of the engine): each keeps its
    multi-GB image from `envkit gc` until it is removed."""
    from .gc_plan import CONTAINER_GRACE

    try:
        left = host.leftover_containers(None)
    except Exception as exc:  # noqa: BLE001 - an engine that cannot say is a warning, not a crash
        return Finding("containers", "warn", f"the engine did not list envkit's containers: {exc}")
    if not left:
        return Finding("containers", "ok", "no stopped container left by a killed envkit")
    roles = ", ".join(f"{n} {role}" for role, n in sorted(Counter(c.role for c in left).items()))
    return Finding("containers", "warn", f"{len(left)} stopped container(s) left by a killed envkit ({roles})",
                   f"`envkit gc` removes them once stopped {CONTAINER_GRACE.total_seconds() / 60:g} min, and then "
                   "judges the images they kept")


def scratch_finding(root=None) -> Finding:
    """The scratch directories a killed envkit left under the temporary directory (``scratch.py``): build
    contexts and rootfs trees of hundreds of MB, and the build secrets' netrc, a credential on disk."""
    from ..support import scratch

    left = scratch.leftovers(root)
    if not left:
        return Finding("scratch", "ok", "no scratch directory left by a killed envkit")
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(d.kind.split("-")[0] for d in left).items()))
    mounted = sum(1 for d in left if d.mounts)
    return Finding("scratch", "warn", f"{len(left)} scratch director(ies) left by a killed envkit ({kinds}; "
                   f"{sum(d.bytes for d in left) / 1e6:.1f} MB" + (f"; {mounted} with a mount still in it" if mounted else "")
                   + f") in {left[0].path.parent}",
                   "`envkit gc` removes them" + (" (it unmounts first what a killed debootstrap left mounted: run it as root)"
                                                 if mounted else ""))


def buildkit_finding(engine) -> Finding:
    from ..engine.buildkit import BuildKitBuilder

    builder = BuildKitBuilder(engine)
    problem = builder.unavailable()
    if problem is None:
        return Finding("buildkit", "ok", f"{builder.cli} (--builder buildkit)")
    return Finding("buildkit", "warn", problem[0], problem[1])


def catalog_finding() -> Finding:
    from ..catalog.files import CATALOG_ENV, data_dir, load_catalog, team_dir
    from ..errors import EnvkitError

    where = data_dir()
    origin = f"${CATALOG_ENV}" if team_dir() is not None else "packaged"
    from ..catalog.perf import load_perf
    from ..catalog.files import perf_path

    try:
        digest = load_catalog(where).digest
        models = sum(len(f.models) for f in load_perf().floors)  # certify judges these: a broken file fails it
    except EnvkitError as exc:
        return Finding("catalog", "fail", exc.message, exc.hint or "")
    return Finding("catalog", "ok", f"{where} ({origin}, {digest[:19]}); performance floors for {models} GPU "
                                    f"model(s) from {perf_path()}")


def store_finding(store_url: str | None) -> Finding:
    """Where the history store is and whether it answers, without creating or migrating it."""
    import sqlite3

    from ..errors import EnvkitError
    from ..store.history import SCHEMA_VERSION, locate
    from ..store.backends import NOT_A_STORE_HINT, PostgresBackend, directory_error

    try:
        target = locate(store_url)
    except EnvkitError as exc:
        return Finding("store", "fail", exc.message, exc.hint or "")
    if target.url is not None:
        try:
            backend = PostgresBackend.open(target.url)
        except EnvkitError as exc:
            return Finding("store", "fail", exc.message, exc.hint or "")
        try:
            server = backend.query("SHOW server_version")[0]["server_version"]
            exists = backend.query("SELECT to_regclass('schema_version') IS NOT NULL AS e")[0]["e"]
            version = backend.schema_version() if exists else 0
        finally:
            backend.close()
        return _schema_finding(f"{target} (PostgreSQL {server})", version, SCHEMA_VERSION)
    path = target.path
    if path.is_dir():
        error = directory_error(path)
        return Finding("store", "fail", error.message, error.hint)
    if not path.exists():
        return Finding("store", "ok", f"{path} (SQLite; created on first use)")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        return Finding("store", "fail", f"{path} is not readable as a history database: {exc}",
                       NOT_A_STORE_HINT)
    return _schema_finding(f"{path} (SQLite)", version, SCHEMA_VERSION)


def _schema_finding(where: str, version: int, known: int) -> Finding:
    if version > known:
        return Finding("store", "fail", f"{where}: schema version {version}, newer than this envkit ({known})",
                       "upgrade envkit to the version that wrote it")
    note = "up to date" if version == known else f"schema {version}, migrated to {known} by the next command that uses it (doctor never changes it)"
    return Finding("store", "ok", f"{where}, {note}")
