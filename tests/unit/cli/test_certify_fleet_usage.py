"""`envkit certify`: IMAGE or --fleet SPEC, and the options that belong to each (usage errors, exit 2, before any work)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from envkit.cli import main


@pytest.mark.parametrize("args, words", [
    ([], "give IMAGE, or --fleet SPEC"),
    (["img:1", "--fleet", "team.yaml"], "give IMAGE, or --fleet SPEC"),
    (["img:1", "--registry", "localhost:5000"], "--registry and --signing-key go with --fleet"),
    (["--fleet", "team.yaml", "--gpus"], "--lock and --gpus are for one IMAGE"),
])
def test_certify_takes_an_image_or_a_fleet_spec(args, words):
    result = CliRunner().invoke(main, ["certify", *args])
    assert result.exit_code == 2 and words in result.output
