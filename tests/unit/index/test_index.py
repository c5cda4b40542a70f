"""envkit.index.client: the PEP 691 client, wheel tag selection and METADATA by range requests.

Every test talks to a small HTTP server on 127.0.0.1 started here; an autouse guard
refuses any other connection (so the default index, pypi.org, is never contacted).
The synthetic wheels are made with ``zipfile``; the biggest carry a few MB of random,
uncompressed padding so that reading them whole would be visible in the request log.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import socket
import struct
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock
from urllib.parse import urlsplit

import certifi
import pytest
import requests
from packaging.version import Version

from envkit.errors import PackageIndexError
from envkit.index.urls import DEFAULT_INDEX, JSON_ACCEPT
from envkit.index.client import PackageIndex, WheelFile

PAD = 3 << 20  # 3 MiB of random bytes, stored: far more than the 64 KiB tail read
TAIL = 65536

TORCH_REQUIRES = [
    "filelock",
    "typing-extensions>=4.8.0",
    "sympy==1.13.1; python_version >= \"3.9\"",
    "nvidia-cuda-runtime-cu12==12.4.127; platform_system == \"Linux\" and platform_machine == \"x86_64\"",
    "nvidia-cudnn-cu12==9.1.0.70; platform_system == \"Linux\" and platform_machine == \"x86_64\"",
    "nvidia-nccl-cu12==2.21.5; platform_system == \"Linux\" and platform_machine == \"x86_64\"",
    "triton==3.1.0; platform_system == \"Linux\" and platform_machine == \"x86_64\" and python_version < \"3.13\"",
    "numpy; extra == \"opt-einsum\"",
]
EXPECTED = {
    "filelock": "",
    "typing-extensions": ">=4.8.0",
    "sympy": "==1.13.1",
    "nvidia-cuda-runtime-cu12": "==12.4.127",
    "nvidia-cudnn-cu12": "==9.1.0.70",
    "nvidia-nccl-cu12": "==2.21.5",
    "triton": "==3.1.0",
    "numpy": "",
}


# --- no network but the local server ---------------------------------------------------
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch):
    real_connect = socket.socket.connect
    real_getaddrinfo = socket.getaddrinfo

    def connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if host not in _LOOPBACK:
            raise AssertionError(f"test tried to connect to {address!r}")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in _LOOPBACK:
            raise AssertionError(f"test tried to resolve {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


# --- synthetic wheels -------------------------------------------------------------------
def metadata_text(name: str, version: str, requires: list[str]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
             "Summary: synthetic wheel for envkit tests", "Requires-Python: >=3.9"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    body = "\n".join(f"Paragraph {i}: tensors and dynamic neural networks in Python." for i in range(300))
    return "\n".join(lines) + "\n\n" + body + "\n"


@dataclass
class Wheel:
    filename: str
    data: bytes
    metadata: str
    metadata_offset: int  # local header offset of .dist-info/METADATA

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def build_wheel(name: str, version: str, requires: list[str], *, layout: str = "far",
                tag: str = "cp311-cp311-manylinux_2_28_x86_64", many: int = 0,
                pad: int = PAD) -> Wheel:
    """A wheel whose METADATA is at the start ('far' from the end) or at the end ('near')."""
    meta = metadata_text(name, version, requires)
    di = f"{name}-{version}.dist-info"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo(f"{name}/__init__.py"), "import os\n", compress_type=zipfile.ZIP_DEFLATED)
        padding = zipfile.ZipInfo(f"{name}/lib/libpadding.so")
        if layout == "far":
            zf.writestr(zipfile.ZipInfo(f"{di}/METADATA"), meta, compress_type=zipfile.ZIP_DEFLATED)
            zf.writestr(padding, os.urandom(pad), compress_type=zipfile.ZIP_STORED)
        else:
            zf.writestr(padding, os.urandom(pad), compress_type=zipfile.ZIP_STORED)
            zf.writestr(zipfile.ZipInfo(f"{di}/METADATA"), meta, compress_type=zipfile.ZIP_DEFLATED)
        for i in range(many):
            zf.writestr(zipfile.ZipInfo(f"{name}/include/ATen/native/some/deep/path/header_{i:05d}.h"),
                        f"// {i}\n", compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr(zipfile.ZipInfo(f"{di}/WHEEL"), f"Wheel-Version: 1.0\nTag: {tag}\n")
        zf.writestr(zipfile.ZipInfo(f"{di}/RECORD"), "")
    data = buf.getvalue()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        offset = zf.getinfo(f"{di}/METADATA").header_offset
        assert zf.read(f"{di}/METADATA").decode() == meta
    return Wheel(f"{name}-{version}-{tag}.whl", data, meta, offset)


def eocd_fields(data: bytes) -> tuple[int, int]:
    """(central directory size, offset) from the plain end-of-central-directory record."""
    eocd = data.rfind(b"PK\x05\x06")
    return struct.unpack("<II", data[eocd + 12: eocd + 20])


def build_zip64_wheel(name: str, version: str, requires: list[str]) -> Wheel:
    """METADATA after a large member, with zip64 extras and a zip64 end record.

    ``zipfile`` writes zip64 structures past ``ZIP64_LIMIT``; lowering it gives a small
    file with the layout of a >4 GiB wheel. The plain end record's directory offset is
    then set to 0xFFFFFFFF (as a real >4 GiB wheel has it), so readers must use zip64.
    """
    with mock.patch.object(zipfile, "ZIP64_LIMIT", 1 << 16):
        w = build_wheel(name, version, requires, layout="near", pad=1 << 20)
    data = bytearray(w.data)
    eocd = data.rfind(b"PK\x05\x06")
    assert data.rfind(b"PK\x06\x06") >= 0 and data.rfind(b"PK\x06\x07") >= 0, "no zip64 end record"
    data[eocd + 16: eocd + 20] = struct.pack("<I", 0xFFFFFFFF)
    data = bytes(data)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:  # still a valid zip for a real reader
        assert zf.read(f"{name}-{version}.dist-info/METADATA").decode() == w.metadata
    return Wheel(w.filename, data, w.metadata, w.metadata_offset)


@pytest.fixture(scope="module")
def wheels() -> dict[str, Wheel]:
    return {
        "far": build_wheel("torch", "2.5.1", TORCH_REQUIRES, layout="far"),
        "near": build_wheel("torch", "2.5.1", TORCH_REQUIRES, layout="near"),
        "bigcd": build_wheel("torch", "2.5.1", TORCH_REQUIRES, layout="far", many=2500),
        "small": build_wheel("torch", "2.5.1", TORCH_REQUIRES, layout="far", pad=2000),
        "zip64": build_zip64_wheel("torch", "2.5.1", TORCH_REQUIRES),
    }


# --- the local index server -------------------------------------------------------------
@dataclass
class Hit:
    path: str
    range: str | None
    accept: str | None
    status: int
    sent: int
    method: str = "GET"


class IndexServer:
    """A PEP 691 index: /simple/<project>/ (JSON) and /files/<name> (with byte ranges)."""

    def __init__(self):
        self.projects: dict[str, list[dict]] = {}
        self.files: dict[str, bytes] = {}
        self.html_only: set[str] = set()
        self.ignore_range = False
        self.hits: list[Hit] = []
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                        daemon=True)

    # setup
    def add(self, project: str, wheel: Wheel | None = None, *, filename: str | None = None,
            core_metadata: str | bool | None = None, yanked=None, with_hash: bool = True,
            serve_metadata: bool = True, url_suffix: str = "", with_size: bool = True) -> dict:
        """List a file for ``project``; serve its bytes (and its .metadata) under /files/. ``with_size``: the
        listing gives the file's ``size`` (PEP 700, as PyPI does)."""
        filename = filename or wheel.filename
        data = wheel.data if wheel else b"not a real wheel"
        path = f"/files/{filename}"
        self.files[path] = data
        entry: dict = {"filename": filename, "url": path + url_suffix,
                       "hashes": {"sha256": hashlib.sha256(data).hexdigest()} if with_hash else {}}
        if with_size:
            entry["size"] = len(data)
        if core_metadata is not None:
            key = "core-metadata"
            if core_metadata == "legacy":
                key, core_metadata = "dist-info-metadata", True
            if core_metadata is True and wheel is not None:
                core_metadata = {"sha256": hashlib.sha256(wheel.metadata.encode()).hexdigest()}
            entry[key] = core_metadata
            if serve_metadata and wheel is not None:
                self.files[path + ".metadata"] = wheel.metadata.encode()
        if yanked is not None:
            entry["yanked"] = yanked
        self.projects.setdefault(project, []).append(entry)
        return entry

    def record(self, hit: Hit) -> None:
        with self._lock:
            self.hits.append(hit)

    def file_hits(self, filename: str) -> list[Hit]:
        return [h for h in self.hits if h.path == f"/files/{filename}"]

    def start(self) -> "IndexServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(server: IndexServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
            # recorded before answering, so the log keeps the client's (sequential) order
            server.record(Hit(urlsplit(self.path).path, self.headers.get("Range"),
                              self.headers.get("Accept"), status, len(body)))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self):  # a file's headers (its Content-Length), no body
            data = server.files.get(urlsplit(self.path).path)
            server.record(Hit(urlsplit(self.path).path, None, None, 200 if data is not None else 404, 0, "HEAD"))
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data) if data is not None else 0))
            self.end_headers()

        def do_GET(self):
            path = urlsplit(self.path).path
            m = re.fullmatch(r"/simple/([^/]+)/", path)
            if m:
                project = m.group(1)
                if project not in server.projects:
                    return self._send(404, b"not found", "text/plain")
                if project in server.html_only or JSON_ACCEPT not in (self.headers.get("Accept") or ""):
                    return self._send(200, b"<html><body>simple</body></html>", "text/html")
                doc = {"meta": {"api-version": "1.1"}, "name": project, "files": server.projects[project]}
                return self._send(200, json.dumps(doc).encode(), JSON_ACCEPT)
            data = server.files.get(path)
            if data is None:
                return self._send(404, b"not found", "text/plain")
            rng = self.headers.get("Range")
            if rng is None or server.ignore_range:
                return self._send(200, data, "application/octet-stream")
            r = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            total = len(data)
            if not r or (r.group(1) == "" and r.group(2) == ""):
                return self._send(400, b"bad range", "text/plain")
            if r.group(1) == "":  # suffix: the last N bytes
                start, end = max(0, total - int(r.group(2))), total - 1
            else:
                start = int(r.group(1))
                end = min(int(r.group(2)), total - 1) if r.group(2) else total - 1
            if start >= total or end < start:
                return self._send(416, b"", "text/plain", {"Content-Range": f"bytes */{total}"})
            return self._send(206, data[start:end + 1], "application/octet-stream",
                              {"Content-Range": f"bytes {start}-{end}/{total}"})

    return Handler


@pytest.fixture
def server():
    srv = IndexServer().start()
    yield srv
    srv.stop()


def make_index(server: IndexServer, cache_dir: Path) -> PackageIndex:
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment for 127.0.0.1
    return PackageIndex(server.url + "/simple/", cache_dir=cache_dir, session=session)


def assert_ranges_only(server: IndexServer, wheel: Wheel, *, max_requests: int = 3) -> list[Hit]:
    hits = server.file_hits(wheel.filename)
    assert hits, "the wheel was never read"
    assert len(hits) <= max_requests
    for h in hits:
        assert h.range is not None, f"a GET without Range fetched the whole wheel: {h}"
        assert h.status == 206
        assert h.sent < len(wheel.data)
    assert sum(h.sent for h in hits) < len(wheel.data) // 8
    return hits


# --- tag selection (pure) --------------------------------------------------------------
def _wf(tag: str) -> WheelFile:
    return WheelFile(filename=f"x-1.0-{tag}.whl", url="http://127.0.0.1/x", sha256="", version=Version("1.0"),
                     tags=frozenset({tag}), has_metadata=False, yanked=False)


@pytest.mark.parametrize(
    "tag,python,glibc,ok",
    [
        ("cp311-cp311-manylinux_2_28_x86_64", "3.11", "2.36", True),
        ("cp311-cp311-manylinux_2_28_x86_64", "3.11", "2.28", True),
        ("cp311-cp311-manylinux_2_28_x86_64", "3.11", "2.17", False),
        ("cp311-cp311-manylinux_2_17_x86_64", "3.11", "2.9", False),  # numeric, not string, compare
        ("cp311-cp311-manylinux1_x86_64", "3.11", "2.36", True),
        ("cp311-cp311-manylinux1_x86_64", "3.11", "2.5", True),
        ("cp311-cp311-manylinux2010_x86_64", "3.11", "2.12", True),
        ("cp311-cp311-manylinux2014_x86_64", "3.11", "2.17", True),
        ("cp311-cp311-manylinux2014_x86_64", "3.11", "2.12", False),
        ("cp312-cp312-manylinux_2_28_x86_64", "3.11", "2.36", False),  # wrong Python
        ("cp311-cp311-manylinux_2_28_aarch64", "3.11", "2.36", False),  # wrong machine
        ("cp311-cp311-linux_x86_64", "3.11", "2.36", False),  # not a portable tag
        ("cp311-cp311-win_amd64", "3.11", "2.36", False),
        ("cp311-cp311-macosx_11_0_arm64", "3.11", "2.36", False),
        ("py3-none-any", "3.11", "2.36", True),
        ("cp311-abi3-manylinux_2_17_x86_64", "3.11", "2.36", True),
        ("cp313-cp313-manylinux_2_28_x86_64", "3.13", "2.41", True),
        ("cp39-abi3-manylinux_2_17_x86_64", "3.11", "2.36", True),  # the stable ABI runs on newer CPythons
        ("cp312-abi3-manylinux_2_17_x86_64", "3.11", "2.36", False),  # ... not on older ones
        ("cp39-abi3-manylinux_2_17_x86_64", "3.13", "2.41", True),
    ],
)
def test_supports(tag, python, glibc, ok):
    assert _wf(tag).supports(python, glibc) is ok


def test_compressed_tag_set_matches_any_of_its_platforms():
    from packaging.utils import parse_wheel_filename
    name = "torch-2.5.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    tags = frozenset(str(t) for t in parse_wheel_filename(name)[3])
    w = WheelFile(name, "u", "", Version("2.5.1"), tags, False, False)
    assert w.supports("3.11", "2.17") and not w.supports("3.11", "2.16") and not w.supports("3.12", "2.36")


# --- listing -------------------------------------------------------------------------
def test_versions_newest_first_without_yanked_or_sdist_only(server, tmp_path, wheels):
    w = wheels["small"]
    for v in ("2.4.1", "2.5.1", "2.10.0", "2.9.1", "2.11.0rc1"):
        server.add("torch", w, filename=f"torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl")
    server.add("torch", w, filename="torch-2.6.0-cp311-cp311-manylinux_2_28_x86_64.whl", yanked=True)
    server.add("torch", w, filename="torch-2.7.0-cp311-cp311-manylinux_2_28_x86_64.whl", yanked="broken CUDA")
    server.add("torch", w, filename="torch-2.8.0-cp311-cp311-manylinux_2_28_x86_64.whl", yanked=False)
    server.add("torch", w, filename="torch-3.0.0.tar.gz")  # sdist only: no wheel
    server.add("torch", w, filename="torch-not-a-version-x-y-z.whl")  # unparsable: skipped
    idx = make_index(server, tmp_path / "cache")
    assert idx.versions("torch") == [Version(v) for v in
                                     ("2.11.0rc1", "2.10.0", "2.9.1", "2.8.0", "2.5.1", "2.4.1")]
    # the listing is read once per index object
    idx.versions("torch")
    idx.wheel_for("torch", Version("2.5.1"), "3.11", "2.36")
    listing = [h for h in server.hits if h.path == "/simple/torch/"]
    assert len(listing) == 1 and JSON_ACCEPT in listing[0].accept


def test_versions_with_one_yanked_file_keeps_the_version(server, tmp_path, wheels):
    w = wheels["small"]
    server.add("torch", w, filename="torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl", yanked=True)
    server.add("torch", w, filename="torch-2.5.1-cp312-cp312-manylinux_2_28_x86_64.whl")
    idx = make_index(server, tmp_path / "cache")
    assert idx.versions("torch") == [Version("2.5.1")]
    assert idx.wheel_for("torch", Version("2.5.1"), "3.11", "2.36") is None  # the yanked one is not offered
    assert idx.wheel_for("torch", Version("2.5.1"), "3.12", "2.36").filename.startswith("torch-2.5.1-cp312")


@pytest.fixture
def tagged(server, wheels):
    w = wheels["small"]
    for tag in ("cp311-cp311-manylinux_2_28_x86_64", "cp311-cp311-manylinux_2_28_aarch64",
                "cp312-cp312-manylinux_2_28_x86_64", "cp310-cp310-manylinux1_x86_64",
                "cp313-cp313-manylinux_2_28_x86_64"):
        server.add("torch", w, filename=f"torch-2.5.1-{tag}.whl")
    server.add("torch", w, filename="torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl")
    server.add("torch", w, filename="torch-2.4.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    return server


@pytest.mark.parametrize(
    "version,python,glibc,expected",
    [
        ("2.5.1", "3.11", "2.36", "torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl"),
        ("2.5.1", "3.11", "2.17", "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl"),  # 2_28 is too new
        ("2.5.1", "3.12", "2.39", "torch-2.5.1-cp312-cp312-manylinux_2_28_x86_64.whl"),
        ("2.5.1", "3.12", "2.17", None),
        ("2.5.1", "3.10", "2.35", "torch-2.5.1-cp310-cp310-manylinux1_x86_64.whl"),
        ("2.5.1", "3.13", "2.41", "torch-2.5.1-cp313-cp313-manylinux_2_28_x86_64.whl"),
        ("2.5.1", "3.9", "2.36", None),  # no cp39 wheel
        ("2.4.1", "3.11", "2.36", "torch-2.4.1-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"),
        ("2.4.1", "3.11", "2.12", None),
        ("2.6.0", "3.11", "2.36", None),  # no such version
    ],
)
def test_wheel_for_picks_by_python_and_glibc(tagged, tmp_path, version, python, glibc, expected):
    idx = make_index(tagged, tmp_path / "cache")
    w = idx.wheel_for("torch", Version(version), python, glibc)
    assert (w.filename if w else None) == expected
    if w:
        assert w.url == f"{tagged.url}/files/{expected}"
        assert w.version == Version(version)
        assert w.sha256 and not w.yanked


def test_wheel_url_relative_to_the_project_page(server, tmp_path, wheels):
    entry = server.add("torch", wheels["small"])
    entry["url"] = "../../files/" + wheels["small"].filename
    idx = make_index(server, tmp_path / "cache")
    (w,) = idx.wheels("torch")
    assert w.url == f"{server.url}/files/{wheels['small'].filename}"
    assert {r.name: str(r.specifier) for r in idx.requires(w)} == EXPECTED


def test_unknown_project_is_an_index_error(server, tmp_path):
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(PackageIndexError) as exc:
        idx.versions("no-such-project")
    assert "no project 'no-such-project'" in exc.value.message
    assert server.url in exc.value.message


def test_html_only_index_is_an_index_error(server, tmp_path, wheels):
    server.add("torch", wheels["small"])
    server.html_only.add("torch")
    with pytest.raises(PackageIndexError, match="without the simple JSON API"):
        make_index(server, tmp_path / "cache").versions("torch")


def test_unreachable_index_is_an_index_error(tmp_path):
    session = requests.Session()
    session.trust_env = False
    with socket.socket() as s:  # bound, never listening: refused, and no other test's server can take the port
        s.bind(("127.0.0.1", 0))
        idx = PackageIndex(f"http://127.0.0.1:{s.getsockname()[1]}/simple", cache_dir=tmp_path, session=session)
        with pytest.raises(PackageIndexError) as exc:
            idx.versions("torch")
    assert "cannot reach the package index" in exc.value.message and exc.value.hint


def test_default_index_is_pypi_but_not_contacted_on_construction(tmp_path):
    idx = PackageIndex(cache_dir=tmp_path)
    assert idx.url == DEFAULT_INDEX == "https://pypi.org/simple"
    assert idx._projects == {}


# --- metadata by range requests ------------------------------------------------------
@pytest.mark.parametrize("kind", ["far", "near", "bigcd", "zip64"])
def test_requires_by_range_requests(server, tmp_path, wheels, kind):
    w = wheels[kind]
    server.add("torch", w)
    idx = make_index(server, tmp_path / "cache")
    (wf,) = idx.wheels("torch")
    assert not wf.has_metadata
    reqs = idx.requires(wf)
    assert {r.name: str(r.specifier) for r in reqs} == EXPECTED
    assert str(reqs[3].marker) == 'platform_system == "Linux" and platform_machine == "x86_64"'
    hits = assert_ranges_only(server, w)
    assert hits[0].range == f"bytes=-{TAIL}"
    assert not any(h.path.endswith(".metadata") for h in server.hits)


def test_small_wheel_is_read_through_the_tail_range(server, tmp_path, wheels):
    w = wheels["small"]
    assert len(w.data) < TAIL  # the suffix range covers the whole file: the server answers all of it
    server.add("torch", w)
    idx = make_index(server, tmp_path / "cache")
    assert {r.name: str(r.specifier) for r in idx.requires(idx.wheels("torch")[0])} == EXPECTED
    hits = server.file_hits(w.filename)
    assert [h.range for h in hits][0] == f"bytes=-{TAIL}" and all(h.status == 206 for h in hits)


def test_far_metadata_is_outside_the_tail_and_read_by_its_own_range(server, tmp_path, wheels):
    w = wheels["far"]
    assert len(w.data) - w.metadata_offset > TAIL  # the case the tail read cannot cover
    server.add("torch", w)
    idx = make_index(server, tmp_path / "cache")
    idx.requires(idx.wheels("torch")[0])
    hits = assert_ranges_only(server, w, max_requests=2)
    assert [h.range.split("-")[0] for h in hits] == ["bytes=", f"bytes={w.metadata_offset}"]


def test_near_metadata_sits_in_the_tail(wheels):
    w = wheels["near"]
    assert len(w.data) - w.metadata_offset < TAIL


def test_big_central_directory_is_read_by_a_second_range(server, tmp_path, wheels):
    w = wheels["bigcd"]
    cd_size, cd_offset = eocd_fields(w.data)
    assert cd_size > TAIL  # the directory itself does not fit in the tail
    server.add("torch", w)
    idx = make_index(server, tmp_path / "cache")
    idx.requires(idx.wheels("torch")[0])
    hits = assert_ranges_only(server, w, max_requests=3)
    assert [h.range for h in hits[:2]] == [f"bytes=-{TAIL}", f"bytes={cd_offset}-{cd_offset + cd_size - 1}"]
    assert hits[2].range.startswith(f"bytes={w.metadata_offset}-")


def test_zip64_records_are_followed(server, tmp_path, wheels, monkeypatch):
    import envkit.index.client as index_mod

    w = wheels["zip64"]
    assert eocd_fields(w.data)[1] == 0xFFFFFFFF  # the plain end record defers to zip64
    seen = []
    real = index_mod._zip64_extra

    def spy(extra, csize, usize, offset):
        out = real(extra, csize, usize, offset)
        seen.append(((csize, usize, offset), out))
        return out

    monkeypatch.setattr(index_mod, "_zip64_extra", spy)
    server.add("torch", w)
    idx = make_index(server, tmp_path / "cache")
    assert {r.name: str(r.specifier) for r in idx.requires(idx.wheels("torch")[0])} == EXPECTED
    # the METADATA entry's offset came from its zip64 extra field
    assert any(args[2] == 0xFFFFFFFF and out[2] == w.metadata_offset for args, out in seen)
    assert_ranges_only(server, w)


def test_server_ignoring_range_is_a_clear_error(server, tmp_path, wheels):
    w = wheels["far"]
    server.add("torch", w)
    server.ignore_range = True
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(PackageIndexError) as exc:
        idx.requires(idx.wheels("torch")[0])
    assert "does not serve byte ranges (status 200)" in exc.value.message
    assert w.filename in exc.value.message
    assert not list((tmp_path / "cache").glob("*.METADATA"))  # nothing half-read was cached


def test_not_a_zip_is_an_index_error(server, tmp_path):
    server.add("torch", None, filename="torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl")
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(PackageIndexError, match="no zip directory"):
        idx.requires(idx.wheels("torch")[0])


def test_wheel_without_metadata_member_is_an_index_error(server, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("torch/__init__.py", "")
        zf.writestr("torch/sub/x.dist-info/METADATA", "Name: decoy\n")  # not top level
    w = Wheel("torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl", buf.getvalue(), "", 0)
    server.add("torch", w)
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(PackageIndexError, match="no member a top-level .dist-info/METADATA"):
        idx.requires(idx.wheels("torch")[0])


# --- PEP 658 .metadata --------------------------------------------------------------
@pytest.mark.parametrize("advert", [True, {"sha256": "0" * 64}, "legacy"])
def test_requires_via_metadata_file_makes_no_range_request(server, tmp_path, wheels, advert):
    w = wheels["far"]
    server.add("torch", w, core_metadata=advert)
    idx = make_index(server, tmp_path / "cache")
    (wf,) = idx.wheels("torch")
    assert wf.has_metadata
    assert {r.name: str(r.specifier) for r in idx.requires(wf)} == EXPECTED
    assert server.file_hits(w.filename) == []  # the wheel itself was never touched
    assert not any(h.range for h in server.hits)
    meta_hits = [h for h in server.hits if h.path.endswith(".metadata")]
    assert len(meta_hits) == 1 and meta_hits[0].status == 200


def test_core_metadata_false_means_ranges(server, tmp_path, wheels):
    w = wheels["far"]
    server.add("torch", w, core_metadata=False)
    idx = make_index(server, tmp_path / "cache")
    (wf,) = idx.wheels("torch")
    assert not wf.has_metadata
    idx.requires(wf)
    assert_ranges_only(server, w)
    assert not any(h.path.endswith(".metadata") for h in server.hits)


def test_advertised_metadata_missing_falls_back_to_ranges(server, tmp_path, wheels):
    w = wheels["far"]
    server.add("torch", w, core_metadata=True, serve_metadata=False)
    idx = make_index(server, tmp_path / "cache")
    assert {r.name: str(r.specifier) for r in idx.requires(idx.wheels("torch")[0])} == EXPECTED
    assert [h.status for h in server.hits if h.path.endswith(".metadata")] == [404]
    assert_ranges_only(server, w)


def test_metadata_file_url_ignores_a_hash_fragment(server, tmp_path, wheels):
    """PEP 658: the .metadata file sits beside the wheel; a '#sha256=' fragment is not part of the path."""
    w = wheels["far"]
    server.add("torch", w, core_metadata=True, url_suffix="#sha256=" + w.sha256)
    idx = make_index(server, tmp_path / "cache")
    reqs = idx.requires(idx.wheels("torch")[0])
    assert server.file_hits(w.filename) == []  # the wheel was not fetched (whole) in its place
    assert [h.path for h in server.hits if h.path.startswith("/files/")] == [f"/files/{w.filename}.metadata"]
    assert {r.name: str(r.specifier) for r in reqs} == EXPECTED


def test_range_reads_ignore_a_hash_fragment(server, tmp_path, wheels):
    w = wheels["far"]
    server.add("torch", w, url_suffix="#sha256=" + w.sha256)
    idx = make_index(server, tmp_path / "cache")
    assert {r.name: str(r.specifier) for r in idx.requires(idx.wheels("torch")[0])} == EXPECTED
    assert_ranges_only(server, w)


# --- disk cache --------------------------------------------------------------------
def test_metadata_is_cached_on_disk_by_sha256(server, tmp_path, wheels):
    w = wheels["far"]
    server.add("torch", w)
    cache = tmp_path / "cache"
    idx = make_index(server, cache)
    (wf,) = idx.wheels("torch")
    first = idx.requires(wf)
    assert (cache / f"{w.sha256}.METADATA").read_text() == w.metadata
    assert not [p for p in cache.iterdir() if ".tmp" in p.name]
    n = len(server.hits)
    assert [str(r) for r in idx.requires(wf)] == [str(r) for r in first]
    assert len(server.hits) == n  # same object: no request
    again = make_index(server, cache)  # a fresh client, same cache directory
    assert [str(r) for r in again.requires(wf)] == [str(r) for r in first]
    assert len(server.hits) == n  # nothing at all: not even the listing


def test_cache_without_hash_is_keyed_by_url(server, tmp_path, wheels):
    w = wheels["near"]
    server.add("torch", w, with_hash=False)
    cache = tmp_path / "cache"
    idx = make_index(server, cache)
    (wf,) = idx.wheels("torch")
    assert wf.sha256 == ""
    idx.requires(wf)
    key = hashlib.sha256(wf.url.encode()).hexdigest()
    assert (cache / f"{key}.METADATA").is_file()
    n = len(server.hits)
    make_index(server, cache).requires(wf)
    assert len(server.hits) == n


def test_cached_metadata_is_used_without_contacting_anyone(tmp_path):
    """A cache hit needs no server: the WheelFile points at a port nobody listens on."""
    sha = "ab" * 32
    (tmp_path / f"{sha}.METADATA").write_text(metadata_text("torch", "2.5.1", TORCH_REQUIRES))
    wf = WheelFile("torch-2.5.1-cp311-cp311-manylinux_2_28_x86_64.whl", "http://127.0.0.1:9/x.whl", sha,
                   Version("2.5.1"), frozenset({"cp311-cp311-manylinux_2_28_x86_64"}), False, False)
    idx = PackageIndex("http://127.0.0.1:9/simple", cache_dir=tmp_path)
    assert {r.name: str(r.specifier) for r in idx.requires(wf)} == EXPECTED


def test_a_ca_bundle_verifies_every_request_over_the_environments(tmp_path):
    """requests lets REQUESTS_CA_BUNDLE win over a session's own ``verify``, so the bundle goes with each request."""
    seen = []

    class Session:
        def get(self, url, **kwargs):
            seen.append(kwargs.get("verify"))
            raise requests.ConnectionError("no network in this test")

    bundle = tmp_path / "ca.pem"
    with pytest.raises(PackageIndexError):
        PackageIndex("https://mirror.example/simple", cache_dir=tmp_path, session=Session(), ca_bundle=bundle).versions("x")
    with pytest.raises(PackageIndexError):
        PackageIndex("https://mirror.example/simple", cache_dir=tmp_path, session=Session()).versions("x")
    assert seen == [str(bundle), None]


def test_trusted_hosts_are_the_plain_http_indexes_once_each():
    from envkit.index.urls import trusted_hosts

    assert trusted_hosts(["http://m.example:8080/simple", None, "https://pypi.org/simple", "http://m.example:8080/x",
                          "http://other.example/simple"]) == ["m.example:8080", "other.example"]
    assert trusted_hosts([DEFAULT_INDEX]) == []


def test_the_closure_is_compiled_with_the_ca_bundle(monkeypatch, tmp_path):
    import subprocess

    from envkit.index import closure

    seen = {}

    def fake_run(cmd, **kwargs):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 0, "six==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n", "")

    monkeypatch.setattr(closure.procs, "run", fake_run)
    pins = closure.compile_closure(["six"], python="3.11", glibc="2.36", index_url="http://m.example:8080/simple",
                                   ca_bundle=tmp_path / "ca.pem")
    assert [p.name for p in pins] == ["six"]
    cmd = seen["cmd"]
    assert cmd[cmd.index("--cert") + 1] == str(tmp_path / "ca.pem")
    assert "--allow-insecure-host" not in cmd  # an http index needs nothing (uv asks it as named); TLS is never skipped
    closure.compile_closure(["six"], python="3.11", glibc="2.36", index_url=DEFAULT_INDEX)
    assert "--cert" not in seen["cmd"]


def test_resolve_spec_gives_the_resolver_the_builds_ca_bundle(monkeypatch, tmp_path):
    """The index client, uv and a variant's own index all verify TLS with the spec's bundle."""
    from pathlib import Path as P

    from envkit.app import resolve as pipeline

    root = P(__file__).resolve().parents[3]
    shutil.copyfile(certifi.where(), tmp_path / "ca.pem")  # real certificates: envkit loads the bundle
    spec = tmp_path / "team.yaml"
    spec.write_text((root / "examples" / "team.yaml").read_text() + "build:\n  ca_bundle: ca.pem\n")  # (it has no build:)
    seen = {}

    class Stop(Exception):
        pass

    def fake_resolve(spec, catalog, index, *, closure, index_for, sizes):
        seen.update(index=index, closure=closure, variant=index_for("https://download.pytorch.org/whl/cu126"))
        raise Stop

    monkeypatch.setattr(pipeline, "resolve", fake_resolve)
    with pytest.raises(Stop):
        pipeline.resolve_spec(spec)
    assert seen["index"]._tls == seen["variant"]._tls == {"verify": str(tmp_path / "ca.pem")}
    assert seen["closure"].keywords == {"ca_bundle": tmp_path / "ca.pem"}


def test_a_wheels_directory_is_read_once_for_all_its_members(server, tmp_path):
    wheel = build_wheel("alpha", "1.0", [])
    server.add("alpha", wheel)
    index = make_index(server, tmp_path)
    (w,) = index.wheels("alpha")
    names = [n for n, _ in index.members(w)]
    directory_reads = len(server.file_hits(wheel.filename))
    assert index.member(w, "alpha/__init__.py") == b"import os\n"
    assert index.member(w, names[-1]) == b""  # RECORD
    assert len(server.file_hits(wheel.filename)) == directory_reads + 2  # each member's data; the directory kept
