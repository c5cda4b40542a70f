"""A package index over recorded answers (tests/unit/data/refresh, see its README).

``PackageIndex`` itself, over a fake HTTP session that serves only the recorded simple-JSON
listings (``<project>-simple.json``); ``metadata`` is served from the recorded
``<wheel filename>.METADATA`` files and any other read fails the test. No network.
A wheel's members (``member``: what ``wheel_arches`` reads) are served from ``members``
({(wheel filename, member): bytes}); any other member is a ``WheelReadError``, as from an
index without byte ranges, so the refresh carries the arch list over.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from envkit.catalog import data_dir
from envkit.errors import WheelReadError
from envkit.index import JSON_ACCEPT, PackageIndex

DATA = Path(__file__).parent / "data" / "refresh"
BASE = "https://index.invalid/simple"
TODAY = "2027-01-21"


class _Response:
    status_code = 200
    ok = True
    headers = {"content-type": JSON_ACCEPT}

    def __init__(self, data):
        self._data = data
        self.content = json.dumps(data).encode()

    def json(self):
        return self._data


class _Session:
    def __init__(self, drop_versions):
        self.drop = set(drop_versions)
        self.gets: list[str] = []

    def get(self, url, headers=None, timeout=None):
        self.gets.append(url)
        project = url.removeprefix(f"{BASE}/").rstrip("/")
        path = DATA / f"{project}-simple.json"
        assert url == f"{BASE}/{project}/" and headers == {"Accept": JSON_ACCEPT} and path.is_file(), \
            f"unexpected request {url}"
        listing = json.loads(path.read_text())
        listing["files"] = [f for f in listing["files"] if f["filename"].split("-")[1] not in self.drop]
        return _Response(listing)


class FakeIndex(PackageIndex):
    """Real listing/selection logic; recorded answers instead of HTTP.

    ``drop_versions`` hides those versions' files from every listing; ``metadata`` maps a
    wheel filename to the METADATA text to serve instead of the recorded one.
    """

    def __init__(self, *, drop_versions=(), metadata: dict[str, str] | None = None,
                 members: dict[tuple[str, str], bytes] | None = None):
        super().__init__(BASE, cache_dir=Path("/nonexistent-envkit-cache"), session=_Session(drop_versions))
        self.overrides = metadata or {}
        self.members = members or {}
        self.metadata_reads: list[str] = []
        self.member_reads: list[tuple[str, str]] = []

    def member(self, wheel, name, *, max_bytes=0, what=None) -> bytes:
        self.member_reads.append((wheel.filename, name))
        if (wheel.filename, name) not in self.members:
            raise WheelReadError(f"{wheel.url} does not serve byte ranges (status 200) [recorded index]")
        return self.members[(wheel.filename, name)]

    def cached(self, wheel, kind, compute):
        return compute()

    def metadata(self, wheel) -> str:
        self.metadata_reads.append(wheel.filename)
        if wheel.filename in self.overrides:
            return self.overrides[wheel.filename]
        path = DATA / f"{wheel.filename}.METADATA"
        assert path.is_file(), f"refresh read metadata that was not recorded: {wheel.filename}"
        return path.read_text()


def recorded(filename: str) -> str:
    return (DATA / f"{filename}.METADATA").read_text()


def copy_catalog(tmp_path: Path) -> Path:
    """A fresh copy of the packaged catalog."""
    out = tmp_path / "catalog"
    out.mkdir()
    for src in sorted(data_dir().glob("*.yaml")):
        shutil.copyfile(src, out / src.name)
    return out


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not in {path.name} once"
    path.write_text(text.replace(old, new))
