"""docs/commands.md is what scripts/gen_commands.py makes of the CLI's own help: a command, option or help text
changed without `make docs` fails here."""

import importlib.util
from pathlib import Path

from envkit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def generator():
    spec = importlib.util.spec_from_file_location("gen_commands", ROOT / "scripts" / "gen_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_commands_md_is_generated_from_the_cli():
    fresh = generator().render(main)
    committed = (ROOT / "docs" / "commands.md").read_text()
    assert committed == fresh, "docs/commands.md is stale: run `make docs` and commit it"


def test_every_command_and_option_is_in_it():
    text = generator().render(main)
    assert text.startswith("<!-- generated — do not edit; regenerate with `make docs`")
    for name in ("## envkit keys generate", "## envkit certify", "## envkit registry prune", "`--trusted-keys"):
        assert name in text
    bundle_make = text.split("## envkit bundle make\n")[1].split("\n## ")[0]
    assert "`--bundle DIR`" in bundle_make and "`--out" not in bundle_make  # the old spelling is hidden
