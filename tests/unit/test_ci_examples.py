"""The CI examples in examples/ci: valid YAML, and every envkit command in them is one the CLI accepts."""

import re
import shlex
from pathlib import Path

import click
import pytest
import yaml

from envkit.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "ci").glob("*.yml"))


def scripts(doc) -> list[str]:
    """Every shell line of a GitHub workflow (steps[].run) or a GitLab pipeline (jobs' script)."""
    lines: list[str] = []
    for job in (doc.get("jobs") or {}).values():  # GitHub Actions
        lines += [step["run"] for step in job.get("steps", []) if "run" in step]
    for job in doc.values():  # GitLab CI
        if isinstance(job, dict) and "script" in job:
            lines += list(job["script"])
    return lines


def envkit_argv(line: str) -> list[str] | None:
    # GitHub expressions and shell variables stand for one value, one every parameter type accepts
    line = re.sub(r"\$\{\{[^}]*\}\}|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "value", line)
    words = shlex.split(line.split("||")[0].split(">")[0])
    return words[1:] if words and words[0] == "envkit" else None


def test_there_are_examples():
    assert {p.name for p in EXAMPLES} == {"github-nightly.yml", "gitlab-ci.yml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_envkit_command_parses(path, tmp_path, monkeypatch):
    doc = yaml.safe_load(path.read_text())
    commands = [argv for argv in map(envkit_argv, scripts(doc)) if argv]
    assert any(argv[0] == "nightly" for argv in commands)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text("version: 1\n")  # SPEC arguments must exist
    for argv in commands:
        try:
            command, name, words = main, "envkit", list(argv)
            while isinstance(command, click.Group):  # down to the leaf command (`registry prune`)
                sub = command.get_command(click.Context(command), words[0])
                if sub is None:
                    raise click.UsageError(f"no command {words[0]!r} in `{name}`")
                command, name, words = sub, words[0], words[1:]
            command.make_context(name, words)  # parses its options and arguments
        except click.UsageError as exc:
            pytest.fail(f"{path.name}: `envkit {' '.join(argv)}`: {exc.format_message()}")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_nothing_to_do_is_not_a_failed_job(path):
    for line in scripts(yaml.safe_load(path.read_text())):
        if line.startswith("envkit nightly"):
            assert line.rstrip().endswith("|| test $? -eq 10"), line
