"""companions.yaml's own text, edited in place: a new row written in the file's layout (``render_row``), and rows
and package lines changed where they stand, every comment and blank line kept (``edit_text``)."""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name
from packaging.version import Version

from ...errors import CatalogError
from ..companions import FILE, KEY, catalog_key
from .common import q, splice

_ROW = re.compile(r'^    - version: "(?P<v>[^"]+)"\s*(#.*)?$')
_SECTION = re.compile(r"^  (?P<fw>[a-z]+):\s*(?P<empty>\[\])?\s*(#.*)?$")
_SOURCES = re.compile(r"^      sources: \[(?P<keys>[^\]]*)\](?P<tail>.*)$")
_PACKAGES = re.compile(r"^      packages:\s*(#.*)?$")
_PACKAGE = re.compile(r'^        (?P<name>[A-Za-z0-9._-]+): "(?P<spec>[^"]*)"(?P<tail>.*)$')


# --- editing the text --------------------------------------------------------------------------------------
def render_row(row: dict, comments: dict[str, str] | None = None) -> str:
    """One row in companions.yaml's layout (block mappings, four-space list items)."""
    lines = [f"    - version: {q(row['version'])}\n", f"      sources: [{', '.join(row['sources'])}]\n"]
    if row.get("note") is not None:
        lines.append(f"      note: {q(row['note'])}\n")
    lines.append("      packages:\n")
    for name, spec in row["packages"].items():
        tail = f"  # {comments[name]}" if comments and name in comments else ""
        lines.append(f"        {name}: {q(spec)}{tail}\n")
    return "".join(lines)


def _layout(lines: list[str]) -> dict[str, dict]:
    """framework -> {"line": its section line, "empty": written '[]', "rows": [(version, first, end)], "end": int}."""
    try:
        top = next(i for i, line in enumerate(lines) if line.rstrip() == f"{KEY}:")
    except StopIteration:
        raise CatalogError(f"{FILE} has no top-level '{KEY}:' line",
                           hint="the file's layout is not the one refresh edits; add the rows by hand") from None
    out: dict[str, dict] = {}
    current = None
    for i in range(top + 1, len(lines)):
        line = lines[i].rstrip("\r\n")
        if (m := _SECTION.match(line)) is not None:
            current = out[m["fw"]] = {"line": i, "empty": bool(m["empty"]), "rows": [], "end": i + 1}
        elif (m := _ROW.match(line)) is not None and current is not None:
            current["rows"].append([m["v"], i, i + 1])
            current["end"] = i + 1
        elif line.startswith("      ") and current is not None and current["rows"]:
            current["rows"][-1][2] = i + 1
            current["end"] = i + 1
        elif not line.strip() or line.lstrip().startswith("#"):
            continue
        elif not line.startswith(" "):
            break
        else:
            raise CatalogError(f"{FILE}:{i + 1}: unexpected line under {KEY}: {line!r}",
                               hint="refresh edits rows laid out as '    - version: ...' with six-space fields; "
                                    "add the rows by hand")
    out["_end"] = {"end": max([top + 1] + [s["end"] for s in out.values()])}
    return out


def edit_text(text: str, changes: dict[str, dict[Version, dict]]) -> str:
    lines = text.splitlines(keepends=True)
    layout = _layout(lines)
    insert: dict[int, list[str]] = {}
    replace: dict[int, list[str]] = {}
    for framework, plan in changes.items():
        section = layout.get(framework)
        blocks = [(catalog_key(framework, v), first, end) for v, first, end in (section or {}).get("rows", [])]
        for key, p in sorted(plan.items()):
            if p["new"]:
                text_row = render_row(p["row"])
                if section is None:
                    insert.setdefault(layout["_end"]["end"], []).append(f"  {framework}:\n{text_row}")
                    section = {"line": None, "empty": False, "rows": [], "end": layout["_end"]["end"]}
                    layout[framework] = section
                    continue
                if section["empty"]:
                    replace[section["line"]] = [f"  {framework}:\n"]
                    section["empty"] = False
                before = [b for b in blocks if b[0] < key]
                at = before[-1][2] if before else (blocks[0][1] if blocks else section["end"])
                insert.setdefault(at, []).append(text_row)
                continue
            _, first, end = next(b for b in blocks if b[0] == key)
            _update_row(lines, range(first, end), framework, p, insert, replace)
    return splice(lines, insert, replace)


def _update_row(lines: list[str], span: range, framework: str, p: dict, insert: dict[int, list[str]],
                replace: dict[int, list[str]]) -> None:
    """The edits of an existing row (``lines[span]``): its sources line, and each package line replaced or added."""
    src = [i for i in span if _SOURCES.match(lines[i].rstrip("\r\n"))]
    head = [i for i in span if _PACKAGES.match(lines[i].rstrip("\r\n"))]
    if len(src) != 1 or len(head) != 1:
        raise CatalogError(f"{FILE}: the {framework} {p['row']['version']} row has no one-line "
                           "'sources: [...]' and block 'packages:'", hint="add the companions by hand")
    m = _SOURCES.match(lines[src[0]].rstrip("\r\n"))
    assert m is not None  # matched just above
    replace[src[0]] = [f"      sources: [{', '.join(p['row']['sources'])}]{m['tail']}\n"]
    items = {}
    last = head[0]
    for i in range(head[0] + 1, span.stop):
        pm = _PACKAGE.match(lines[i].rstrip("\r\n"))
        if pm is not None:
            items[canonicalize_name(pm["name"])] = (i, pm["name"])
            last = i
    added = []
    for name, (spec, comment) in p["lines"].items():
        if name in items:
            i, spelled = items[name]
            replace[i] = [f"        {spelled}: {q(spec)}  # {comment}\n"]
        else:
            added.append(f"        {name}: {q(spec)}  # {comment}\n")
    if added:
        insert.setdefault(last + 1, []).extend(added)
