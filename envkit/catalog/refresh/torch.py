"""PyTorch: propose ``pytorch.yaml`` rows from the package index.

The index tells what was published: the torch versions, the Python tags of their wheels,
and (in each Linux wheel's METADATA ``Requires-Dist``) the CUDA runtime, cuDNN and NCCL
that wheel bundles. The compiled arch list is not in the metadata: a new series reads it
from the wheel itself (``torch/lib/libtorch_python.so``'s CUDA arch flags, by range
requests: ``envkit.index.wheel_arches``) and names the wheel's URL; only when the wheel cannot be
read is the list carried over from the catalog's nearest CUDA variant, with a warning to
confirm it. New rows are ``verified: partial`` (only the index's default variant is known).

````refresh`` only reads: it returns a ``RefreshResult`` holding the proposed rows, notes
and a unified diff of ``pytorch.yaml``. Only ``RefreshResult.apply`` writes, and it edits
the file's text in place (header comments and existing rows stay byte for byte; a new
patch of a known series changes only that series' ``patches:`` line; new series are
inserted in version order), validates the whole catalog, then replaces the file atomically.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from packaging.version import Version

from ...errors import CatalogError
from ...index.wheel_facts import bundled_pins
from ..files import data_dir as default_data_dir
from ..models import Catalog, TorchRelease, vtuple
from .common import (
    SOURCE,
    ReadingIndex,
    RefreshLog,
    RefreshResult,
    check_parses_back,
    check_source,
    check_today,
    metadata_source,
    not_loaded_from,
    pick_wheel,
    published,
    python_tags,
    read_file,
    skip_excluded,
    wheel_reading,
)
from .torch_text import FILENAME, edit_text, render_row

if TYPE_CHECKING:
    from ...index.client import WheelFile
    from ..models import TorchVariant

PROJECT = "torch"


@dataclass(frozen=True)
class IndexRead:
    """What the index said about one torch version (its Linux x86_64 wheel)."""

    version: str
    wheel: str
    source: str  # the URL its METADATA was read from
    python: str  # the interpreter the wheel (and its markers) was read for
    cuda: str | None
    cudnn: str | None
    nccl: str | None
    python_min: str
    python_max: str

    @property
    def tag(self) -> str | None:
        return "cu" + "".join(str(p) for p in vtuple(self.cuda)[:2]) if self.cuda else None

    @property
    def cuda_mm(self) -> str | None:
        return ".".join(str(p) for p in vtuple(self.cuda)[:2]) if self.cuda else None

    def to_json(self) -> dict:
        return {
            "version": self.version,
            "wheel": self.wheel,
            "source": self.source,
            "python": self.python,
            "cuda": self.cuda,
            "cudnn": self.cudnn,
            "nccl": self.nccl,
            "tag": self.tag,
            "python_range": {"min": self.python_min, "max": self.python_max},
        }


# --- the refresh ---------------------------------------------------------------------------
def refresh(catalog: Catalog, index: ReadingIndex, *, python: str = "3.12", glibc: str = "2.36", today: str,
            data_dir: str | Path | None = None) -> RefreshResult:
    """Compare the catalog's PyTorch rows with the torch releases on ``index``.

    ``data_dir`` is the directory ``catalog`` was loaded from (default: the packaged
    catalog); its pytorch.yaml text is what the diff and ``apply`` edit. Torch versions
    older than the catalog's oldest series, and pre-/dev-releases, are ignored.
    """
    check_today(today)
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    text, raw = read_file(directory, FILENAME)
    rows: list[dict] = list(raw.get("releases") or []) if isinstance(raw, dict) else []
    releases = catalog.torch_releases()
    if [(str(r.get("version")), tuple(r.get("patches") or ())) for r in rows] != \
            [(r.version, r.patches) for r in releases]:
        raise not_loaded_from(directory)
    if not releases:
        raise CatalogError(f"{directory / FILENAME} has no releases to extend")
    check_source(catalog)

    log = RefreshLog()
    known = {r.version: r for r in releases}
    new_series, new_patches = _new_versions(catalog, index, known, log)
    all_wheels = list(index.wheels(PROJECT))
    updated_rows: dict[str, dict] = {}  # series -> full row (changed or new)
    added_series: list[str] = []
    added_patches: list[str] = []

    # new patches of known series: only the patches list changes
    for series, versions in sorted(new_patches.items(), key=lambda kv: Version(kv[0])):
        added_here = _read_patches(index, all_wheels, known[series], versions, python, glibc, log)
        added_patches.extend(added_here)
        if added_here:
            row = copy.deepcopy(next(r for r in rows if str(r["version"]) == series))
            row["patches"] = sorted({*known[series].patches, *added_here}, key=Version)
            updated_rows[series] = row

    # new series: one row each, from the newest patch's wheel
    for series, versions in sorted(new_series.items(), key=lambda kv: Version(kv[0])):
        series_reads = []
        for v in versions:
            read = _read(index, all_wheels, v, python, glibc)
            if read is None:
                log.warnings.append(f"{v}: no Linux x86_64 CPython wheel on the index; skipped")
                continue
            series_reads.append(read)
        log.reads.extend(series_reads)
        new_row = _series_row(catalog, index, series, series_reads, glibc, today, log) if series_reads else None
        if new_row is not None:
            updated_rows[series] = new_row
            added_series.append(series)

    log.warnings.extend(_python_range_warnings(releases, all_wheels))
    proposed = edit_text(text, rows, updated_rows) if updated_rows else text
    expected = [updated_rows.get(str(r["version"]), r) for r in rows]
    expected += [updated_rows[s] for s in added_series]
    expected.sort(key=lambda r: Version(str(r["version"])))
    check_parses_back(FILENAME, proposed, {**raw, "releases": expected})

    entries = tuple(copy.deepcopy(updated_rows[s]) for s in sorted(updated_rows, key=Version))
    return RefreshResult(
        framework="torch", data_dir=directory, current_text=text, proposed_text=proposed, entries=entries,
        added_series=tuple(added_series), added_patches=tuple(sorted(added_patches, key=Version)),
        notes=tuple(log.notes), warnings=tuple(log.warnings), skipped=tuple(log.skipped),
        reads=tuple(sorted(log.reads, key=lambda r: Version(r.version))),
    )


def _new_versions(catalog: Catalog, index: ReadingIndex, known: dict[str, TorchRelease],
                  log: RefreshLog) -> tuple[dict[str, list[Version]], dict[str, list[Version]]]:
    """The index's releases the catalog lacks: (new series, new patches of known series), each by series."""
    oldest = min(Version(s) for s in known)
    new_series: dict[str, list[Version]] = {}
    new_patches: dict[str, list[Version]] = {}
    older = 0
    for v in published(index, PROJECT):
        series = f"{v.major}.{v.minor}"
        if Version(series) < oldest:
            older += 1
        elif (series not in known or str(v) not in known[series].patches) and skip_excluded(
            catalog, "torch", v, log.skipped
        ):
            continue
        elif series not in known:
            new_series.setdefault(series, []).append(v)
        elif str(v) not in known[series].patches:
            new_patches.setdefault(series, []).append(v)
    if older:
        log.notes.append(f"ignored {older} torch version(s) older than the catalog's oldest series ({oldest})")
    return new_series, new_patches


def _read_patches(index: ReadingIndex, wheels: list, release: TorchRelease, versions: list[Version], python: str,
                  glibc: str, log: RefreshLog) -> list[str]:
    """The new patches of a known series whose wheel could be read, each compared with the row."""
    default = release.variant(release.index_default)
    added = []
    for v in versions:
        read = _read(index, wheels, v, python, glibc)
        if read is None:
            log.warnings.append(f"{v}: no Linux x86_64 CPython wheel on the index; not added")
            continue
        log.reads.append(read)
        added.append(str(v))
        log.notes.append(f"{release.version}: added patch {v} (read {read.wheel}: " + _pins_text(read) + ")")
        log.warnings.extend(_compare_patch(release, default, read))
    return added


def _series_row(catalog: Catalog, index: ReadingIndex, series: str, series_reads: list[IndexRead], glibc: str,
                today: str, log: RefreshLog) -> dict | None:
    """A new series' row from its newest patch's wheel; None (with a warning) when it cannot be written."""
    newest = series_reads[-1]
    if newest.cuda is None:
        log.warnings.append(f"{series}: {newest.wheel} pins no CUDA runtime (cuda-toolkit / nvidia-cuda-runtime);"
                            " not added - add the series by hand")
        return None
    arches = _arch_list(catalog, index, series, newest, glibc, log)
    if arches is None:
        return None
    arch_list, arch_source = arches
    for other in series_reads[:-1]:
        if (other.cuda_mm, other.cudnn, other.nccl) != (newest.cuda_mm, newest.cudnn, newest.nccl):
            log.warnings.append(f"{series}: {other.version} pins {_pins_text(other)}, unlike {newest.version} "
                                f"({_pins_text(newest)}); the row records {newest.version}'s")
    row = _new_row(series, [r.version for r in series_reads], newest, arch_list, arch_source, today)
    try:
        TorchRelease.model_validate(row)
    except Exception as exc:  # pydantic.ValidationError; a bug here, not bad input
        raise CatalogError(f"refresh built an invalid row for {series}: {exc}") from None
    log.notes.append(f"{series}: new series from {newest.wheel}: " + _pins_text(newest)
                     + f", python {newest.python_min}-{newest.python_max}; arch_list {arch_list} "
                     + arch_source.split(" (")[0] + " (verified: partial)")
    return row


def _arch_list(catalog: Catalog, index: ReadingIndex, series: str, newest: IndexRead, glibc: str,
               log: RefreshLog) -> tuple[str, str] | None:
    """(arch list, where it came from) of a new series: read from the wheel, else carried over from a variant of
    the same CUDA major (warned); None (warned) when neither can be had."""
    assert newest.cuda is not None  # checked by _series_row
    reading = wheel_reading(index, PROJECT, newest.version, newest.python, glibc, cuda=newest.cuda_mm)
    if not isinstance(reading, str) and reading.arch_list is not None:
        return reading.arch_list, f"read from {reading.source}"
    why = reading if isinstance(reading, str) else (
        f"{reading.wheel} holds {' '.join(reading.flags)}, which TORCH_CUDA_ARCH_LIST cannot spell")
    carried = _carry_arch_list(catalog, newest.cuda)
    if carried is None:
        log.warnings.append(f"{series}: the wheel's arch list is unread ({why}) and no catalog variant has CUDA "
                            f"{vtuple(newest.cuda)[0]}.x to carry one from; not added - add the series by hand")
        return None
    arch_list, carried_from = carried
    log.warnings.append(f"{series}: arch_list {arch_list} carried over from {carried_from}, not read from the "
                        f"wheel ({why}); confirm it")
    return arch_list, (f"carried over from {carried_from} (the wheel could not be read: {why} - confirm with "
                       "`envkit catalog check-arches` or torch.cuda.get_arch_list() inside a built image)")


# --- reading the index ---------------------------------------------------------------------
def _read(index: ReadingIndex, wheels: list[WheelFile], version: Version, python: str, glibc: str) -> IndexRead | None:
    pys = python_tags(wheels, version)
    wheel, py = pick_wheel(index, PROJECT, version, pys, python, glibc) if pys else (None, None)
    if wheel is None or py is None:
        return None
    pins = bundled_pins(index.requires(wheel), py)
    return IndexRead(version=str(version), wheel=wheel.filename, source=metadata_source(wheel), python=py,
                     cuda=pins.get("cuda"),
                     cudnn=pins.get("cudnn"), nccl=pins.get("nccl"),
                     python_min="%d.%d" % pys[0], python_max="%d.%d" % pys[-1])


def _pins_text(read: IndexRead) -> str:
    return f"cuda {read.cuda} ({read.tag}), cudnn {read.cudnn}, nccl {read.nccl}"


def _carry_arch_list(catalog: Catalog, cuda: str) -> tuple[str, str] | None:
    """(arch_list, 'SERIES TAG') of the newest catalog variant with CUDA major.minor, else major."""
    mm = vtuple(cuda)[:2]
    variants = sorted(((Version(r.version), vtuple(v.cuda), r.version, v) for r in catalog.torch_releases()
                       for v in r.variants), key=lambda t: (t[0], t[1]), reverse=True)
    for match in (lambda c: c[:2] == mm, lambda c: c[0] == mm[0]):
        for _, c, series, v in variants:
            if match(c):
                return v.arch_list, f"{series} {v.tag}"
    return None


def _compare_patch(release: TorchRelease, default: TorchVariant | None, read: IndexRead) -> list[str]:
    """Warnings when a new patch's wheel disagrees with its series' index-default variant."""
    if default is None:
        return [f"{release.version}: index_default {release.index_default} names no variant of the row"]
    out = []
    if read.tag != default.tag:
        out.append(f"{read.version}: the index wheel pins CUDA {read.cuda} ({read.tag}) but {release.version}'s "
                   f"index_default is {default.tag}; review the row by hand")
    else:
        for name in ("cudnn", "nccl"):
            have, got = getattr(default, name), getattr(read, name)
            if have is not None and got is not None and have != got:
                out.append(f"{read.version}: the index wheel pins {name} {got}; the {release.version} "
                           f"{default.tag} row says {have} (only the patches line is changed)")
    return out


def _python_range_warnings(releases: Iterable[TorchRelease], wheels: list[WheelFile]) -> list[str]:
    """Catalog Python ranges that admit an interpreter the index has no wheel for."""
    out = []
    for r in releases:
        newest = max((Version(p) for p in r.patches), default=None)
        if newest is None:
            continue
        pys = python_tags(wheels, newest)
        if not pys:
            continue
        lo, hi = "%d.%d" % pys[0], "%d.%d" % pys[-1]
        if vtuple(r.python.min) < pys[0] or vtuple(r.python.max) > pys[-1]:
            out.append(f"{r.version}: the catalog admits Python {r.python.min}-{r.python.max} but the index has "
                       f"Linux x86_64 wheels of {newest} for {lo}-{hi} only")
    return out


# --- building and placing rows ---------------------------------------------------------------
def _new_row(series: str, patches: list[str], read: IndexRead, arch_list: str, arch_source: str,
             today: str) -> dict[str, Any]:
    note = (f"refreshed from the package index {today}: cuda/cudnn/nccl read from the Requires-Dist of "
            f"{read.wheel} ({read.source}), python range from its cpXY wheel tags; arch_list {arch_source}; "
            "only the index's default variant is known")
    return {
        "version": series,
        "patches": sorted(patches, key=Version),
        "python": {"min": read.python_min, "max": read.python_max},
        "index_default": read.tag,
        "verified": "partial",
        "sources": [SOURCE],
        "note": note,
        "variants": [{"tag": read.tag, "cuda": read.cuda_mm, "status": "stable", "cudnn": read.cudnn,
                      "nccl": read.nccl, "arch_list": arch_list}],
    }


__all__ = ["IndexRead", "refresh", "render_row"]  # render_row: torch_text's
