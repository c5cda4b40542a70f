"""`envkit catalog check-arches`: the catalog's compiled arch lists against the wheels themselves.

For every PyTorch row (its index-default variant: the only one the package index serves) and
every TensorFlow release, the newest patch's Linux wheel is read by range requests
(``envkit.index.wheel_arches``) and its flags compared with what the catalog plans with. A row that
disagrees gets the wheel's list, spelled in the file's own notation (pytorch.yaml:
``arch_list: "7.5;...;12.0"``; tensorflow.yaml: the release's ``arches: [sm_60, ...]``), and a
source key per wheel (``wheel_arches_<framework>_<version>`` in sources.yaml, naming the file,
its URL and how it was read), added to the row's ``sources`` (pytorch.yaml) or the file's
(tensorflow.yaml). Non-default torch variants are left as they are and listed as unconfirmed.

Like the refresh it reads only: the result is one ``RefreshResult`` per file, so the diff and
``apply`` (every file validated together in a copy, then each replaced atomically) are the
refresh's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from packaging.version import Version

from ...errors import CatalogError
from ...frameworks import ARCH_LISTED, framework
from ...index.wheel_arches import ArchReading, same_arches
from ..files import data_dir as default_data_dir
from ..models import Catalog
from .common import (
    ReadingIndex,
    RefreshResult,
    apply_texts,
    check_today,
    load_yaml,
    q,
    read_file,
    splice,
    wheel_reading,
)
from .tensorflow import _ROW as _TF_ROW
from .torch_text import release_blocks

ARCH_FRAMEWORKS = ARCH_LISTED  # the frameworks whose GPU coverage is a compiled arch list (envkit.frameworks)
_VARIANT = re.compile(r'^(?P<indent>\s+)- \{tag: (?P<tag>[A-Za-z0-9_.]+), .*arch_list: (?P<q>"[^"]*")\}\s*$')
_SOURCES = re.compile(r"^(?P<indent>\s+)sources: \[(?P<keys>[^\]]*)\]")


@dataclass(frozen=True)
class ArchCheck:
    """The rows compared, what changed, and each file's result (pytorch/tensorflow/sources.yaml)."""

    data_dir: Path
    results: tuple[RefreshResult, ...]
    rows: tuple[dict, ...]  # one per row compared: framework, version, variant, catalog, wheel, status
    notes: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.results)

    def diff(self) -> str:
        return "".join(r.diff() for r in self.results)

    def apply(self, data_dir: str | Path | None = None) -> list[Path]:
        return apply_texts(Path(data_dir) if data_dir is not None else self.data_dir, self.results)

    def summary(self) -> dict:
        return {"changed": self.changed, "rows": [dict(r) for r in self.rows],
                "files": [str(self.data_dir / r.filename) for r in self.results if r.changed],
                "notes": list(self.notes), "warnings": list(self.warnings), "diff": self.diff()}


def source_key(reading: ArchReading, version: str) -> str:
    return f"wheel_arches_{reading.framework}_{version.replace('.', '_')}"


def source_text(reading: ArchReading, today: str) -> str:
    source = framework(reading.framework).arch  # (a reading is of a framework whose wheels hold the list)
    return (f"{reading.wheel} ({reading.url}): {reading.member}'s " + (source.text if source else "arch list")
            + f" = '{' '.join(reading.flags)}', read by HTTP range requests (envkit catalog check-arches, {today})")


def check_arches(catalog: Catalog, index: ReadingIndex, *, today: str, frameworks: Iterable[str]=ARCH_FRAMEWORKS,
                 data_dir: str | Path | None = None, python: str = "3.12", glibc: str = "2.36") -> ArchCheck:
    """Compare the catalog's arch lists with the wheels on ``index``; reads only."""
    check_today(today)
    unknown = sorted(set(frameworks) - set(ARCH_FRAMEWORKS))
    if unknown:
        raise CatalogError(f"no arch check for framework(s) {', '.join(unknown)}",
                           hint=f"choose from {', '.join(ARCH_FRAMEWORKS)} (JAX is judged by min_cc)")
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    rows: list[dict] = []
    notes: list[str] = []
    warnings: list[str] = []
    sources: dict[str, str] = {}
    results = []
    for name in ARCH_FRAMEWORKS:  # (the frameworks' order, whatever the caller's)
        if name in frameworks:
            check = CATALOG_FILE_CHECKS[name]
            results.append(check(catalog, index, directory, today, python, glibc, rows, notes, warnings, sources))
    results.append(sources_result(directory, sources))
    return ArchCheck(directory, tuple(results), tuple(rows), tuple(notes), tuple(warnings))


# --- pytorch.yaml --------------------------------------------------------------------------
def _torch(
    catalog: Catalog,
    index: ReadingIndex,
    directory: Path,
    today: str,
    python: str,
    glibc: str,
    rows: list[dict],
    notes: list[str],
    warnings: list[str],
    sources: dict[str, str],
) -> RefreshResult:
    text, _ = read_file(directory, "pytorch.yaml")
    lines = text.splitlines(keepends=True)
    blocks = {b[0]: b for b in release_blocks(lines)}
    replace: dict[int, list[str]] = {}
    unconfirmed = []
    for release in catalog.torch_releases():
        variant = release.variant(release.index_default)
        unconfirmed += [f"{release.version} {v.tag}" for v in release.variants if v.tag != release.index_default]
        if variant is None or release.version not in blocks:
            warnings.append(f"torch {release.version}: no row/variant {release.index_default} to compare")
            continue
        newest = max(release.patches, key=Version)
        row: dict[str, Any] = {
            "framework": "torch",
            "version": newest,
            "variant": variant.tag,
            "catalog": variant.arch_list,
        }
        got = wheel_reading(index, "torch", newest, python, glibc, cuda=variant.cuda)
        if isinstance(got, str):
            warnings.append(f"torch {release.version} {variant.tag}: {got}")
            rows.append({**row, "status": "unread", "why": got})
            continue
        row |= {"wheel": got.wheel, "url": got.url, "flags": list(got.flags), "read": got.arch_list}
        if same_arches(variant.arches, got.flags):
            rows.append({**row, "status": "agrees"})
            continue
        if got.arch_list is None:
            warnings.append(f"torch {release.version} {variant.tag}: {got.wheel} holds {' '.join(got.flags)}, "
                            "which TORCH_CUDA_ARCH_LIST notation cannot spell (PTX without its SASS); fix by hand")
            rows.append({**row, "status": "unspellable"})
            continue
        _, first, end = blocks[release.version]
        hits = [
            i for i in range(first, end) if (m := _VARIANT.match(lines[i].rstrip("\r\n"))) and m["tag"] == variant.tag
        ]
        src = [i for i in range(first, end) if _SOURCES.match(lines[i])]
        if len(hits) != 1 or len(src) != 1:
            raise CatalogError(f"pytorch.yaml: the {release.version} row has no one-line {variant.tag} variant and "
                               "'sources: [...]' line", hint="correct the arch list by hand")
        key = source_key(got, newest)
        sources[key] = source_text(got, today)
        line = lines[hits[0]]
        indent = line[:len(line) - len(line.lstrip())]  # the variant line's own (_VARIANT matched it)
        eol = "\r\n" if line.endswith("\r\n") else "\n"
        replace[hits[0]] = [f"{indent}# arch_list read from {got.wheel} ({key}, {today}); was {variant.arch_list}{eol}",
                            line.replace(f'arch_list: {q(variant.arch_list)}}}', f'arch_list: {q(got.arch_list)}}}')]
        replace[src[0]] = [_add_source(lines[src[0]], key)]
        rows.append({**row, "status": "corrected"})
        notes.append(f"torch {release.version} {variant.tag}: {variant.arch_list} -> {got.arch_list} "
                     f"(read from {got.wheel})")
    if unconfirmed:
        notes.append("torch variants the package index does not serve, left unconfirmed: " + ", ".join(unconfirmed))
    proposed = splice(lines, {}, replace) if replace else text
    _parses(proposed, "pytorch.yaml")
    return RefreshResult(framework="torch", data_dir=directory, current_text=text, proposed_text=proposed,
                         notes=(), warnings=())


def _add_source(line: str, key: str) -> str:
    m = _SOURCES.match(line)
    if m is None:  # matched when the row was read
        raise CatalogError(f"pytorch.yaml: {line.strip()!r} is not a one-line 'sources: [...]'")
    keys = [k.strip() for k in m["keys"].split(",") if k.strip()]
    if key in keys:
        return line
    return line[:m.start("keys")] + ", ".join(keys + [key]) + line[m.end("keys"):]


# --- tensorflow.yaml -----------------------------------------------------------------------
def _tensorflow(
    catalog: Catalog,
    index: ReadingIndex,
    directory: Path,
    today: str,
    python: str,
    glibc: str,
    rows: list[dict],
    notes: list[str],
    warnings: list[str],
    sources: dict[str, str],
) -> RefreshResult:
    text, _ = read_file(directory, "tensorflow.yaml")
    lines = text.splitlines(keepends=True)
    at = {m["v"]: i for i, line in enumerate(lines) if (m := _TF_ROW.match(line))}
    tf = catalog.tensorflow
    replace: dict[int, list[str]] = {}
    keys = []
    for release in tf.releases:
        newest = max(release.patches, key=Version)
        have = tf.arches_for(release)
        row: dict[str, Any] = {
            "framework": "tensorflow",
            "version": newest,
            "variant": tf.extra,
            "catalog": " ".join(have),
            "catalog_from": "release" if release.arches is not None else "file-wide arch_list",
        }
        got = wheel_reading(index, "tensorflow", newest, python, glibc)
        if isinstance(got, str):
            warnings.append(f"tensorflow {release.version}: {got}")
            rows.append({**row, "status": "unread", "why": got})
            continue
        row |= {"wheel": got.wheel, "url": got.url, "flags": list(got.flags)}
        if release.arches is not None and same_arches(release.arches, got.flags):
            rows.append({**row, "status": "agrees"})
            continue
        if release.version not in at:
            raise CatalogError(f"tensorflow.yaml: no one-line row for {release.version}",
                               hint="correct the arches by hand")
        i = at[release.version]
        key = source_key(got, newest)
        sources[key] = source_text(got, today)
        keys.append(key)
        replace[i] = [_tf_line(lines[i], got.flags, key, today)]
        rows.append({**row, "status": "corrected"})
        notes.append(f"tensorflow {release.version}: {' '.join(have)} -> {' '.join(got.flags)} (read from {got.wheel})")
    if keys:
        src = [i for i, line in enumerate(lines) if re.match(r"^  sources: \[", line)]
        if len(src) != 1:
            raise CatalogError("tensorflow.yaml has no one-line '  sources: [...]'", hint="correct the arches by hand")
        for key in keys:
            replace[src[0]] = [_add_source(replace.get(src[0], [lines[src[0]]])[0], key)]
    proposed = splice(lines, {}, replace) if replace else text
    _parses(proposed, "tensorflow.yaml")
    return RefreshResult(framework="tensorflow", data_dir=directory, current_text=text, proposed_text=proposed)


def _tf_line(line: str, flags: Iterable[str], key: str, today: str) -> str:
    body = line.rstrip("\r\n")
    eol = line[len(body):] or "\n"
    code, sep, comment = body.partition("  #")
    arches = "arches: [" + ", ".join(flags) + "]"
    if "arches: [" in code:
        code = re.sub(r"arches: \[[^\]]*\]", arches, code)
    else:
        code = code.rstrip()
        if not code.endswith("}"):
            raise CatalogError(f"tensorflow.yaml: row {code!r} is not a one-line mapping", hint="correct it by hand")
        code = code[:-1] + ", " + arches + "}"
    note = f"arches: {key} ({today})"
    return code + ("  # " + comment.strip() + "; " + note if sep else "  # " + note) + eol


# --- sources.yaml --------------------------------------------------------------------------
def sources_result(directory: Path, new: dict[str, str]) -> RefreshResult:
    """sources.yaml with the keys of ``new`` added (a key already there with another text: replaced)."""
    text, raw = read_file(directory, "sources.yaml")
    have = (raw or {}).get("sources") or {}
    add = {k: v for k, v in sorted(new.items()) if have.get(k) != v}
    proposed = text
    if add:
        lines = text.splitlines(keepends=True)
        start = next((i for i, line in enumerate(lines) if line.rstrip() == "sources:"), None)
        if start is None:
            raise CatalogError("sources.yaml has no top-level 'sources:' line")
        end = start + 1
        while end < len(lines) and (lines[end].startswith("  ") or not lines[end].strip()):
            end += 1
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        drop = {i for i in range(start + 1, end) if (m := re.match(r"^  (\S+):", lines[i])) and m[1] in add}
        if drop:  # a key read again with another value: replace its (one-line) entry
            lines = [line for i, line in enumerate(lines) if i not in drop]
            end -= len({i for i in drop if i < end})
        proposed = splice(lines, {end: [f"  {k}: {q(v)}\n" for k, v in add.items()]}, {})
        _parses(proposed, "sources.yaml")
    return RefreshResult(framework="torch", data_dir=directory, current_text=text, proposed_text=proposed,
                         file="sources.yaml")


def _parses(text: str, filename: str) -> None:
    try:
        load_yaml(text)
    except Exception as exc:  # yaml.YAMLError: a bug in the edit, not bad input
        raise CatalogError(f"check-arches produced a {filename} that does not parse: {exc}",
                           hint="correct the arch lists by hand") from None


__all__ = ["ARCH_FRAMEWORKS", "ArchCheck", "check_arches", "source_key", "source_text", "wheel_reading"]


# Each arch-listed framework's catalog file and the way its list is written there (tests/unit/catalog: one per
# framework of ARCH_LISTED, so a framework added there without one here fails a test, not a refresh).
CATALOG_FILE_CHECKS = {"torch": _torch, "tensorflow": _tensorflow}
