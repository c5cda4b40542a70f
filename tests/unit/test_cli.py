"""The CLI's contract for bad input: clear message, non-zero exit, nothing written."""

import json

from click.testing import CliRunner

from envkit.cli import main
from tests.conftest import MINIMAL


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_misspelt_key_fails_before_anything_is_written(write_spec, tmp_path):
    spec = write_spec(MINIMAL.replace("min_driver", "min_drivr"))
    result = invoke("render", spec, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert f"{spec}:4:3" in result.output
    assert "min_drivr" in result.output
    assert not (tmp_path / "out").exists()
    assert not spec.with_suffix(".lock").exists()


def test_unknown_gpu_fails_with_line_in_json(write_spec):
    spec = write_spec(MINIMAL.replace("H100]", "Z9000]"))
    result = invoke("resolve", spec, "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"] == "SpecError"
    assert doc["location"] == f"{spec}:5:16"
    assert "Z9000" in doc["message"]
    assert not spec.with_suffix(".lock").exists()


def test_malformed_version(write_spec):
    spec = write_spec(MINIMAL + '    python: "three"\n')
    result = invoke("build", spec, "--json")
    assert result.exit_code == 2
    assert "'three' is not a valid Python version" in result.output


def test_missing_spec_file(tmp_path):
    result = invoke("resolve", tmp_path / "nope.yaml")
    assert result.exit_code == 2
    assert "cannot read" in result.output


def test_schema_command_prints_json_schema():
    result = invoke("schema")
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["additionalProperties"] is False
    assert "images" in schema["properties"]
