"""JAX: the edits of ``jax.yaml``'s text a refresh proposes (``jax.refresh`` decides them), its layout kept."""

from __future__ import annotations

from packaging.version import Version

from ...errors import CatalogError
from .common import q, splice

FILENAME = "jax.yaml"
_WIDTH = 118


def _render_versions(versions: list[str]) -> list[str]:
    lead, indent = "  versions: [", " " * len("  versions: [")
    lines, line = [], lead
    for i, v in enumerate(versions):
        item = q(v) + ("]" if i == len(versions) - 1 else ",")
        if line not in (lead, indent) and len(line) + 1 + len(item) > _WIDTH:
            lines.append(line + "\n")
            line = indent
        line += ("" if line in (lead, indent) else " ") + item
    return lines + [line + "\n"]


def _find(lines: list[str], prefix: str, start: int = 0, end: int | None = None) -> int:
    for i in range(start, len(lines) if end is None else end):
        if lines[i].startswith(prefix):
            return i
    raise CatalogError(f"{FILENAME}: no line starting {prefix.strip()!r} where refresh expects it",
                       hint="the file's layout is not the one refresh edits; add the version by hand")


def _with_tail(line: str, tail: str | None) -> str:
    if not tail:
        return line
    body = line.rstrip("\n")
    return f"{body}{'; ' if '#' in body else '  # '}{tail}\n"


def edit_text(text: str, entry: dict, state: dict, comments: list[str], tails: dict) -> str:
    lines = text.splitlines(keepends=True)
    out_extra: dict[int, list[str]] = {}  # insert before line i
    replace: dict[int, list[str]] = {}
    top = _find(lines, "  versions: [")
    bottom = next((i for i in range(top, len(lines)) if lines[i].split("#", 1)[0].rstrip().endswith("]")), None)
    if bottom is None:
        raise CatalogError(f"{FILENAME}: the versions list does not end with ']'", hint="add the version by hand")
    lead = "  versions: ["
    fresh = [v for v in state["versions"] if v not in entry["versions"]]
    if min(Version(v) for v in fresh) > max(Version(str(v)) for v in entry["versions"]):
        # only newer versions: they go on a line of their own, the old lines stay as they are
        replace[top] = comments + [lead + ", ".join(q(v) for v in fresh) + ",\n",
                                   " " * len(lead) + lines[top][len(lead):]]
    else:
        replace[top] = comments + _render_versions(state["versions"])
        for i in range(top + 1, bottom + 1):
            replace[i] = []
    pm = _find(lines, "  python_min:")
    last = pm
    while last + 1 < len(lines) and lines[last + 1].startswith("    - {since:"):
        last += 1
    new_rows = state["python_min"][len(entry["python_min"]):]
    out_extra[last + 1] = [_with_tail(f"    - {{since: {q(r['since'])}, python: {q(r['python'])}}}\n",
                                      tails.get(("python_min", r["since"]))) for r in new_rows]
    ex = _find(lines, "  extras:")
    known = {e["extra"] for e in entry["extras"]}
    new = [_render_extra(e, tails[(e["extra"], "new")]) for e in state["extras"] if e["extra"] not in known]
    out_extra.setdefault(ex + 1, []).extend(line for block in new for line in block)
    for e in state["extras"]:
        if e["extra"] not in known or (e["extra"], "built_with") not in tails:
            continue
        head = _find(lines, f"    - extra: {e['extra']}", ex)
        i = _find(lines, "      built_with: [", head)
        rows = ", ".join(f"{{since: {q(r['since'])}, cuda: {q(r['cuda'])}}}" for r in e["built_with"])
        comment = lines[i].split("#", 1)[1].strip() if "#" in lines[i] else ""
        replace[i] = [_with_tail(f"      built_with: [{rows}]" + (f"  # {comment}" if comment else "") + "\n",
                                 tails[(e["extra"], "built_with")])]
    return splice(lines, out_extra, replace)


def _render_extra(e: dict, carried_from: str) -> list[str]:
    return [f"    - extra: {e['extra']}\n",
            f"      since: {q(e['since'])}  # first version whose METADATA names this extra\n",
            f"      min_cc: {q(e['min_cc'])}  # carried forward from {carried_from}: not in wheel metadata - review\n",
            f"      built_with: [{{since: {q(e['since'])}, cuda: {q(e['built_with'][0]['cuda'])}}}]"
            "  # the plugin's nvidia-cuda-runtime floor - review\n",
            f"      cudnn: {q(e['cudnn'])}\n",
            f"      nccl: {q(e['nccl'])}\n"]


__all__ = ["FILENAME", "edit_text"]
