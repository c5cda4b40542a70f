"""A small client for a Python package index (PEP 691 simple JSON API).

It answers the questions the resolver asks: which versions of a project exist, what
a given wheel requires (its METADATA ``Requires-Dist``, where a torch wheel pins the CUDA
runtime, cuDNN and NCCL it bundles), and what one member of a wheel holds (``member``:
only the zip's central directory and that member are read by HTTP range requests, e.g.
a few kilobytes of METADATA out of a gigabyte). Metadata comes from the PEP 658
``.metadata`` file when the index offers one, else from the wheel's own member. What is
read (metadata, and the facts callers derive from members) is cached on disk by the
wheel's sha256, which never changes (``cached``).
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import struct
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import requests
from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import PackageIndexError, WheelReadError
from .login import login_hint
from .urls import DEFAULT_INDEX, JSON_ACCEPT

TIMEOUT = 60
DIRECTORIES = 16  # zip directories kept per client (a wheel's members are read one after another, 8 wheels at once)
MEMBER_CAP = 128 << 20  # the most one member may take, compressed or inflated (torch's libtorch_python.so: ~35 MB)


@dataclass(frozen=True)
class WheelFile:
    filename: str
    url: str
    sha256: str
    version: Version
    tags: frozenset[str]  # e.g. {"cp311-cp311-manylinux_2_28_x86_64"}
    has_metadata: bool
    yanked: bool
    size: int | None = None  # bytes, as the listing gives it (PEP 700's ``size``; older indexes give none)
    upload_time: str | None = None  # ISO 8601, as the listing gives it (PEP 700's ``upload-time``)

    def supports(self, python: str, glibc: str, machine: str = "x86_64") -> bool:
        """Installable on CPython ``python`` (e.g. '3.11') with glibc ``glibc`` (e.g. '2.36')."""
        cp = "cp" + python.replace(".", "")
        py_t = tuple(int(x) for x in python.split("."))
        glibc_t = tuple(int(x) for x in glibc.split("."))
        for tag in self.tags:
            interp, abi, plat = tag.split("-")
            if abi == "abi3":  # the stable ABI: built for cpXY, runs on every CPython >= X.Y
                if not (interp.startswith("cp") and _cp_version(interp) <= py_t):
                    continue
            elif interp not in (cp, "py3") or abi not in (cp, "none"):
                continue
            if plat == "any":
                return True
            for p in plat.split("."):
                if p.endswith(machine) and _manylinux_ok(p, glibc_t):
                    return True
        return False


def _release_versions(doc: dict) -> list[Version]:
    out = set()
    for text in doc.get("versions") or ():
        try:
            out.add(Version(text))
        except InvalidVersion:
            continue
    return sorted(out, reverse=True)


def _cp_version(interp: str) -> tuple[int, ...]:
    digits = interp[2:]
    return (int(digits[0]), int(digits[1:] or 0))


def _manylinux_ok(plat: str, glibc: tuple[int, ...]) -> bool:
    legacy = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
    for prefix, need in legacy.items():
        if plat.startswith(prefix + "_"):
            return need <= glibc
    if plat.startswith("manylinux_"):
        parts = plat.split("_")
        try:
            return (int(parts[1]), int(parts[2])) <= glibc
        except (IndexError, ValueError):
            return False
    return False


def _raise_for_login(resp: requests.Response, url: str) -> None:
    """A 401/403: the index wants a login (none found in the netrc file, or the one there was refused)."""
    if resp.status_code in (401, 403):
        raise PackageIndexError(f"{url} answered {resp.status_code} {resp.reason}: the index asks for a login",
                                hint=login_hint(url))


class PackageIndex:
    def __init__(self, url: str = DEFAULT_INDEX, *, cache_dir: Path | None = None,
                 session: requests.Session | None = None, ca_bundle: Path | None = None):
        """``ca_bundle``: the PEM bundle to verify the index's TLS with (the spec's, as builds use it), in
        place of the default trust store; passed with each request, since requests lets
        ``REQUESTS_CA_BUNDLE`` win over a session's own ``verify``."""
        self.url = url.rstrip("/")
        self.session = session or requests.Session()
        self._tls: dict[str, Any] = {"verify": str(ca_bundle)} if ca_bundle is not None else {}
        self.cache_dir = (
            cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "envkit" / "metadata"
        )
        self._projects: dict[str, list[WheelFile]] = {}
        self._releases: dict[str, list[Version]] = {}
        self._directories: OrderedDict[str, bytes] = OrderedDict()  # the last DIRECTORIES zip directories read
        self._directories_lock = threading.Lock()
        self.bytes_fetched = 0  # response bodies read through this client, for reports

    # --- listing ----------------------------------------------------------------------
    def wheels(self, project: str) -> list[WheelFile]:
        if project in self._projects:
            return self._projects[project]
        url = f"{self.url}/{project}/"
        try:
            resp = self.session.get(url, headers={"Accept": JSON_ACCEPT}, timeout=TIMEOUT, **self._tls)
        except requests.RequestException as exc:
            raise PackageIndexError(f"cannot reach the package index at {url}: {exc}",
                                    hint=("check the network, the proxy variables and the index's address (the spec's "
                                          "build.index_url, or a PyTorch variant's index: build.variant_index_url, "
                                          "else the catalog's)"
                                          if self.url != DEFAULT_INDEX.rstrip("/") else
                                          "check the network and the proxy variables, or set build.index_url in "
                                          "the spec to a mirror that answers")) from None
        self.bytes_fetched += len(resp.content)
        _raise_for_login(resp, url)
        if resp.status_code == 404:
            raise PackageIndexError(f"the index {self.url} has no project {project!r}")
        if not resp.ok or "json" not in resp.headers.get("content-type", ""):
            raise PackageIndexError(f"{url} answered {resp.status_code} without the simple JSON API")
        files = []
        doc = resp.json()
        self._releases[project] = _release_versions(doc)
        for f in doc.get("files", []):
            name = f["filename"]
            if not name.endswith(".whl"):
                continue
            try:
                _, version, _, tags = parse_wheel_filename(name)
            except (InvalidWheelFilename, InvalidVersion):
                continue
            files.append(WheelFile(
                filename=name,
                url=requests.compat.urljoin(url, f["url"]),
                sha256=f.get("hashes", {}).get("sha256", ""),
                version=version,
                tags=frozenset(str(t) for t in tags),
                has_metadata=bool(f.get("core-metadata") or f.get("dist-info-metadata")),
                yanked=bool(f.get("yanked")),
                size=f["size"] if isinstance(f.get("size"), int) and f["size"] >= 0 else None,
                upload_time=f["upload-time"] if isinstance(f.get("upload-time"), str) else None,
            ))
        self._projects[project] = files
        return files

    def versions(self, project: str) -> list[Version]:
        """Every non-yanked version with at least one wheel, newest first."""
        return sorted({w.version for w in self.wheels(project) if not w.yanked}, reverse=True)

    def releases(self, project: str) -> list[Version]:
        """Every version the listing names, with a wheel or not (PEP 700's ``versions``; else those of its wheels),
        newest first: what a requirement admits before wheels are asked for."""
        self.wheels(project)
        return self._releases[project] or self.versions(project)

    def wheel_for(self, project: str, version: Version, python: str, glibc: str) -> WheelFile | None:
        """The wheel ``project==version`` installs here. As PEP 440's ``==`` (and pip) read it, a ``version``
        without a local label also matches a build that has one: PyTorch's variant indexes name theirs
        ``torch-2.11.0+cu126-...``; a wheel of exactly ``version`` wins, then the highest local build."""
        usable = [w for w in self.wheels(project) if not w.yanked and w.supports(python, glibc)]
        matches = [w for w in usable if w.version == version]
        if not matches and version.local is None:
            matches = [w for w in usable if w.version.public == version.public]
        return sorted(matches, key=lambda w: (w.version, w.filename))[-1] if matches else None

    def size(self, wheel: WheelFile) -> int | None:
        """``wheel``'s bytes: the listing's ``size`` (PEP 700), else the ``Content-Length`` a HEAD of the file
        answers; None when neither says."""
        if wheel.size is not None:
            return wheel.size
        url = wheel.url.split("#", 1)[0]
        try:
            resp = self.session.head(url, allow_redirects=True, timeout=TIMEOUT, **self._tls)
        except requests.RequestException as exc:
            raise PackageIndexError(f"cannot fetch {url}: {exc}") from None
        _raise_for_login(resp, url)
        length = resp.headers.get("content-length", "")
        return int(length) if resp.ok and length.isdigit() else None

    # --- metadata ----------------------------------------------------------------------
    def requires(self, wheel: WheelFile) -> list[Requirement]:
        meta = email.parser.Parser().parsestr(self.metadata(wheel))
        return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]

    def metadata(self, wheel: WheelFile) -> str:
        def fetch() -> str:
            if wheel.has_metadata:
                resp = self._get(wheel.url.split("#", 1)[0] + ".metadata")  # PEP 658: beside the file, no fragment
                if resp.ok:
                    return resp.text
            return self.member(wheel, _is_metadata, what="a top-level .dist-info/METADATA").decode("utf-8")

        return self.cached(wheel, "METADATA", fetch)

    def cached(self, wheel: WheelFile, kind: str, compute: Callable[[], str]) -> str:
        """``compute()``, kept on disk as ``<sha256>.<kind>``: what a wheel holds never changes. ``kind`` names the
        fact (``METADATA``, or a reader's own key that it versions); a failing ``compute`` writes nothing."""
        return self.remembered(wheel.sha256 or hashlib.sha256(wheel.url.encode()).hexdigest(), kind, compute)

    def remembered(self, key: str, kind: str, compute: Callable[[], str]) -> str:
        """``compute()``, kept on disk in ``cache_dir`` as ``<key>.<kind>``; ``key`` (a hex digest) must name bytes
        that never change (a wheel's sha256, or the digest of a pin's hashes). A failing ``compute`` writes
        nothing."""
        known = self.recall(key, kind)
        if known is not None:
            return known
        cache = self.cache_dir / f"{key}.{kind}"
        text = compute()
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(cache.suffix + f".tmp{os.getpid()}-{threading.get_ident()}")  # images side by side
        tmp.write_text(text)
        tmp.replace(cache)
        return text

    def recall(self, key: str, kind: str) -> str | None:
        """What ``remembered`` kept as ``<key>.<kind>``; None when nothing is kept."""
        cache = self.cache_dir / f"{key}.{kind}"
        return cache.read_text() if cache.is_file() else None

    # --- one member of a remote wheel, by range requests ---------------------------------
    def members(self, wheel: WheelFile) -> list[tuple[str, int]]:
        """Each member of ``wheel`` with its inflated size, from the zip directory (one or two range requests)."""
        url = wheel.url.split("#", 1)[0]
        return [(e.name, e.usize) for e in _entries(self._central_directory(url, wheel.filename))]

    def member(self, wheel: WheelFile, name: str | Callable[[str], bool], *, max_bytes: int = MEMBER_CAP,
               what: str | None = None) -> bytes:
        """The bytes of one member of ``wheel``, read without downloading the wheel.

        Three range requests at most: the last 64 KiB (the end-of-directory records, often the whole central
        directory), the directory when it lies further back (both kept for the next member), and the member's local
        header with its data. ``name`` is the member's path, or a test on paths that exactly one member must pass
        (``what`` says which in messages). Raises ``WheelReadError`` when the server does not serve ranges, the
        member is absent, ambiguous, bigger than ``max_bytes`` (compressed or inflated), stored with a compression
        other than deflate, or fails its CRC; a failed connection is a plain ``PackageIndexError``. Not cached:
        callers cache what they derive from it through ``cached``.
        """
        url = wheel.url.split("#", 1)[0]
        cd = self._central_directory(url, wheel.filename)
        test = name if callable(name) else (lambda n: n == name)
        hits = [e for e in _entries(cd) if test(e.name)]
        what = what or (name if isinstance(name, str) else "the member asked for")
        if not hits:
            raise WheelReadError(f"{wheel.filename} has no member {what}")
        if len(hits) > 1:
            raise WheelReadError(f"{wheel.filename} has {len(hits)} members matching {what}: "
                                 + ", ".join(e.name for e in hits[:4]))
        entry = hits[0]
        if max(entry.csize, entry.usize) > max_bytes:
            raise WheelReadError(f"{wheel.filename}: {entry.name} is {entry.csize:,} bytes compressed, "
                                 f"{entry.usize:,} inflated; over the cap of {max_bytes:,}")
        if entry.method not in (0, 8):
            raise WheelReadError(f"{wheel.filename}: {entry.name} uses zip compression method {entry.method}; "
                                 "only stored (0) and deflate (8) are read")
        head, _ = self._range(url, entry.offset, entry.offset + 30 + 65535 + entry.csize)
        if head[:4] != b"PK\x03\x04":
            raise WheelReadError(f"{wheel.filename}: no local header for {entry.name} at {entry.offset}")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        start = 30 + name_len + extra_len
        data = head[start: start + entry.csize]
        if entry.method == 8:
            inflater = zlib.decompressobj(-15)
            try:
                raw = inflater.decompress(data, max_bytes + 1)
            except zlib.error as exc:
                raise WheelReadError(f"{wheel.filename}: {entry.name} does not inflate: {exc}") from None
        else:
            raw = data
        if len(raw) != entry.usize or zlib.crc32(raw) != entry.crc:
            raise WheelReadError(f"{wheel.filename}: {entry.name} read back as {len(raw):,} bytes that do not "
                                 f"match its directory entry ({entry.usize:,} bytes, CRC {entry.crc:08x})")
        return raw

    def _get(self, url: str, **headers: str) -> requests.Response:
        try:
            resp = self.session.get(url, headers=headers, timeout=TIMEOUT, **self._tls)
        except requests.RequestException as exc:
            raise PackageIndexError(f"cannot fetch {url}: {exc}") from None
        self.bytes_fetched += len(resp.content)
        _raise_for_login(resp, url)
        return resp

    def _range(self, url: str, start: int, end: int | None = None) -> tuple[bytes, int]:
        spec = f"bytes={start}-{'' if end is None else end}" if start >= 0 else f"bytes={start}"
        resp = self._get(url, Range=spec)
        if resp.status_code != 206:
            raise WheelReadError(f"{url} does not serve byte ranges (status {resp.status_code}); "
                                 "cannot read a member without downloading the whole wheel")
        total = int(resp.headers.get("content-range", "/0").rsplit("/", 1)[-1] or 0)
        return resp.content, total

    def _central_directory(self, url: str, filename: str) -> bytes:
        """The zip directory at ``url``; the last ``DIRECTORIES`` are kept (a wheel's members: one directory read)."""
        with self._directories_lock:
            if url in self._directories:
                self._directories.move_to_end(url)
                return self._directories[url]
        cd = self._read_directory(url, filename)
        with self._directories_lock:
            self._directories[url] = cd
            while len(self._directories) > DIRECTORIES:
                self._directories.popitem(last=False)
        return cd

    def _read_directory(self, url: str, filename: str) -> bytes:
        tail, total = self._range(url, -65536)
        eocd = tail.rfind(b"PK\x05\x06")
        if eocd < 0 or eocd + 22 > len(tail):
            raise WheelReadError(f"{filename}: no zip directory in its last 64 KiB")
        cd_size, cd_offset = struct.unpack("<II", tail[eocd + 12: eocd + 20])
        base = total - len(tail)
        if 0xFFFFFFFF in (cd_size, cd_offset):  # zip64: the locator points at the zip64 end record
            loc = tail.rfind(b"PK\x06\x07", 0, eocd)
            if loc < 0:
                raise WheelReadError(f"{filename}: a zip64 directory without its zip64 locator")
            (eocd64_off,) = struct.unpack("<Q", tail[loc + 8: loc + 16])
            rec = tail[eocd64_off - base:] if eocd64_off >= base else b""
            if rec[:4] != b"PK\x06\x06":
                raise WheelReadError(f"{filename}: its zip64 end record is not where the locator says")
            cd_size, cd_offset = struct.unpack("<QQ", rec[40:56])
        if cd_offset >= base:
            return tail[cd_offset - base: cd_offset - base + cd_size]
        cd, _ = self._range(url, cd_offset, cd_offset + cd_size - 1)
        return cd


@dataclass(frozen=True)
class _Entry:
    name: str
    method: int
    crc: int
    csize: int
    usize: int
    offset: int


def _is_metadata(name: str) -> bool:
    return name.endswith(".dist-info/METADATA") and name.count("/") == 1


def _entries(cd: bytes) -> Iterator[_Entry]:
    """Every central-directory entry of ``cd``, zip64 sizes and offsets resolved."""
    pos = 0
    while pos + 46 <= len(cd) and cd[pos:pos + 4] == b"PK\x01\x02":
        method = struct.unpack("<H", cd[pos + 10: pos + 12])[0]
        crc, csize, usize = struct.unpack("<III", cd[pos + 16: pos + 28])
        n, m, k = struct.unpack("<HHH", cd[pos + 28: pos + 34])
        offset = struct.unpack("<I", cd[pos + 42: pos + 46])[0]
        name = cd[pos + 46: pos + 46 + n].decode("utf-8", "replace")
        if 0xFFFFFFFF in (csize, usize, offset):
            usize, csize, offset = _zip64_extra(cd[pos + 46 + n: pos + 46 + n + m], csize, usize, offset)
        yield _Entry(name, method, crc, csize, usize, offset)
        pos += 46 + n + m + k


def _zip64_extra(extra: bytes, csize: int, usize: int, offset: int) -> tuple[int, int, int]:
    """(uncompressed size, compressed size, offset) with the zip64 extra field's 8-byte values
    in place of the 0xFFFFFFFF ones (the field holds only those, in this order)."""
    i = 0
    while i + 4 <= len(extra):
        hid, size = struct.unpack("<HH", extra[i: i + 4])
        if hid == 1:
            body, j = extra[i + 4: i + 4 + size], 0
            if usize == 0xFFFFFFFF:
                usize = struct.unpack("<Q", body[j: j + 8])[0]
                j += 8
            if csize == 0xFFFFFFFF:
                csize = struct.unpack("<Q", body[j: j + 8])[0]
                j += 8
            if offset == 0xFFFFFFFF:
                offset = struct.unpack("<Q", body[j: j + 8])[0]
            break
        i += 4 + size
    return usize, csize, offset
