"""`envkit keys generate` / `envkit keys show`: the files, the fingerprint, --json, and the refusals."""

from __future__ import annotations

import json
import stat

from click.testing import CliRunner

from envkit.cli import main
from tests import speccheck


def test_generate_then_show_with_and_without_json(tmp_path, monkeypatch):
    monkeypatch.delenv("ENVKIT_KEY_PASSWORD", raising=False)
    runner = CliRunner()
    made = runner.invoke(main, ["keys", "generate", "--out", str(tmp_path / "k"), "--json"])
    assert made.exit_code == 0, made.output
    doc = json.loads(made.stdout)
    assert doc["fingerprint"] == speccheck.spki_sha256((tmp_path / "k" / "envkit.pub").read_bytes())
    assert stat.S_IMODE((tmp_path / "k" / "envkit.key").stat().st_mode) == 0o600 and doc["encrypted"] is False
    assert "PRIVATE KEY" not in made.output
    shown = runner.invoke(main, ["keys", "show", str(tmp_path / "k" / "envkit.pub")])
    assert shown.exit_code == 0 and doc["fingerprint"] in shown.stdout and "public ECDSA P-256 key" in shown.stdout
    private = json.loads(runner.invoke(main, ["keys", "show", str(tmp_path / "k" / "envkit.key"), "--json"]).stdout)
    assert private == {"path": str(tmp_path / "k" / "envkit.key"), "kind": "private", "fingerprint": doc["fingerprint"],
                       "algorithm": "ECDSA P-256"}
    again = runner.invoke(main, ["keys", "generate", "--out", str(tmp_path / "k"), "--json"])
    assert again.exit_code == 8 and json.loads(again.stdout)["error"] == "TrustError"
    missing = runner.invoke(main, ["keys", "show", str(tmp_path / "nope.pub"), "--json"])
    assert missing.exit_code == 8 and "cannot read the key" in json.loads(missing.stdout)["message"]


def test_a_bad_signing_key_fails_nightly_before_anything_runs(tmp_path):
    (tmp_path / "bad.key").write_text("not a key")
    (tmp_path / "team.yaml").write_text("version: 1\n")
    result = CliRunner().invoke(main, ["nightly", str(tmp_path / "team.yaml"), "--signing-key",
                                       str(tmp_path / "bad.key"), "--json"])
    assert result.exit_code == 8, result.output
    assert "is not a PEM private key" in json.loads(result.stdout)["message"]
