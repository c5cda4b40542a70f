"""A small private package index for the integration tests: what a company mirror serves.

``PackageIndexServer(wheels_dir)`` serves the wheels of one directory over the simple API, PEP 503
HTML or PEP 691 JSON (by the request's ``Accept``), with each wheel's ``.metadata`` (PEP 658/714, so
uv and envkit's index client read metadata without range requests), over plain http or, given a
``Pki`` (``tokenserver.make_pki``), https. It listens on every address, so build containers reach it
at the bridge's gateway (``bridge_gateway``), and logs every request (``requests``, ``fetched``)
so a test can say what came from it.

    GET /simple/                      the projects (HTML or JSON)
    GET /simple/<project>/            its wheels, each with #sha256= and its metadata's hash
    GET /files/<wheel>[.metadata]     the wheel, or its METADATA

``add_wheel`` fills the directory: ``make_wheel`` writes a tiny pure-Python wheel that no public
index has (so a build that installs it can only have asked the mirror), ``bundle.download_wheels``
downloads a lock's own wheels.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import ssl
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

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
    return net.attrs["IPAM"]["Config"][0]["Gateway"]


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


class PackageIndexServer:
    def __init__(self, wheels: Path, *, pki=None, host: str = "0.0.0.0"):
        self.wheels = wheels
        self.pki = pki
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

    @property
    def scheme(self) -> str:
        return "https" if self.pki is not None else "http"

    def url(self, host: str = "127.0.0.1") -> str:
        """The simple API's root as ``host`` reaches it (the bridge gateway for containers)."""
        return f"{self.scheme}://{host}:{self.port}/simple"

    def __enter__(self) -> "PackageIndexServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def fetched(self) -> list[str]:
        """The file names served whole (status 200), in order: wheels and ``.metadata`` files."""
        with self._lock:
            return [r.path.rsplit("/", 1)[1] for r in self.requests
                    if r.method == "GET" and r.status == 200 and r.path.startswith("/files/")]

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
        wheels = self.projects().get(canonicalize_name(project))
        if wheels is None:
            return None
        if as_json:
            files = [{"filename": w.name, "url": f"../../files/{w.name}", "hashes": {"sha256": _sha256(w)},
                      "core-metadata": {"sha256": hashlib.sha256(wheel_metadata(w)).hexdigest()}}
                     for w in wheels]
            doc = {"meta": {"api-version": "1.1"}, "name": canonicalize_name(project), "files": files}
            return json.dumps(doc).encode(), JSON_TYPE
        links = "".join(
            f'<a href="../../files/{html.escape(w.name)}#sha256={_sha256(w)}" data-core-metadata="sha256='
            f'{hashlib.sha256(wheel_metadata(w)).hexdigest()}">{html.escape(w.name)}</a>\n' for w in wheels)
        return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n".encode(), "text/html"

    def file(self, name: str) -> bytes | None:
        if "/" in name or name.startswith("."):
            return None
        if name.endswith(".whl.metadata"):
            wheel = self.wheels / name[: -len(".metadata")]
            return wheel_metadata(wheel) if wheel.is_file() else None
        path = self.wheels / name
        return path.read_bytes() if name.endswith(".whl") and path.is_file() else None


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
            as_json = JSON_TYPE in self.headers.get("Accept", "")
            found: tuple[bytes, str] | None = None
            if path in ("/simple", "/simple/"):
                found = server.root_page(as_json)
            elif m := re.fullmatch(r"/simple/([A-Za-z0-9._-]+)/?", path):
                found = server.project_page(m.group(1), as_json)
            elif path.startswith("/files/"):
                body = server.file(path[len("/files/"):])
                found = (body, "application/octet-stream") if body is not None else None
            status = 200 if found else 404
            body, ctype = found or (b"not found\n", "text/plain")
            server.log(Request(self.command, path, status, self.client_address[0]))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

    return Handler
