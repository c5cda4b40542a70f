"""Every `envkit ...` example in README.md and docs/*.md names a real command and real options (checked against the
click tree), and every command line in README's blocks is run by a test or says why not (`# not run here: ...`).

The examples are the command lines of fenced blocks (`envkit X` or `$ envkit X` at the start, and `envkit` after a
shell prefix such as `XDG_CACHE_HOME=... /usr/bin/time ...`), output lines that name a command (`envkit pull ...`
printed by `show`), and inline code spans starting with `envkit `. Placeholders in capitals (`envkit COMMAND`) and
optional parts in brackets are read as written: `[--lock FILE]` names `--lock`.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from envkit.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^ *```([^\n]*)\n(.*?)^ *```", re.S | re.M)
SHELL = {"sh", "console", "bash", "shell"}
SPAN = re.compile(r"`(envkit [^`\n]+)`")
IN_LINE = re.compile(r"(?<![\w/.-])(?:\.venv/bin/)?envkit ([a-z-][^#;&\n]*)")
NOT_RUN = "# not run here: "
# The group's own flags, taken before or after the subcommand (cli/flags.py).
GLOBAL = {"--debug", "-v", "--verbose", "--json", "--help", "--version"}


def examples(path: Path) -> list[str]:
    text = path.read_text()
    found = []
    for language, block in FENCE.findall(text):
        for line in block.splitlines():
            shell = language in SHELL or line.startswith("$ ")
            line = re.sub(r"(^|\s)#(\s.*)?$", "", line).split(" | ")[0]
            for m in IN_LINE.finditer(line.removeprefix("$ ")):
                # an output line (a table's `envkit classic  76s`) is not an example; one naming a command is
                if shell or m.group(1).split()[0] in main.commands:
                    found.append("envkit " + m.group(1).strip())
    for span in SPAN.findall(FENCE.sub("", text)):
        first = span.split()[1]
        # prose that starts with the name (`envkit pid N on HOST`), unless it looks like a command misspelled
        if first in main.commands or first.startswith("-") or difflib.get_close_matches(first, main.commands):
            found.append(span.replace("\\|", "|"))
    return found


def option_names(cmd: click.Command) -> set[str]:
    return {name for p in cmd.params if isinstance(p, click.Option) for name in (*p.opts, *p.secondary_opts)}


def problems(example: str) -> list[str]:
    """What in `example` names no command or option of the CLI (empty: it is real)."""
    tokens = [t for t in re.sub(r"[\[\]]", " ", example).split()[1:] if t not in {"...", "|"}]
    cmd: click.Command = main
    while isinstance(cmd, click.Group) and tokens:
        token = tokens.pop(0)
        if token.startswith("-"):
            if token.split("=")[0] not in GLOBAL:
                return [f"{token}: not an option of envkit itself"]
        elif token in cmd.commands:
            cmd = cmd.commands[token]
        elif re.fullmatch(r"[A-Z][A-Z_.]*", token):
            return []  # `envkit COMMAND --help`: a placeholder for any command
        else:
            return [f"{token!r}: no such command (under {'envkit' if cmd is main else cmd.name})"]
    known = option_names(cmd) | GLOBAL
    shorts = {name[1] for name in known if re.fullmatch(r"-\w", name)}
    found = []
    for token in tokens:
        if token == "--":
            break  # `envkit run IMAGE -- CMD`: the job's own arguments
        if re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", token) and token.split("=")[0] not in known:
            found.append(f"{token}: not an option of `{cmd.name}`")
        elif re.fullmatch(r"-[a-z]+", token) and not set(token[1:]) <= shorts:
            found.append(f"{token}: not a short option of `{cmd.name}`")
    return found


ALL = [(path.relative_to(ROOT).as_posix(), example) for path in DOCS for example in examples(path)]


def test_the_examples_are_found():
    readme = [e for doc, e in ALL if doc == "README.md"]
    assert len(readme) >= 20 and any(e.startswith("envkit keys generate --out") for e in readme)
    assert {"docs/fleet.md", "docs/resolver.md", "docs/nightly.md", "docs/cli.md"} <= {doc for doc, _ in ALL}


@pytest.mark.parametrize("doc, example", ALL, ids=[f"{d}:{e[:60]}" for d, e in ALL])
def test_every_example_names_a_real_command_and_option(doc, example):
    assert problems(example) == [], f"{doc}: `{example}` is not what the CLI takes; see docs/commands.md"


def test_the_checker_refuses_what_the_cli_does_not_take():
    assert problems("envkit keys generate --out DIR") == []
    assert problems("envkit --json ls --gpu H100 --certified") == []
    assert problems("envkit run -it IMAGE -- bash -x") == []
    assert problems("envkit keys make --out DIR") == ["'make': no such command (under keys)"]
    assert problems("envkit pull IMAGE --require-certfied") == ["--require-certfied: not an option of `pull`"]
    assert problems("envkit ls -z") == ["-z: not a short option of `ls`"]
    assert problems("envkit lss") == ["'lss': no such command (under envkit)"]


def readme_command_lines() -> list[str]:
    """The command lines of README's blocks (not the output lines under them)."""
    lines = []
    for _language, block in FENCE.findall((ROOT / "README.md").read_text()):
        lines += [line.removeprefix("$ ") for line in block.splitlines()
                  if line.startswith(("envkit ", "$ envkit "))]
    return lines


# What runs here, cheaply and offline; `envkit explain` lines are run by tests/unit/test_readme_examples.py.
RUN_HERE = re.compile(r"^envkit ([a-z ]+ )?--help$|^envkit schema$")


def test_every_readme_command_line_is_run_by_a_test_or_says_why_not():
    lines = readme_command_lines()
    assert len(lines) >= 10
    unmarked = [line for line in lines if NOT_RUN not in line and not line.startswith("envkit explain ")
                and not RUN_HERE.match(line.split("  #")[0].strip())]
    assert unmarked == [], f"README: run these in a test or mark them `{NOT_RUN}<why>`"


def test_the_readmes_cheap_lines_run():
    ran = 0
    for line in readme_command_lines():
        command = line.split("  #")[0].strip()
        if RUN_HERE.match(command):
            result = CliRunner().invoke(main, command.split()[1:])
            assert result.exit_code == 0, (command, result.output)
            ran += 1
    assert ran >= 1


def test_the_readmes_command_table_has_a_row_for_every_command():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("| command | what it does |"):]
    table = table[:table.index("\n\n")]
    named: set[str] = set()
    for row in table.splitlines()[2:]:
        first = row.split(" | ")[0].lstrip("| ")
        named.add(re.findall(r"`([^`]+)`", first)[0].split()[0])
    visible = {name for name, cmd in main.commands.items() if not cmd.hidden}
    assert named == visible, "README's command table: one row per command of `envkit --help`"
