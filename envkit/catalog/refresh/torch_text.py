"""PyTorch: pytorch.yaml's own text, edited in place (``torch.refresh`` decides the rows): a new series' row in the
file's layout (``render_row``), a known series' patches line rewritten."""

from __future__ import annotations

import re
from typing import Iterable

from packaging.version import Version

from ...errors import CatalogError
from .common import q, splice

FILENAME = "pytorch.yaml"
_VERSION_LINE = re.compile(r'^  - version: "?(?P<v>[0-9][0-9.]*)"?\s*$')
_PATCHES_LINE = re.compile(r"^(?P<indent>    )patches: \[.*\]\s*$")


def _patches_line(indent: str, patches: Iterable[str]) -> str:
    return f"{indent}patches: [{', '.join(q(p) for p in patches)}]\n"


def render_row(row: dict) -> str:
    """One release row in pytorch.yaml's own layout (two-space list item, flow variants)."""
    lines = [f"  - version: {q(row['version'])}\n",
             _patches_line("    ", row["patches"]),
             f"    python: {{min: {q(row['python']['min'])}, max: {q(row['python']['max'])}}}\n",
             f"    index_default: {row['index_default']}\n",
             f"    verified: {str(row['verified']).lower()}\n",
             f"    sources: [{', '.join(row['sources'])}]\n"]
    if row.get("note") is not None:
        lines.append(f"    note: {q(row['note'])}\n")
    lines.append("    variants:\n")
    for v in row["variants"]:
        lines.append(f"      - {{tag: {v['tag']}, cuda: {q(v['cuda'])}, status: {v['status']}, "
                     f"cudnn: {q(v['cudnn'])}, nccl: {q(v['nccl'])}, arch_list: {q(v['arch_list'])}}}\n")
    return "".join(lines)


def release_blocks(lines: list[str]) -> list[tuple[str, int, int]]:
    """(series, first line, end line exclusive) of each row under the top-level ``releases:``."""
    try:
        start = next(i for i, line in enumerate(lines) if line.rstrip() == "releases:")
    except StopIteration:
        raise CatalogError(f"{FILENAME} has no top-level 'releases:' line") from None
    blocks: list[list] = []
    for i in range(start + 1, len(lines)):
        line = lines[i]
        m = _VERSION_LINE.match(line.rstrip("\r\n"))
        if m:
            blocks.append([m["v"], i, i + 1])
        elif line.startswith("    ") and blocks:
            blocks[-1][2] = i + 1
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        elif not line.startswith(" "):
            break  # the next top-level key
        else:
            raise CatalogError(f"{FILENAME}:{i + 1}: unexpected line in releases: {line.rstrip()!r}",
                               hint="refresh edits rows laid out as '  - version: ...' with 4-space fields")
    return [(b[0], b[1], b[2]) for b in blocks]


def edit_text(text: str, rows: list[dict], updated: dict[str, dict]) -> str:
    lines = text.splitlines(keepends=True)
    blocks = release_blocks(lines)
    if [b[0] for b in blocks] != [str(r["version"]) for r in rows]:
        raise CatalogError(f"{FILENAME}: the rows found by layout do not match the parsed releases",
                           hint="add the rows by hand")
    by_series = {b[0]: b for b in blocks}
    replace: dict[int, str] = {}
    insert: dict[int, list[str]] = {}
    for series in sorted(updated, key=Version):
        row = updated[series]
        if series in by_series:  # a known series: rewrite its patches line only
            _, first, end = by_series[series]
            hits = [i for i in range(first, end) if _PATCHES_LINE.match(lines[i].rstrip("\r\n"))]
            if len(hits) != 1:
                raise CatalogError(f"{FILENAME}: series {series} has no one-line 'patches: [...]'",
                                   hint="add the patch by hand")
            eol = "\r\n" if lines[hits[0]].endswith("\r\n") else "\n"
            replace[hits[0]] = _patches_line("    ", row["patches"]).replace("\n", eol)
        else:  # a new series: after the last older row, else before the first
            before = [b for b in blocks if Version(b[0]) < Version(series)]
            at = before[-1][2] if before else blocks[0][1] if blocks else len(lines)
            insert.setdefault(at, []).append(render_row(row))
    return splice(lines, insert, {i: [line] for i, line in replace.items()})


__all__ = ["FILENAME", "edit_text", "release_blocks", "render_row"]
