"""The small things a new user tripped over (issue 22), each pinned: an unknown GPU's did-you-mean and full list,
a hint's commands without the literal SPEC placeholder, a CPU-only certificate named as such (file and HTML), and
`gpus: H100` (not a list) answered about gpus."""

import json

import click
from click.testing import CliRunner

from envkit.app.certify import certificate_file
from envkit.certify.report import report_html
from envkit.cli import main
from envkit.cli.flags import filled
from tests.unit.certify.test_certificate import build, cpu_doc


def test_an_unknown_gpu_in_the_fleet_gets_did_you_mean_and_every_known_model(write_spec):
    spec = write_spec("""
        version: 1
        team: vision
        fleet: {min_driver: "550.54.15", gpus: [A100, H1000]}
        images: [{name: torch25, framework: "torch==2.5.*"}]
        """)
    result = CliRunner().invoke(main, ["explain", str(spec), "torch25", "--json"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 2 and doc["message"] == "unknown GPU 'H1000' in fleet.gpus"
    assert doc["hint"].startswith("did you mean 'H100'") and "A100, A10G" in doc["hint"] and ", V100)" in doc["hint"]
    assert doc["location"].endswith(":3:47")


def test_gpus_given_as_one_value_is_answered_about_gpus(write_spec):
    spec = write_spec("""
        version: 1
        team: vision
        fleet:
          min_driver: "550.54.15"
          gpus: H100
        images: [{name: torch25, framework: "torch==2.5.*"}]
        """)
    result = CliRunner().invoke(main, ["resolve", str(spec), "--json"])
    doc = json.loads(result.stdout)
    assert doc["hint"] == 'give a list, e.g. gpus: ["H100"]' and "pip" not in doc["hint"]


def test_hints_name_the_spec_never_the_placeholder(monkeypatch, tmp_path):
    with click.Context(main) as ctx:
        ctx.params = {"spec": "teams/vision.yaml"}
        assert filled("build it with `envkit build SPEC`") == "build it with `envkit build teams/vision.yaml`"
    with click.Context(main) as ctx:  # a command without a spec: the conventional file name
        assert filled("re-resolve (`envkit resolve SPEC`), then `envkit build SPEC --image x`") == \
            "re-resolve (`envkit resolve team.yaml`), then `envkit build team.yaml --image x`"
        assert filled("a SPEC outside a command stays") == "a SPEC outside a command stays"
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: type("E", (), {"inspect": lambda s, r: None})())
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["show", "vision/nosuch:1"])
    assert result.exit_code == 6 and "`envkit build team.yaml`" in result.stderr and "SPEC" not in result.stderr


def test_a_cpu_only_certificate_is_named_so_in_its_file_and_its_html():
    assert certificate_file("none") == "certificate-cpu-only.json"
    assert certificate_file("NVIDIA H200") == "certificate-nvidia-h200.json"
    html = report_html([build(cpu_doc(), gpu_requested=False)], generated_at="2026-12-06T00:00:00Z").decode()
    assert "without a GPU (CPU only)" in html and "no GPU (CPU only)" in html
    assert "on none" not in html and ">none<" not in html and "none (no GPU)" in html


def test_doctor_reads_the_team_yaml_here_and_fits_100_columns(monkeypatch, tmp_path):
    from envkit.ops.findings import Finding

    asked = {}

    def diagnose(connect, store_url, *, spec_path=None, offline=False):
        asked["spec"] = spec_path
        return [Finding("index", "fail", "https://pypi.corp.example/simple: " + "a very long reason " * 12,
                        "check the proxy (" + "and then more words " * 10 + ")"),
                Finding("catalog", "ok", "/x/" + "y" * 150)]

    monkeypatch.setattr("envkit.ops.doctor.diagnose", diagnose)
    monkeypatch.chdir(tmp_path)
    CliRunner().invoke(main, ["doctor"])
    assert asked["spec"] is None  # no team.yaml here: none
    (tmp_path / "team.yaml").write_text("version: 1\n")
    result = CliRunner().invoke(main, ["doctor"])
    assert str(asked["spec"]) == "team.yaml" and result.exit_code == 3
    lines = result.stdout.splitlines()
    assert lines[0] == "spec: team.yaml (found in this directory; --spec names another)"
    assert max(len(line) for line in lines) <= 100 and any("hint: check the proxy" in line for line in lines)
    assert json.loads(CliRunner().invoke(main, ["doctor", "--json"]).stdout)["spec"] == "team.yaml"
