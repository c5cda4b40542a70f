"""A package index over recorded answers (tests/unit/data/refresh, see its README).

``PackageIndex`` itself, over a fake HTTP session that serves only the recorded simple-JSON
listings (``<project>-simple.json``); ``metadata`` is served from the recorded
``<wheel filename>.METADATA`` files and any other read fails the test. No network.
A wheel's members (``member``: what ``wheel_arches`` reads) are served from ``members``
({(wheel filename, member): bytes}); any other member is a ``WheelReadError``, as from an
index without byte ranges, so the refresh carries the arch list over.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from envkit.catalog.files import data_dir
from envkit.errors import WheelReadError
from envkit.index.urls import JSON_ACCEPT
from envkit.index.client import PackageIndex

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
    def __init__(self, drop_versions, extra_files=None):
        self.drop = set(drop_versions)
        self.extra = extra_files or {}
        self.gets: list[str] = []

    def get(self, url, headers=None, timeout=None):
        self.gets.append(url)
        project = url.removeprefix(f"{BASE}/").rstrip("/")
        path = DATA / f"{project}-simple.json"
        assert url == f"{BASE}/{project}/" and headers == {"Accept": JSON_ACCEPT} and path.is_file(), \
            f"unexpected request {url}"
        listing = json.loads(path.read_text())
        listing["files"] = [f for f in listing["files"] + self.extra.get(project, [])
                            if f["filename"].split("-")[1] not in self.drop]
        return _Response(listing)


class FakeIndex(PackageIndex):
    """Real listing/selection logic; recorded answers instead of HTTP.

    ``drop_versions`` hides those versions' files from every listing; ``metadata`` maps a
    wheel filename to the METADATA text to serve instead of the recorded one; ``extra_files``
    adds MADE-UP files to a project's listing ({project: [made_up(filename), ...]}; serve their
    METADATA with ``metadata``).
    """

    def __init__(self, *, drop_versions=(), metadata: dict[str, str] | None = None,
                 members: dict[tuple[str, str], bytes] | None = None, extra_files: dict[str, list] | None = None):
        super().__init__(BASE, cache_dir=Path("/nonexistent-envkit-cache"),
                         session=_Session(drop_versions, extra_files))
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


def made_up(filename: str) -> dict:
    """A listing entry for a MADE-UP file (the recordings' convention: sha256 of the name, files.example.invalid)."""
    return {"filename": filename, "hashes": {"sha256": hashlib.sha256(filename.encode()).hexdigest()},
            "requires-python": ">=3.10", "size": 1000000, "upload-time": "2027-01-20T00:00:00.000000Z",
            "url": f"https://files.example.invalid/made-up/{filename}", "yanked": False}


def made_up_metadata(project: str, version: str, *requires: str) -> str:
    return (f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\nSummary: MADE-UP for envkit's tests\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires))


def drop_companions(directory: Path, framework: str, version: str) -> None:
    """Remove ``framework`` ``version``'s companions.yaml row (a test that removes the release from its
    framework's file must: a companion row names a release of that file)."""
    path = directory / "companions.yaml"
    lines = path.read_text().splitlines(keepends=True)
    section = lines.index(f"  {framework}:\n")
    start = lines.index(f'    - version: "{version}"\n', section)
    end = start + 1
    while end < len(lines) and lines[end].startswith("      "):
        end += 1
    path.write_text("".join(lines[:start] + lines[end:]))


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
