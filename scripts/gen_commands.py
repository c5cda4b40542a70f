"""Write docs/commands.md from the CLI's own help: every command and group under `envkit.cli.main`, each with its
usage, help text and options, as Markdown. `make docs` runs it; tests/unit/test_commands_doc.py fails when the
committed file differs from a fresh generation.

    python scripts/gen_commands.py            # write docs/commands.md
    python scripts/gen_commands.py --stdout   # print it instead
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "commands.md"
HEADER = "<!-- generated — do not edit; regenerate with `make docs` (scripts/gen_commands.py) -->"

# Markdown would take `<image>` for an HTML tag and `numpy==2.*` for emphasis: escape both outside code spans.
CODE_SPAN = re.compile(r"(`[^`]*`)")


def _escape(text: str) -> str:
    parts = CODE_SPAN.split(text)
    return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1
                   else p.replace("\\", "\\\\").replace("<", "\\<").replace("*", "\\*").replace("_", "\\_")
                   for p in parts)


def _paragraphs(help_text: str) -> list[str]:
    """The help text as click shows it: paragraphs rewrapped, a `\\b` paragraph kept line by line."""
    out = []
    for para in re.split(r"\n\s*\n", inspect.cleandoc(help_text)):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            out.append("  \n".join(_escape(line.strip()) for line in lines[1:]))
        else:
            out.append(_escape(" ".join(line.strip() for line in lines)))
    return out


def _walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> list[tuple[list[str], click.Command,
                                                                                           click.Context]]:
    ctx = click.Context(cmd, info_name=path[-1], parent=parent, terminal_width=10_000, max_content_width=10_000)
    found = [(path, cmd, ctx)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            sub = cmd.commands[name]
            if not sub.hidden:
                found += _walk(sub, [*path, name], ctx)
    return found


def _section(path: list[str], cmd: click.Command, ctx: click.Context) -> list[str]:
    name = " ".join(path)
    lines = [f"## {name}", "", "```", f"{name} {' '.join(cmd.collect_usage_pieces(ctx))}".rstrip(), "```", ""]
    if cmd.help:
        for para in _paragraphs(cmd.help):
            lines += [para, ""]
    if isinstance(cmd, click.Group):
        subs = [(n, c) for n, c in sorted(cmd.commands.items()) if not c.hidden]
        lines += ["Commands:", ""]
        lines += [f"- [`{name} {n}`](#{'-'.join([*path, n])}): {_escape(c.get_short_help_str(limit=10_000))}"
                  for n, c in subs]
        lines.append("")
    records = [r for p in cmd.get_params(ctx)
               if isinstance(p, click.Option) and (r := p.get_help_record(ctx)) is not None]
    if records:
        lines += ["Options:", ""]
        for opts, text in records:
            lines.append(f"- `{opts}`" + (f": {_escape(' '.join(text.split()))}" if text else ""))
        lines.append("")
    return lines


def render(main: click.Command) -> str:
    sections = _walk(main, ["envkit"], None)
    lines = [HEADER, "", "# envkit commands", "",
             "Each command's usage, help and options, as `envkit COMMAND --help` prints them. The options shared by",
             "every command, exit codes and what an interruption leaves are in [cli.md](cli.md).", ""]
    for path, _cmd, _ctx in sections[1:]:
        lines.append(f"{'  ' * (len(path) - 2)}- [`{' '.join(path)}`](#{'-'.join(path)})")
    lines.append("")
    for path, cmd, ctx in sections:
        lines += _section(path, cmd, ctx)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from envkit.cli import main as cli

    text = render(cli)
    if "--stdout" in argv:
        sys.stdout.write(text)
    else:
        OUT.write_text(text)
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
