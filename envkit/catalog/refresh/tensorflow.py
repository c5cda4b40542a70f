"""TensorFlow: propose ``tensorflow.yaml`` rows for new tensorflow releases from the package index.

A tensorflow Linux wheel's METADATA pins (up to 2.19) or bounds (2.20 on) the nvidia-*
wheels of its ``and-cuda`` extra: the CUDA runtime's and cuDNN's exact pin or lower bound
give the row's ``cuda`` and ``cudnn`` (major.minor), as TensorFlow's tested build
configurations do; the NCCL requirement is reported (rows do not hold it). The cpXY wheel
tags give the Python range. A new patch of a known series changes only that row's
``patches`` (a disagreeing pin is a warning); a new series is a new row. The file-wide
``min_driver`` is not in wheel metadata: it stays as it is, and the row's comment says so, to
be reviewed. A new series' compiled targets are read from the wheel itself
(``tensorflow/python/platform/build_info.py``, by range requests: ``envkit.index.wheel_arches``)
into the row's ``arches``; when the wheel cannot be read the row has none and plans with the
file-wide ``arch_list``, with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import Version

from ...errors import CatalogError
from ...index.wheel_facts import library_of
from ..files import data_dir as default_data_dir
from ..models import Catalog, TfRelease
from .common import (
    ReadingIndex,
    RefreshLog,
    RefreshResult,
    check_parses_back,
    check_source,
    check_today,
    floor_version,
    for_extra,
    major_minor,
    metadata_source,
    not_loaded_from,
    pick_wheel,
    published,
    py_text,
    python_tags,
    q,
    read_file,
    skip_excluded,
    spec_text,
    splice,
    wheel_reading,
)

if TYPE_CHECKING:
    from ...index.client import WheelFile

FILENAME = "tensorflow.yaml"
PROJECT = "tensorflow"
_ROW = re.compile(r'^    - \{version: "(?P<v>[0-9][0-9.]*)",')
_PATCHES = re.compile(r"patches: \[[^\]]*\]")


@dataclass(frozen=True)
class TfRead:
    """What the index said about one tensorflow version (its Linux x86_64 wheel)."""

    version: str
    wheel: str
    source: str
    python: str
    cuda: str  # nvidia-cuda-runtime: the exact pin or the lower bound
    cudnn: str
    nccl: str | None  # the requirement as written (a pin or a range)
    python_min: str
    python_max: str

    @property
    def pins(self) -> tuple[str, str]:
        return major_minor(self.cuda), major_minor(self.cudnn)

    def to_json(self) -> dict:
        return {"version": self.version, "wheel": self.wheel, "source": self.source, "python": self.python,
                "cuda_runtime": self.cuda, "cudnn": self.cudnn, "nccl": self.nccl, "cuda": self.pins[0],
                "cudnn_series": self.pins[1], "python_range": {"min": self.python_min, "max": self.python_max}}


def _read(
    index: ReadingIndex, wheels: list[WheelFile], version: Version, extra: str, python: str, glibc: str
) -> TfRead | str:
    pys = python_tags(wheels, version)
    wheel, py = pick_wheel(index, PROJECT, version, pys, python, glibc) if pys else (None, None)
    if wheel is None or py is None:
        return f"{version}: no Linux x86_64 CPython wheel on the index; not added"
    source = metadata_source(wheel)
    found: dict[str, str | None] = {}
    for name, r in for_extra(index.requires(wheel), extra, py).items():
        library = library_of(name)
        if library == "cuda":
            found["cuda"] = floor_version(r)
        elif library == "cudnn":
            found["cudnn"] = floor_version(r)
        elif library == "nccl":
            found["nccl"] = spec_text(r.specifier)
    missing = [k for k in ("cuda", "cudnn") if not found.get(k)]
    if missing:
        names = {"cuda": "nvidia-cuda-runtime", "cudnn": "nvidia-cudnn"}
        return (f"{version}: its METADATA ({source}) gives no {' or '.join(names[m] for m in missing)} version "
                f"in the {extra} extra; not added")
    return TfRead(version=str(version), wheel=wheel.filename, source=source, python=py, cuda=found["cuda"] or "",
                  cudnn=found["cudnn"] or "", nccl=found.get("nccl"), python_min=py_text(pys[0]),
                  python_max=py_text(pys[-1]))


def _text(read: TfRead) -> str:
    return f"nvidia-cuda-runtime {read.cuda}, cudnn {read.cudnn}, nccl {read.nccl}"


# --- the refresh ---------------------------------------------------------------------------
def refresh(catalog: Catalog, index: ReadingIndex, *, today: str, data_dir: str | Path | None = None,
            python: str = "3.12", glibc: str = "2.36") -> RefreshResult:
    """Compare the catalog's TensorFlow rows with the tensorflow releases on ``index``; reads only."""
    check_today(today)
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    text, raw = read_file(directory, FILENAME)
    tf = catalog.tensorflow
    entry = raw.get("tensorflow") if isinstance(raw, dict) else None
    rows = list(entry.get("releases") or []) if isinstance(entry, dict) else []
    if [(str(r.get("version")), tuple(r.get("patches") or ())) for r in rows] != \
            [(r.version, r.patches) for r in tf.releases]:
        raise not_loaded_from(directory)
    if not rows or entry is None:
        raise CatalogError(f"{directory / FILENAME} has no releases to extend")
    check_source(catalog)
    known = {r.version: r for r in tf.releases}
    log = RefreshLog()
    new = _new_versions(catalog, index, known, log)

    wheels = list(index.wheels(PROJECT)) if new else []
    updated: dict[str, dict] = {}
    comments: dict[str, str] = {}
    added_series: list[str] = []
    added_patches: list[str] = []
    for series, versions in sorted(new.items(), key=lambda kv: Version(kv[0])):
        series_reads = []
        for v in versions:
            read = _read(index, wheels, v, tf.extra, python, glibc)
            if isinstance(read, str):
                log.warnings.append(read)
            else:
                series_reads.append(read)
        if not series_reads:
            continue
        log.reads.extend(series_reads)
        row = next((dict(r) for r in rows if str(r["version"]) == series), None)
        if row is not None:  # a known series: only its patches change
            added_patches += _add_patches(row, known[series], series_reads, comments, log)
        else:
            row = _new_series(catalog, index, series, series_reads, glibc, today, comments, log)
            added_series.append(series)
        updated[series] = row

    proposed = _edit_text(text, rows, updated, comments) if updated else text
    expected = sorted([updated.get(str(r["version"]), r) for r in rows] + [updated[s] for s in added_series],
                      key=lambda r: Version(str(r["version"])))
    check_parses_back(FILENAME, proposed, {**raw, "tensorflow": {**entry, "releases": expected}})
    return RefreshResult(framework="tensorflow", data_dir=directory, current_text=text, proposed_text=proposed,
                         entries=tuple(updated[s] for s in sorted(updated, key=Version)),
                         added_series=tuple(added_series), added_patches=tuple(sorted(added_patches, key=Version)),
                         notes=tuple(log.notes), warnings=tuple(log.warnings), skipped=tuple(log.skipped),
                         reads=tuple(sorted(log.reads, key=lambda r: Version(r.version))))


def _new_versions(catalog: Catalog, index: ReadingIndex, known: dict[str, TfRelease],
                  log: RefreshLog) -> dict[str, list[Version]]:
    """The index's releases the catalog lacks, by series (a release whose post-release the row lists is not)."""
    oldest = min(Version(s) for s in known)
    new: dict[str, list[Version]] = {}
    older = 0
    for v in published(index, PROJECT):
        series = f"{v.major}.{v.minor}"
        if Version(series) < oldest:
            older += 1
        elif (series not in known or str(v) not in known[series].patches) and \
                skip_excluded(catalog, "tensorflow", v, log.skipped):
            continue
        elif series in known and any(Version(p).is_postrelease and Version(p).base_version == str(v)
                                     for p in known[series].patches):
            log.notes.append(f"{v}: skipped - the {series} row lists its post-release, which replaces it")
        elif series not in known or str(v) not in known[series].patches:
            new.setdefault(series, []).append(v)
    if older:
        log.notes.append(f"ignored {older} tensorflow version(s) older than the catalog's oldest series ({oldest})")
    return new


def _add_patches(row: dict, release: TfRelease, series_reads: list[TfRead], comments: dict[str, str],
                 log: RefreshLog) -> list[str]:
    """Add the new patches to a known series' ``row`` (edited); its pins are the row's, warned about if the wheels
    differ."""
    series = release.version
    got = [r.version for r in series_reads]
    for read in series_reads:
        if read.pins != (release.cuda, release.cudnn):
            log.warnings.append(f"{read.version}: the index wheel gives CUDA {read.pins[0]}, cuDNN {read.pins[1]} "
                                f"({read.source}); the {series} row says {release.cuda}, {release.cudnn} "
                                "(only the patches are changed)")
    row["patches"] = sorted({*release.patches, *got}, key=Version)
    comments[series] = "; ".join(f"{r.version}: {r.source}" for r in series_reads)
    log.notes.append(
        f"{series}: added patch(es) {', '.join(got)} (" + "; ".join(_text(r) for r in series_reads) + ")"
    )
    return got


def _new_series(catalog: Catalog, index: ReadingIndex, series: str, series_reads: list[TfRead], glibc: str,
                today: str, comments: dict[str, str], log: RefreshLog) -> dict:
    """A new series' row from its newest patch's wheel (its arches read from the wheel when they can be)."""
    tf = catalog.tensorflow
    got = [r.version for r in series_reads]
    newest = series_reads[-1]
    for other in series_reads[:-1]:
        if other.pins != newest.pins:
            log.warnings.append(f"{series}: {other.version} gives CUDA/cuDNN {'/'.join(other.pins)}, unlike "
                                f"{newest.version} ({'/'.join(newest.pins)}); the row records {newest.version}'s")
    row = {"version": series, "patches": sorted(got, key=Version),
           "python": {"min": newest.python_min, "max": newest.python_max},
           "cuda": newest.pins[0], "cudnn": newest.pins[1]}
    reading = wheel_reading(index, PROJECT, newest.version, newest.python, glibc)
    if isinstance(reading, str):
        arches_said = f"arches unread ({reading}): the file-wide arch_list {tf.arch_list} applies - review"
        log.warnings.append(f"{series}: {arches_said}")
    else:
        row["arches"] = list(reading.flags)
        arches_said = f"arches read from {reading.source}"
    try:
        TfRelease.model_validate(row)
    except Exception as exc:  # pydantic.ValidationError; a bug here, not bad input
        raise CatalogError(f"refresh built an invalid row for tensorflow {series}: {exc}") from None
    comments[series] = (f"refreshed from the package index {today}: {newest.source} ({tf.extra}: "
                        f"{_text(newest)}; Python from cp tags); {arches_said}; min_driver is file-wide, "
                        "not in wheel metadata: carried forward - review")
    log.notes.append(f"{series}: new series from {newest.wheel}: {_text(newest)}, python "
                     f"{newest.python_min}-{newest.python_max}; min_driver {tf.min_driver} carried forward "
                     f"(not in wheel metadata); {arches_said.split(' (')[0]}")
    return row


def render_row(row: dict, comment: str | None = None) -> str:
    """One release row in tensorflow.yaml's own layout (a one-line flow mapping)."""
    patches = ", ".join(q(p) for p in row["patches"])
    line = (f"    - {{version: {q(row['version'])}, patches: [{patches}], python: {{min: {q(row['python']['min'])}, "
            f"max: {q(row['python']['max'])}}}, cuda: {q(row['cuda'])}, cudnn: {q(row['cudnn'])}"
            + (f", arches: [{', '.join(row['arches'])}]" if row.get("arches") else "") + "}")
    return line + (f"  # {comment}" if comment else "") + "\n"


def _edit_text(text: str, rows: list[dict], updated: dict[str, dict], comments: dict[str, str]) -> str:
    lines = text.splitlines(keepends=True)
    found = [(m["v"], i) for i, line in enumerate(lines) if (m := _ROW.match(line))]
    if [v for v, _ in found] != [str(r["version"]) for r in rows]:
        raise CatalogError(f"{FILENAME}: the rows found by layout do not match the parsed releases",
                           hint="refresh edits one-line rows '    - {version: ...}'; add the rows by hand")
    at = dict(found)
    replace: dict[int, str] = {}
    insert: dict[int, list[str]] = {}
    for series in sorted(updated, key=Version):
        row = updated[series]
        if series in at:
            i = at[series]
            line = lines[i]
            new_line, n = _PATCHES.subn("patches: [" + ", ".join(q(p) for p in row["patches"]) + "]", line, count=1)
            if n != 1:
                raise CatalogError(f"{FILENAME}: series {series} has no one-line 'patches: [...]'",
                                   hint="add the patch by hand")
            body = new_line.rstrip("\r\n")
            eol = new_line[len(body):] or "\n"
            replace[i] = body + ("; " if "#" in body else "  # ") + comments[series] + eol
        else:
            before = [i for v, i in found if Version(v) < Version(series)]
            pos = before[-1] + 1 if before else found[0][1]
            insert.setdefault(pos, []).append(render_row(row, comments[series]))
    return splice(lines, insert, {i: [line] for i, line in replace.items()})


__all__ = ["TfRead", "refresh", "render_row"]
