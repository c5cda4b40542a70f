"""The progress callback a long step takes (resolving, building, bundling, publishing, the nightly): it is called
with one line about what the step is doing now, which the CLI writes to stderr (stdout stays for results)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Mapping

from packaging.utils import canonicalize_name

Progress = Callable[[str], None]


def decimal_size(n: int) -> str:
    """Bytes in decimal units, as `docker system df` prints them (gc's lines and tables)."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1000
    return f"{value:.2f} GB"


@dataclass(frozen=True)
class Planned:
    """Said of an image before its build (``BuildProgress``'s event): how many packages its lock's closure holds, so
    a display can count the install's packages against it; with the lock's wheel sizes (``sizes``: canonical name ->
    bytes; ``total_bytes``: their sum, None when the lock lacks one) it counts bytes too, and with each install
    step's packages (``groups``: the requirements file's stem -> names) a step the engine takes from its cache counts
    as installed."""

    packages: int
    sizes: Mapping[str, int] = field(default_factory=dict)
    total_bytes: int | None = None
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


PIP_COLLECTING = re.compile(r"^\s*Collecting ([A-Za-z0-9][A-Za-z0-9._-]*)")
# uv (online builds) lists what it installed when an install step ends, one " + NAME==VERSION" line each
UV_INSTALLED = re.compile(r"^\s*\+ (\S+)==\S+\s*$")
PIP_DOWNLOAD = re.compile(r"^\s*Downloading \S+ \(([\d.]+) (kB|MB|GB)\)")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}
INSTALL_STEP = re.compile(r"-r /tmp/envkit[/-](\w+)\.txt")  # an install step's requirements file, by its group
CACHED = re.compile(r"^\s*---> Using cache$|: cached$")  # the classic builder's, BuildKit's (its vertex's name first)


@dataclass
class InstallCount:
    """The packages the installer has taken up and the bytes pip has downloaded, read from the build's log lines
    (``feed``): pip (offline bundles' builds) says each package as it starts it; uv (online builds) prints nothing
    while it works and lists the packages when each install step (CUDA wheels, framework, extras) ends, so an online
    build's count moves once per layer group."""

    total: int = 0  # from ``Planned``; 0: unknown
    done: int = 0
    downloaded: float = 0.0  # bytes, from pip's "Downloading NAME (SIZE)" lines
    sizes: Mapping[str, int] = field(default_factory=dict)  # from ``Planned``: the lock's wheel sizes
    total_bytes: int | None = None
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    done_bytes: int = 0  # the lock's sizes of the packages counted
    seen: set[str] = field(default_factory=set)
    step_group: str | None = None  # the install step under way (the classic builder's "Using cache" follows it)

    @classmethod
    def of(cls, plan: Planned) -> InstallCount:
        return cls(total=plan.packages, sizes=plan.sizes, total_bytes=plan.total_bytes, groups=plan.groups)

    def step(self, text: str) -> None:
        """A build step starts: remember which install group it is, if one."""
        found = INSTALL_STEP.search(text)
        self.step_group = found.group(1) if found else None

    def feed(self, line: str) -> str | None:
        """Count one build log line: "package" (pip took one up, uv installed one), "group" (an install step came
        from the engine's cache: its group's packages at once), "bytes" (pip downloads one), else None."""
        took = PIP_COLLECTING.match(line) or UV_INSTALLED.match(line)
        if took:
            self._count(took.group(1))
            return "package"
        if CACHED.search(line):
            found = INSTALL_STEP.search(line)
            group = found.group(1) if found else self.step_group if line.strip() == "---> Using cache" else None
            names = self.groups.get(group or "", ())
            for name in names:
                self._count(name)
            return "group" if names else None
        size = PIP_DOWNLOAD.match(line)
        if size:
            self.downloaded += float(size.group(1)) * UNITS[size.group(2)]
            return "bytes"
        return None

    def _count(self, name: str) -> None:
        key = canonicalize_name(name)
        if key in self.seen:  # (a package uv lists again, or a cached group counted once)
            return
        self.seen.add(key)
        self.done += 1
        self.done_bytes += self.sizes.get(key, 0)

    def words(self) -> str:
        of = f"/{self.total}" if self.total else ""
        packages = f"packages {min(self.done, self.total) if self.total else self.done}{of}"
        if self.total_bytes:
            unit, scale = ("GB", 1e9) if self.total_bytes >= 1e9 else ("MB", 1e6)  # the total's unit for both
            return f"{packages}, {self.done_bytes / scale:.2f}/{self.total_bytes / scale:.2f} {unit}"
        return f"{packages}, {self.downloaded / 1e9:.2f} GB downloaded"


@dataclass(frozen=True)
class LayerBytes:
    """A push's or pull's bytes on one layer so far: the engine's ``progressDetail`` of a "Pushing" or
    "Downloading" line (``Transfer``'s event)."""

    layer: str
    current: int
    total: int


Transfer = Callable[[LayerBytes], None]


@dataclass
class TransferTotals:
    """The bytes of a push or pull, summed over its layers: each layer's latest ``LayerBytes``; a layer the engine
    says is done (``finish``) counts whole. The total grows as layers start (the engine announces a layer's size
    when it starts moving it)."""

    layers: dict[str, tuple[int, int]] = field(default_factory=dict)

    def feed(self, event: LayerBytes) -> None:
        self.layers[event.layer] = (max(0, min(event.current, event.total)), event.total)

    def finish(self, layer: str) -> None:
        if layer in self.layers:
            self.layers[layer] = (self.layers[layer][1], self.layers[layer][1])

    @property
    def done(self) -> int:
        return sum(c for c, _ in self.layers.values())

    @property
    def total(self) -> int:
        return sum(t for _, t in self.layers.values())

    def words(self) -> str:
        unit, scale = ("GB", 1e9) if self.total >= 1e9 else ("MB", 1e6)
        return f"{self.done / scale:.2f}/{self.total / scale:.2f} {unit}"


def transfer_lines(say: Progress, what: str, every: float = 0.25) -> Transfer:
    """A ``Transfer`` for a log: one line each time the bytes moved cross another ``every`` of the total so far
    (``what: 1.20/5.60 GB``), so a push of gigabytes shows it moving without a line per chunk."""
    totals = TransferTotals()
    said = [0]

    def feed(event: LayerBytes) -> None:
        totals.feed(event)
        step = int(totals.done / totals.total / every) if totals.total else 0
        if step > said[0]:
            said[0] = step
            say(f"{what}: {totals.words()}")
    return feed


@dataclass(frozen=True)
class Phase:
    """A long step's phase and its count so far (``BuildProgress``'s event): the base bootstrap's "retrieving",
    "extracting", "unpacking", "configuring" packages; ``total`` None while it is not known yet."""

    step: str  # e.g. "bootstrap"
    phase: str
    done: int
    total: int | None

    def words(self) -> str:
        return f"{self.step}: {self.phase} {self.done}" + (f"/{self.total}" if self.total else "") + " packages"

    def line(self) -> str | None:
        """What a log says of it: a line as the phase starts and one as it ends (None between)."""
        return self.words() if self.done == 1 or self.done == self.total else None


def phase_lines(say: Progress) -> Callable[[Phase], None]:
    """A phases callback for a log: ``say`` each phase's line as it starts and ends (``Phase.line``)."""
    def feed(phase: Phase) -> None:
        if (line := phase.line()) is not None:
            say(line)
    return feed
