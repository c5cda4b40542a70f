"""A small private package index for the integration tests: what a company mirror serves.

``PackageIndexServer(wheels_dir)`` serves the wheels of one directory over the simple API, PEP 503
HTML or PEP 691 JSON (by the request's ``Accept``; JSON with PEP 700's ``size``), with each wheel's
``.metadata`` (PEP 658/714, so uv and envkit's index client read metadata without range requests), over plain
http or, given a
``Pki`` (``tokenserver.make_pki``), https. It listens on every address, so build containers reach it
at the bridge's gateway (``bridge_gateway``), and logs every request (``requests``, ``fetched``)
so a test can say what came from it. With ``login`` it answers 401 to any request without that
HTTP Basic login, as a company mirror that needs one does.

    GET /simple/                      the projects (HTML or JSON)
    GET /simple/<project>/            its wheels, each with #sha256= and its metadata's hash
                                      (``root`` serves them elsewhere: a variant index at /whl/cu126/)
    GET /files/<wheel>[.metadata]     the wheel, or its METADATA

``make_wheel`` writes a tiny pure-Python wheel that no public index has (so a build that installs it
can only have asked the mirror); ``make_torch_standin`` a few-KiB stand-in of one PyTorch variant's wheel
(its name, tags, Requires-Dist pins and arch flags string, no code); ``bundle.download_wheels`` fills the
directory with a lock's own wheels.

``hold(prefix)`` keeps every download of a file whose name starts with ``prefix`` waiting until ``release()``
(``held`` is set when the first such request arrives): a test that interrupts an install sends its signal while
the installer is certainly still running, instead of hoping a real download is slow enough.

With ``upstream`` (e.g. PyPI's simple API) it is also a proxy, as company mirrors are (devpi,
Artifactory, Nexus; this one caches nothing): a project's page lists its own wheels, then upstream's
files, each URL pointing back at the mirror, whose files (and ``.metadata``, and byte ranges) it fetches
from upstream on request:

    GET /upstream/<base64 of the upstream URL>/<file>[.metadata]
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import urllib.parse
import html
import json
import re
import ssl
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
from packaging.utils import canonicalize_name, parse_wheel_filename

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    status: int
    client: str


def bridge_gateway(engine) -> str:
    """The host's address on the engine's default bridge, where build containers find the host."""
    net = engine.client.networks.get("bridge")
    config = net.attrs["IPAM"]["Config"][0]
    if config.get("Gateway"):
        return config["Gateway"]
    # Some engines (Debian's 20.10 on a fresh host) list only the subnet: the engine gives the bridge
    # its first address (172.17.0.1 by default)
    return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wheel_metadata(path: Path) -> bytes:
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return zf.read(name)


def make_wheel(directory: Path, name: str = "envkit_mirror_probe", version: str = "1.0") -> Path:
    """A pure-Python wheel of one module, ``<name>`` with ``__version__``, valid for pip (RECORD hashed)."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                            "Summary: envkit's private-index probe\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: envkit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},"
                     f"{len(b)}\n" for n, b in files.items()) + f"{dist}/RECORD,,\n"
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, b in {**files, f"{dist}/RECORD": record.encode()}.items():
            zf.writestr(zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0)), b)
    return path


def make_torch_standin(directory: Path, version: str, tag: str, *, python: str = "3.11",
                       requires: list[str], arch_flags: str) -> Path:
    """A stand-in for torch ``version``+``tag`` as PyTorch's variant index serves it (``torch-2.11.0+cu126-cp311-
    cp311-manylinux_2_28_x86_64.whl``): what envkit's resolver reads of the real one (the name and tags, METADATA's
    Requires-Dist, the CUDA arch flags string in ``torch/lib/libtorch_python.so``) and a ``torch`` package whose
    ``__version__`` says it is a stand-in; a few KiB where the real wheel is about 800 MB."""
    directory.mkdir(parents=True, exist_ok=True)
    cp = "cp" + python.replace(".", "")
    full = f"{version}+{tag}"
    dist = f"torch-{full}.dist-info"
    meta = (f"Metadata-Version: 2.1\nName: torch\nVersion: {full}\nSummary: envkit's stand-in of a PyTorch variant "
            "wheel\nRequires-Python: >=3.10\n" + "".join(f"Requires-Dist: {r}\n" for r in requires))
    files = {
        "torch/__init__.py": f'__version__ = "{full}"  # envkit test stand-in\n'.encode(),
        "torch/lib/libtorch_python.so": b"\x7fELF stand-in\x00" + arch_flags.encode() + b"\x00",
        f"{dist}/METADATA": meta.encode(),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: envkit-tests\nRoot-Is-Purelib: false\n"
                         f"Tag: {cp}-{cp}-manylinux_2_28_x86_64\n".encode(),
    }
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},"
                     f"{len(b)}\n" for n, b in files.items()) + f"{dist}/RECORD,,\n"
    path = directory / f"torch-{full}-{cp}-{cp}-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, b in {**files, f"{dist}/RECORD": record.encode()}.items():
            zf.writestr(zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0)), b)
    return path


class PackageIndexServer:
    def __init__(self, wheels: Path, *, pki=None, host: str = "0.0.0.0", upstream: str | None = None,
                 login: tuple[str, str] | None = None, root: str = "/simple"):
        self.wheels = wheels
        self.root = "/" + root.strip("/")  # where the simple API is served: a variant index's "/whl/cu126", say
        self.login = login  # (user, password): every request must carry it as HTTP Basic, else 401
        self.pki = pki
        self.upstream = upstream.rstrip("/") if upstream else None
        self._session = requests.Session()  # upstream's connections kept alive, shared by the handler threads
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, 0), _handler(self))
        self._server.daemon_threads = True
        if pki is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(pki.cert, pki.key)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._hold: str | None = None
        self.held = threading.Event()  # a held file was asked for
        self._released = threading.Event()

    def hold(self, prefix: str) -> None:
        """Keep downloads of files named ``prefix...`` waiting until ``release()``."""
        self._hold = prefix
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def _wait_if_held(self, name: str) -> None:
        if self._hold is not None and name.startswith(self._hold) and not name.endswith(".metadata"):
            self.held.set()
            self._released.wait(timeout=900)

    def basic(self) -> str:
        user, password = self.login or ("", "")
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    @property
    def scheme(self) -> str:
        return "https" if self.pki is not None else "http"

    def url(self, host: str = "127.0.0.1") -> str:
        """The simple API's root as ``host`` reaches it (the bridge gateway for containers)."""
        return f"{self.scheme}://{host}:{self.port}{self.root}"

    def __enter__(self) -> "PackageIndexServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()  # (a held request answers, so shutdown does not wait on it)
        self._server.shutdown()
        self._server.server_close()
        self._session.close()

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def fetched(self) -> list[str]:
        """The file names served whole (status 200), in order: wheels and ``.metadata`` files, its own and
        relayed from upstream."""
        with self._lock:
            return [r.path.rsplit("/", 1)[1] for r in self.requests if r.method == "GET" and r.status == 200
                    and r.path.startswith(("/files/", "/upstream/"))]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    # --- the simple API ---------------------------------------------------------------------------
    def projects(self) -> dict[str, list[Path]]:
        found: dict[str, list[Path]] = {}
        for path in sorted(self.wheels.glob("*.whl")):
            found.setdefault(canonicalize_name(parse_wheel_filename(path.name)[0]), []).append(path)
        return found

    def root_page(self, as_json: bool) -> tuple[bytes, str]:
        names = sorted(self.projects())
        if as_json:
            doc = {"meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in names]}
            return json.dumps(doc).encode(), JSON_TYPE
        links = "".join(f'<a href="{n}/">{n}</a>\n' for n in names)
        return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n".encode(), "text/html"

    def project_page(self, project: str, as_json: bool) -> tuple[bytes, str] | None:
        wheels = self.projects().get(canonicalize_name(project), [])
        up = "../" * (self.root.count("/") + 1)  # from <root>/<project>/ back to the server's top
        files = [{"filename": w.name, "url": f"{up}files/{w.name}", "hashes": {"sha256": _sha256(w)},
                  "size": w.stat().st_size,
                  "core-metadata": {"sha256": hashlib.sha256(wheel_metadata(w)).hexdigest()}} for w in wheels]
        # upstream's files too, as a mirror that holds some packages and relays the rest (its own copy first)
        relayed = self._upstream_files(project) if self.upstream is not None else None
        if not files and relayed is None:
            return None
        files += [f for f in relayed or () if f["filename"] not in {w.name for w in wheels}]
        if as_json:
            doc = {"meta": {"api-version": "1.1"}, "name": canonicalize_name(project), "files": files}
            return json.dumps(doc).encode(), JSON_TYPE
        links = ""
        for f in files:
            meta = f.get("core-metadata")
            attr = f' data-core-metadata="sha256={meta["sha256"]}"' if isinstance(meta, dict) and "sha256" in meta else ""
            links += (f'<a href="{html.escape(f["url"])}#sha256={f["hashes"].get("sha256", "")}"{attr}>'
                      f'{html.escape(f["filename"])}</a>\n')
        return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n".encode(), "text/html"

    def _upstream_files(self, project: str) -> list[dict] | None:
        url = f"{self.upstream}/{canonicalize_name(project)}/"
        resp = self._session.get(url, headers={"Accept": JSON_TYPE}, timeout=60)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        doc = resp.json()
        files = []
        for f in doc.get("files", []):
            absolute = urllib.parse.urljoin(url, f["url"])
            token = base64.urlsafe_b64encode(absolute.split("#", 1)[0].encode()).decode()
            meta = f.get("core-metadata") or f.get("dist-info-metadata")
            files.append({"filename": f["filename"], "url": f"{'../' * (self.root.count('/') + 1)}upstream/{token}/"
                                                            f"{f['filename']}",
                          "hashes": f.get("hashes", {}), **({"core-metadata": meta} if meta else {}),
                          **({"requires-python": f["requires-python"]} if f.get("requires-python") else {}),
                          **({"size": f["size"]} if isinstance(f.get("size"), int) else {}),
                          **({"yanked": f["yanked"]} if f.get("yanked") else {})})
        return files

    def upstream_file(self, method: str, token: str, name: str,
                      range_: str | None) -> tuple[int, bytes, dict[str, str]]:
        """(status, body, headers) of an upstream file (``name`` ending ``.metadata``: its metadata file)."""
        url = base64.urlsafe_b64decode(token.encode()).decode()
        if not url.startswith("https://"):  # (only what this mirror's own pages point at)
            return 404, b"", {}
        if name.endswith(".metadata"):
            url += ".metadata"
        resp = self._session.request(method, url, headers={"Range": range_} if range_ else {}, timeout=120,
                                     allow_redirects=True)
        keep = ("content-range", "accept-ranges", *(("content-length",) if method == "HEAD" else ()))
        headers = {k: v for k, v in resp.headers.items() if k.lower() in keep}
        return resp.status_code, resp.content if resp.ok else b"", headers

    def file(self, name: str) -> bytes | None:
        if "/" in name or name.startswith("."):
            return None
        if name.endswith(".whl.metadata"):
            wheel = self.wheels / name[: -len(".metadata")]
            return wheel_metadata(wheel) if wheel.is_file() else None
        path = self.wheels / name
        return path.read_bytes() if name.endswith(".whl") and path.is_file() else None


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) byte of a ``Range: bytes=A-B`` / ``bytes=A-`` / ``bytes=-N`` header; None: the whole file."""
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", header or "")
    if not m or m.groups() == ("", ""):
        return None
    if m.group(1) == "":
        return max(size - int(m.group(2)), 0), size - 1
    start = int(m.group(1))
    return start, min(int(m.group(2)) if m.group(2) else size - 1, size - 1)


def _handler(server: PackageIndexServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # the log is ``server.requests``
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, head: bool) -> None:
            path = self.path.split("?", 1)[0]
            if server.login is not None and self.headers.get("Authorization") != server.basic():
                return self._send(path, 401, b"login required\n",
                                  {"Content-Type": "text/plain", "WWW-Authenticate": 'Basic realm="mirror"'}, head)
            as_json = JSON_TYPE in self.headers.get("Accept", "")
            found: tuple[bytes, str] | None = None
            if path in (server.root, server.root + "/"):
                found = server.root_page(as_json)
            elif m := re.fullmatch(re.escape(server.root) + r"/([A-Za-z0-9._-]+)/?", path):
                found = server.project_page(m.group(1), as_json)
            elif path.startswith("/files/"):
                server._wait_if_held(path[len("/files/"):])
                body = server.file(path[len("/files/"):])
                found = (body, "application/octet-stream") if body is not None else None
                if body is not None and (part := _byte_range(self.headers.get("Range"), len(body))) is not None:
                    start, end = part  # as company mirrors do: envkit reads one member of a wheel this way
                    return self._send(path, 206, body[start:end + 1],
                                      {"Content-Type": "application/octet-stream",
                                       "Content-Range": f"bytes {start}-{end}/{len(body)}"}, head)
            elif server.upstream and (m := re.fullmatch(r"/upstream/([A-Za-z0-9_=-]+)/([^/]+)", path)):
                return self._relay(path, *server.upstream_file(self.command, m.group(1), m.group(2),
                                                             self.headers.get("Range")),
                                   head=head)
            status = 200 if found else 404
            body, ctype = found or (b"not found\n", "text/plain")
            self._send(path, status, body, {"Content-Type": ctype}, head)

        def _relay(self, path: str, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
            self._send(path, status, body, {"Content-Type": "application/octet-stream", **headers}, head)

        def _send(self, path: str, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
            server.log(Request(self.command, path, status, self.client_address[0]))
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            if not any(k.lower() == "content-length" for k in headers):
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

    return Handler
