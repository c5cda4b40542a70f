"""What every framework's refresh shares: the index protocol, wheel tags, one file's result,
its diff, and the checked, atomic write.

A ``RefreshResult`` is one catalog file read and (maybe) edited; nothing is written until
``apply`` (or ``CatalogRefresh.apply`` for several files), which refuses a file that changed
since it was read and a catalog that would not load afterwards.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Protocol

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ...errors import CatalogError, PackageIndexError
from ...index.wheel_arches import MemberIndex, read_arches
from ...index.wheel_facts import bundled_pins
from ...support import scratch
from ...support.atomic import directories_locked, replace_all
from ..exclusions import FRAMEWORK_FILES
from ..files import load_catalog
from ..models import Catalog, vtuple

if TYPE_CHECKING:
    from ...index.client import WheelFile
    from ...index.wheel_arches import ArchReading

SOURCE = "pypi_index"  # the sources.yaml key every refreshed row names
FILENAMES = {fw: f"{name}.yaml" for fw, name in FRAMEWORK_FILES.items()}  # torch -> pytorch.yaml

_CP_TAG = re.compile(r"^cp(?P<major>\d)(?P<minor>\d+)$")
_EXTRA_IN_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_LINUX = {"platform_system": "Linux", "platform_machine": "x86_64", "sys_platform": "linux"}


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader


class RefreshIndex(Protocol):
    """What a refresh asks of the index (``envkit.index.client.PackageIndex`` answers it)."""

    def versions(self, project: str) -> list[Version]: ...
    def wheels(self, project: str) -> list: ...
    def wheel_for(self, project: str, version: Version, python: str, glibc: str) -> WheelFile | None: ...
    def requires(self, wheel: WheelFile) -> list[Requirement]: ...


class ReadingIndex(RefreshIndex, MemberIndex, Protocol):
    """A refresh's index that also reads members of wheels (``wheel_reading``: ``PackageIndex`` answers it)."""


# --- checks before reading -------------------------------------------------------------------
def check_today(today: str) -> None:
    try:
        datetime.date.fromisoformat(today)
    except ValueError:
        raise CatalogError(f"today={today!r} is not an ISO date (YYYY-MM-DD)") from None


def check_source(catalog: Catalog) -> None:
    try:
        catalog.source(SOURCE)
    except KeyError:
        raise CatalogError(f"the catalog has no source {SOURCE!r}, which refreshed rows name",
                           hint=f"add {SOURCE} to sources.yaml") from None


def read_file(directory: Path, filename: str) -> tuple[str, Any]:
    path = directory / filename
    try:
        text = path.read_text()
        return text, load_yaml(text)
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError(f"cannot load catalog file {path}: {exc}") from None


def not_loaded_from(directory: Path) -> CatalogError:
    return CatalogError(f"the catalog passed to refresh was not loaded from {directory}",
                        hint="pass data_dir= the directory given to load_catalog")


def skip_excluded(catalog: Catalog, framework: str, version: Version, skipped: list[dict]) -> bool:
    """True (and ``version`` recorded in ``skipped``) when the catalog leaves it out on purpose."""
    ex = catalog.excluded(framework, str(version))
    if ex is None:
        return False
    skipped.append({**ex.to_json(), "version": str(version)})
    return True


# --- reading the index ---------------------------------------------------------------------
def published(index: RefreshIndex, project: str) -> list[Version]:
    """Final releases of ``project`` on the index, oldest first (no pre-, dev- or local versions)."""
    return sorted(v for v in index.versions(project) if not (v.is_prerelease or v.is_devrelease or v.local))


def _linux_x86_64(plat: str) -> bool:
    return any(p.endswith("x86_64") and "linux" in p for p in plat.split("."))


def python_tags(wheels: Iterable[WheelFile], version: Version) -> list[tuple[int, int]]:
    """(3, 12)-style CPython versions with a Linux x86_64 wheel of ``version``.

    Free-threaded ABIs (cp314t) and abi3/none wheels are not counted.
    """
    out: set[tuple[int, int]] = set()
    for w in wheels:
        if w.version != version or w.yanked:
            continue
        for tag in w.tags:
            interp, abi, plat = tag.split("-")
            m = _CP_TAG.match(interp)
            if m and abi == interp and _linux_x86_64(plat):
                out.add((int(m["major"]), int(m["minor"])))
    return sorted(out)


def py_text(py: tuple[int, int]) -> str:
    return "%d.%d" % py


def pick_wheel(
    index: RefreshIndex, project: str, version: Version, pys: list[tuple[int, int]], python: str, glibc: str
) -> tuple[WheelFile | None, str | None]:
    """(wheel, python) for ``version``: the requested CPython's Linux wheel, else the newest there is."""
    order = [python] + [py_text(p) for p in reversed(pys) if py_text(p) != python]
    for py in order:
        wheel = index.wheel_for(project, version, py, glibc)
        if wheel is not None:
            return wheel, py
    return None, None


def wheel_reading(
    index: ReadingIndex, framework: str, version: str, python: str, glibc: str, cuda: str | None = None
) -> ArchReading | str:
    """The compiled arches of ``version``'s Linux wheel on ``index`` (a ``wheel_arches.ArchReading``),
    or a sentence saying why there is none (the wheel cannot be found, read or reached).

    ``cuda`` (torch): the variant's CUDA major.minor; the wheel's own CUDA pin must agree,
    so that a mirror serving another variant as its default is not read as this one."""
    v = Version(version)
    wheels = index.wheels(framework)
    pys = python_tags(wheels, v)
    wheel, py = pick_wheel(index, framework, v, pys, python, glibc) if pys else (None, None)
    if wheel is None or py is None:
        return f"no Linux x86_64 CPython wheel of {framework} {version} on {index.url}"
    try:
        if cuda is not None:
            pinned = bundled_pins(index.requires(wheel), py).get("cuda")
            if pinned is None or major_minor(pinned) != cuda:
                return f"{wheel.filename} pins CUDA {pinned}, not the catalog's {cuda}; not read as that variant"
        return read_arches(index, wheel, framework)
    except PackageIndexError as exc:  # WheelReadError included: the wheel does not say, or cannot be reached
        return f"cannot read {wheel.filename}: {exc.message}"


def metadata_source(wheel: WheelFile) -> str:
    """Where a wheel's METADATA was read: the PEP 658 file beside it, else the wheel (by ranges)."""
    url = wheel.url.split("#", 1)[0]
    return url + ".metadata" if wheel.has_metadata else url


def extras_of(requirement: Requirement) -> set[str]:
    """The ``extra == "..."`` names a requirement's marker mentions, normalized ('with_cuda' -> 'with-cuda')."""
    if requirement.marker is None:
        return set()
    return {canonicalize_name(e) for e in _EXTRA_IN_MARKER.findall(str(requirement.marker))}


def for_extra(requirements: list[Requirement], extra: str, python: str) -> dict[str, Requirement]:
    """canonical name -> requirement, for what ``pip install X[extra]`` adds on Linux x86_64."""
    out: dict[str, Requirement] = {}
    for r in requirements:
        if r.marker is None:
            continue
        names = set(_EXTRA_IN_MARKER.findall(str(r.marker)))
        spelled = next((e for e in names if canonicalize_name(e) == canonicalize_name(extra)), None)
        env = {**_LINUX, "python_version": python, "python_full_version": python + ".0", "extra": spelled or ""}
        if spelled is not None and r.marker.evaluate(env):
            out[canonicalize_name(r.name)] = r
    return out


def exact_version(requirement: Requirement) -> str | None:
    """X for '==X' or '>=X,<=X'; None for a range."""
    specs = list(requirement.specifier)
    pins = {s.version for s in specs if s.operator == "==" and "*" not in s.version}
    if len(pins) == 1:
        return pins.pop()
    lo = {s.version for s in specs if s.operator == ">="}
    hi = {s.version for s in specs if s.operator == "<="}
    if len(lo) == 1 and lo == hi and len(specs) == 2:
        return lo.pop()
    return None


def floor_version(requirement: Requirement) -> str | None:
    """The exact pin, else the '>=' lower bound; None when neither is there."""
    exact = exact_version(requirement)
    if exact:
        return exact
    lo = [s.version for s in requirement.specifier if s.operator == ">="]
    return max(lo, key=Version) if lo else None


_ORDER = {">=": 0, ">": 1, "==": 2, "~=": 3, "<=": 4, "<": 5, "!=": 6, "===": 7}


def spec_text(specifier: SpecifierSet) -> str:
    """'>=9.12.0.46,<10.0' - lower bounds first, as the catalog writes ranges."""
    return ",".join(str(s) for s in sorted(specifier, key=lambda s: (_ORDER.get(s.operator, 9), s.version)))


def major_minor(version: str) -> str:
    return ".".join(str(p) for p in vtuple(re.sub(r"[^0-9.].*$", "", version))[:2])


def q(value: Any) -> str:
    return "null" if value is None else json.dumps(str(value), ensure_ascii=True)


def splice(lines: list[str], insert: dict[int, list[str]], replace: dict[int, list[str]]) -> str:
    """``lines`` with ``insert[i]`` placed before line i (at ``len(lines)``: at the end) and line i
    replaced by ``replace[i]``; a line that gets text after it is given its newline first."""
    out: list[str] = []
    for i in range(len(lines) + 1):
        if i in insert:
            if out and not out[-1].endswith("\n"):
                out[-1] += "\n"
            out.extend(insert[i])
        if i < len(lines):
            out.extend(replace.get(i, [lines[i]]))
    return "".join(out)


# --- one file's result -----------------------------------------------------------------------
@dataclass
class RefreshLog:
    """What a refresh says besides its rows, gathered as it reads: notes, warnings, the reads of the index it made
    (a framework's own type), the releases it skipped as excluded."""

    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reads: list[Any] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class RefreshResult:
    """One catalog file as read and as proposed, with what was added and why."""

    data_dir: Path
    current_text: str
    proposed_text: str
    entries: tuple[dict, ...] = ()  # new or changed rows, in the file's schema, version order
    added_series: tuple[str, ...] = ()
    added_patches: tuple[str, ...] = ()  # JAX has no series: every new version is listed here
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # facts to review by hand; never applied
    reads: tuple = field(default=())  # what the index said (objects with to_json())
    skipped: tuple[dict, ...] = ()  # releases on the index left out on purpose (the file's excluded: rows)
    framework: str = "torch"
    file: str | None = None  # another catalog file than the framework's (check-arches: sources.yaml)

    @property
    def filename(self) -> str:
        return self.file or FILENAMES[self.framework]

    @property
    def changed(self) -> bool:
        return self.proposed_text != self.current_text

    def diff(self) -> str:
        """A unified diff of the file, current -> proposed ('' when nothing changes)."""
        return "".join(difflib.unified_diff(
            self.current_text.splitlines(keepends=True), self.proposed_text.splitlines(keepends=True),
            fromfile=f"a/{self.filename}", tofile=f"b/{self.filename}"))

    def apply(self, data_dir: str | Path | None = None) -> Path:
        """Write the proposed file into ``data_dir`` (default: where it was read).

        Refuses when the file changed since the refresh read it, or when the catalog would
        not load afterwards; the file is replaced atomically, so readers see old or new.
        """
        directory = Path(data_dir) if data_dir is not None else self.data_dir
        apply_texts(directory, [self])
        return directory / self.filename


def apply_texts(directory: Path, results: Iterable[RefreshResult]) -> list[Path]:
    """Check every changed file is as read, validate all proposals together, then write them all or none, holding
    the directory's lock throughout (another run's write in between is then seen as a change, not lost)."""
    with directories_locked([directory]):
        return _apply_texts(directory, results)


def _apply_texts(directory: Path, results: Iterable[RefreshResult]) -> list[Path]:
    changed = [r for r in results if r.changed]
    for r in changed:
        target = directory / r.filename
        try:
            current = target.read_text()
        except OSError as exc:
            raise CatalogError(f"cannot read {target}: {exc}") from None
        if current != r.current_text:
            raise CatalogError(f"{target} changed since the refresh read it", hint="run `envkit catalog refresh` again")
    if not changed:
        return []
    validate_in_copy(directory, {r.filename: r.proposed_text for r in changed})
    # all or none: half an exclusion (its source, no row) is no catalog
    replace_all({}, {directory / r.filename: r.proposed_text.encode() for r in changed})
    return [directory / r.filename for r in changed]


def validate_in_copy(directory: Path, proposed: dict[str, str]) -> None:
    """load_catalog on a copy of ``directory`` with the proposed files, or raise."""
    with scratch.directory("refresh") as tmp:
        for src in directory.glob("*.yaml"):
            shutil.copyfile(src, Path(tmp) / src.name)
        for name, text in proposed.items():
            (Path(tmp) / name).write_text(text)
        load_catalog(tmp)


def refresh_summary(result: RefreshResult) -> dict:
    """JSON-ready summary of one framework's refresh."""
    return {
        "framework": result.framework,
        "changed": result.changed,
        "file": str(result.data_dir / result.filename),
        "added_series": list(result.added_series),
        "added_patches": list(result.added_patches),
        "entries": copy.deepcopy(list(result.entries)),
        "notes": list(result.notes),
        "warnings": list(result.warnings),
        "skipped": copy.deepcopy(list(result.skipped)),
        "index_reads": [r.to_json() for r in result.reads],
        "diff": result.diff(),
    }


def check_parses_back(filename: str, proposed: str, expected: dict) -> None:
    """The edited text must load to exactly the intended document, else refuse."""
    if load_yaml(proposed) != expected:
        raise CatalogError(f"refresh produced a {filename} that does not parse back to the intended rows",
                           hint="the file's layout is not the one refresh edits; add the rows by hand")
