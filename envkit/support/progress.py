"""The progress callback a long step takes (resolving, building, bundling, publishing, the nightly): it is called
with one line about what the step is doing now, which the CLI writes to stderr (stdout stays for results)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Planned:
    """Said of an image before its build (``BuildProgress``'s event): how many packages its lock's closure holds, so
    a display can count the install's packages against it."""

    packages: int


PIP_COLLECTING = re.compile(r"^\s*Collecting (\S+)")
# uv (online builds) lists what it installed when an install step ends, one " + NAME==VERSION" line each
UV_INSTALLED = re.compile(r"^\s*\+ (\S+)==\S+\s*$")
PIP_DOWNLOAD = re.compile(r"^\s*Downloading \S+ \(([\d.]+) (kB|MB|GB)\)")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}


@dataclass
class InstallCount:
    """The packages the installer has taken up and the bytes pip has downloaded, read from the build's log lines
    (``feed``): pip (offline bundles' builds) says each package as it starts it; uv (online builds) prints nothing
    while it works and lists the packages when each install step (CUDA wheels, framework, extras) ends, so an online
    build's count moves once per layer group."""

    total: int = 0  # from ``Planned``; 0: unknown
    done: int = 0
    downloaded: float = 0.0  # bytes, from pip's "Downloading NAME (SIZE)" lines

    def feed(self, line: str) -> str | None:
        """Count one build log line: "package" (pip took one up), "bytes" (it downloads one), else None."""
        if PIP_COLLECTING.match(line) or UV_INSTALLED.match(line):
            self.done += 1
            return "package"
        size = PIP_DOWNLOAD.match(line)
        if size:
            self.downloaded += float(size.group(1)) * UNITS[size.group(2)]
            return "bytes"
        return None

    def words(self) -> str:
        of = f"/{self.total}" if self.total else ""
        return f"packages {min(self.done, self.total) if self.total else self.done}{of}, " \
               f"{self.downloaded / 1e9:.2f} GB downloaded"
