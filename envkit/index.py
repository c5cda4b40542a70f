"""A small client for a Python package index (PEP 691 simple JSON API).

It answers two questions the resolver asks: which versions of a project exist, and what
a given wheel requires (its METADATA ``Requires-Dist``, where a torch wheel pins the CUDA
runtime, cuDNN and NCCL it bundles). Metadata comes from the PEP 658 ``.metadata`` file
when the index offers one, else from the wheel itself by HTTP range requests (only the
zip's central directory and the METADATA member are read, a few kilobytes out of a
gigabyte). Metadata is cached on disk by the wheel's sha256, which never changes.
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import requests
from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .errors import PackageIndexError

DEFAULT_INDEX = "https://pypi.org/simple"
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
TIMEOUT = 60


@dataclass(frozen=True)
class WheelFile:
    filename: str
    url: str
    sha256: str
    version: Version
    tags: frozenset[str]  # e.g. {"cp311-cp311-manylinux_2_28_x86_64"}
    has_metadata: bool
    yanked: bool

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


class PackageIndex:
    def __init__(self, url: str = DEFAULT_INDEX, *, cache_dir: Path | None = None,
                 session: requests.Session | None = None):
        self.url = url.rstrip("/")
        self.session = session or requests.Session()
        self.cache_dir = cache_dir or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "envkit" / "metadata"
        self._projects: dict[str, list[WheelFile]] = {}

    # --- listing ----------------------------------------------------------------------
    def wheels(self, project: str) -> list[WheelFile]:
        if project in self._projects:
            return self._projects[project]
        url = f"{self.url}/{project}/"
        try:
            resp = self.session.get(url, headers={"Accept": JSON_ACCEPT}, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise PackageIndexError(f"cannot reach the package index at {url}: {exc}",
                                    hint="check the network or set build.index_url in the spec") from None
        if resp.status_code == 404:
            raise PackageIndexError(f"the index {self.url} has no project {project!r}")
        if not resp.ok or "json" not in resp.headers.get("content-type", ""):
            raise PackageIndexError(f"{url} answered {resp.status_code} without the simple JSON API")
        files = []
        for f in resp.json().get("files", []):
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
            ))
        self._projects[project] = files
        return files

    def versions(self, project: str) -> list[Version]:
        """Every non-yanked version with at least one wheel, newest first."""
        return sorted({w.version for w in self.wheels(project) if not w.yanked}, reverse=True)

    def wheel_for(self, project: str, version: Version, python: str, glibc: str) -> WheelFile | None:
        matches = [w for w in self.wheels(project)
                   if w.version == version and not w.yanked and w.supports(python, glibc)]
        return sorted(matches, key=lambda w: w.filename)[-1] if matches else None

    # --- metadata ---------------------------------------------------------------------
    def requires(self, wheel: WheelFile) -> list[Requirement]:
        meta = email.parser.Parser().parsestr(self.metadata(wheel))
        return [Requirement(r) for r in meta.get_all("Requires-Dist") or []]

    def metadata(self, wheel: WheelFile) -> str:
        cache = self.cache_dir / f"{wheel.sha256 or hashlib.sha256(wheel.url.encode()).hexdigest()}.METADATA"
        if cache.is_file():
            return cache.read_text()
        text = None
        if wheel.has_metadata:
            resp = self._get(wheel.url.split("#", 1)[0] + ".metadata")  # PEP 658: beside the file, no fragment
            text = resp.text if resp.ok else None
        if text is None:
            text = self._metadata_by_range(wheel)
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(cache)
        return text

    def _get(self, url: str, **headers) -> requests.Response:
        try:
            return self.session.get(url, headers=headers, timeout=TIMEOUT)
        except requests.RequestException as exc:
            raise PackageIndexError(f"cannot fetch {url}: {exc}") from None

    def _range(self, url: str, start: int, end: int | None = None) -> tuple[bytes, int]:
        spec = f"bytes={start}-{'' if end is None else end}" if start >= 0 else f"bytes={start}"
        resp = self._get(url, Range=spec)
        if resp.status_code != 206:
            raise PackageIndexError(f"{url} does not serve byte ranges (status {resp.status_code}); "
                                    "cannot read its metadata without downloading it")
        total = int(resp.headers.get("content-range", "/0").rsplit("/", 1)[-1] or 0)
        return resp.content, total

    def _metadata_by_range(self, wheel: WheelFile) -> str:
        url = wheel.url.split("#", 1)[0]
        tail, total = self._range(url, -65536)
        eocd = tail.rfind(b"PK\x05\x06")
        if eocd < 0:
            raise PackageIndexError(f"{wheel.filename}: no zip directory in its last 64 KiB")
        cd_size, cd_offset = struct.unpack("<II", tail[eocd + 12: eocd + 20])
        if cd_offset == 0xFFFFFFFF:  # zip64
            loc = tail.rfind(b"PK\x06\x07")
            (eocd64_off,) = struct.unpack("<Q", tail[loc + 8: loc + 16])
            rec = tail[eocd64_off - (total - len(tail)):]
            cd_size, cd_offset = struct.unpack("<QQ", rec[40:56])
        base = total - len(tail)
        if cd_offset >= base:
            cd = tail[cd_offset - base: cd_offset - base + cd_size]
        else:
            cd, _ = self._range(url, cd_offset, cd_offset + cd_size - 1)
        member = _find_member(cd, ".dist-info/METADATA")
        if member is None:
            raise PackageIndexError(f"{wheel.filename}: no .dist-info/METADATA in the wheel")
        method, csize, offset = member
        head, _ = self._range(url, offset, offset + 30 + 65535 + csize)
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        data = head[30 + name_len + extra_len: 30 + name_len + extra_len + csize]
        raw = zlib.decompress(data, -15) if method == 8 else data
        return raw.decode("utf-8")


def _find_member(cd: bytes, suffix: str) -> tuple[int, int, int] | None:
    """(method, compressed size, local header offset) of the first member ending in ``suffix``."""
    pos = 0
    while pos + 46 <= len(cd) and cd[pos:pos + 4] == b"PK\x01\x02":
        method = struct.unpack("<H", cd[pos + 10: pos + 12])[0]
        csize, _usize = struct.unpack("<II", cd[pos + 20: pos + 28])
        n, m, k = struct.unpack("<HHH", cd[pos + 28: pos + 34])
        offset = struct.unpack("<I", cd[pos + 42: pos + 46])[0]
        name = cd[pos + 46: pos + 46 + n].decode("utf-8", "replace")
        extra = cd[pos + 46 + n: pos + 46 + n + m]
        if 0xFFFFFFFF in (csize, offset):
            csize, offset = _zip64_extra(extra, csize, _usize, offset)
        if name.endswith(suffix) and name.count("/") == 1:
            return method, csize, offset
        pos += 46 + n + m + k
    return None


def _zip64_extra(extra: bytes, csize: int, usize: int, offset: int) -> tuple[int, int]:
    i = 0
    while i + 4 <= len(extra):
        hid, size = struct.unpack("<HH", extra[i: i + 4])
        if hid == 1:
            body, j = extra[i + 4: i + 4 + size], 0
            if usize == 0xFFFFFFFF:
                j += 8
            if csize == 0xFFFFFFFF:
                csize = struct.unpack("<Q", body[j: j + 8])[0]
                j += 8
            if offset == 0xFFFFFFFF:
                offset = struct.unpack("<Q", body[j: j + 8])[0]
            break
        i += 4 + size
    return csize, offset
