"""The `envkit explain` examples of README.md and docs/resolver.md are what envkit prints for them (explain reads only
the catalog)."""

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from envkit.cli import main

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^\$ (envkit explain [^\n]+)\n(.*?)^```", re.S | re.M)
DOCS = ("README.md", "docs/resolver.md")
EXAMPLES = [found for doc in DOCS for found in BLOCK.findall((ROOT / doc).read_text())]


def test_the_readme_has_its_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("command, shown", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_a_readme_example_prints_what_the_readme_shows(command, shown, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(main, shlex.split(command)[1:])
    assert result.stdout + result.stderr == shown, f"{DOCS} stale: rerun the command and paste its output"
