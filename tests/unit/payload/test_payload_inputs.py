"""The payload's inputs and the host's reading of its output: the expect file it uses when given no
``--expect`` (the one beside its directory, as in an image), its checks on the expect file and on
``--timeout`` (bad ones are usage errors: exit 2, no document), and the harness finding the
document when an image prints something of its own on stdout.

Full runs go through a subprocess against the host's CPU torch, as in test_payload.py; the
parsing of a run's output is pure logic (a fake engine that returns what a run printed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from envkit.payload import contents, harness
from envkit.engine.protocol import RunResult
from envkit.errors import VerificationError
from envkit.frameworks import expect_from_labels, expected
from envkit.lock import load_lock
from tests.conftest import ROOT
from tests.unit.lockfixtures import make_image, make_jax_image, make_tf_image
from tests.unit.payload_modules import PAYLOAD_DIR, payload_module

core = payload_module("envkit_check_core")
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"}


def payload(directory: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(directory), *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout)


# ------------------------------------------------- the expect file beside the payload
@pytest.fixture(scope="module")
def image_like(tmp_path_factory) -> Path:
    """A copy laid out as in an image: <dir>/envkit_check/ with <dir>/expect.json beside it, which
    expects a torch the host does not have (so a comparison that runs fails, and says so)."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("opt-envkit")
    shutil.copytree(PAYLOAD_DIR, root / "envkit_check", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "expect.json").write_text(json.dumps({"torch": "1.0.0", "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}))
    return root / "envkit_check"


@pytest.fixture(scope="module")
def beside_runs(image_like, tmp_path_factory) -> Dict[str, subprocess.CompletedProcess]:
    """The runs the tests below read, started together (each spends seconds importing torch)."""
    other = tmp_path_factory.mktemp("other") / "other.json"
    other.write_text(json.dumps({"torch": "0.9.0"}))
    scenarios = {"json": (image_like, ["--json", "--mode", "verify"]), "table": (image_like, ["--mode", "verify"]),
                 "explicit": (image_like, ["--json", "--mode", "verify", "--expect", str(other)]),
                 "checkout": (PAYLOAD_DIR, ["--json", "--mode", "verify"])}
    procs = {name: subprocess.Popen([sys.executable, str(d), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, env=ENV) for name, (d, args) in scenarios.items()}
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def checks(proc: subprocess.CompletedProcess) -> Dict[str, Dict[str, Any]]:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_without_expect_the_file_beside_the_payload_is_compared(beside_runs, image_like):
    """The image's CMD (`python3 /opt/envkit/envkit_check`, no --expect) compares against
    /opt/envkit/expect.json: here a torch that is not installed fails, and Python passes."""
    run = beside_runs["json"]
    found = checks(run)
    assert found["torch_version"]["status"] == "failed" and found["torch_version"]["expected"] == "1.0.0"
    assert found["python_version"]["status"] == "passed"
    assert (json.loads(run.stdout)["status"], run.returncode) == ("failed", 1)
    assert f"envkit_check: expect: {image_like.parent / 'expect.json'} (beside the payload)" in run.stderr


def test_the_table_names_the_expect_file(beside_runs, image_like):
    lines = beside_runs["table"].stdout.splitlines()
    assert lines[2] == f"expect: {image_like.parent / 'expect.json'} (beside the payload)"
    assert any(line.split()[:2] == ["torch_version", "failed"] for line in lines)


def test_an_explicit_expect_wins_over_the_one_beside(beside_runs, tmp_path):
    run = beside_runs["explicit"]
    assert checks(run)["torch_version"]["expected"] == "0.9.0"
    assert checks(run)["python_version"]["status"] == "skipped"  # not the file beside: it has python
    assert "other.json" in run.stderr and "beside the payload" not in run.stderr


def test_without_any_expect_file_comparisons_are_skipped_and_it_says_so(beside_runs):
    """A checkout has no expect.json beside envkit/payload/envkit_check."""
    assert not (PAYLOAD_DIR.parent / "expect.json").exists()
    run = beside_runs["checkout"]
    assert checks(run)["torch_version"]["status"] == "skipped"
    assert "expect: none (no --expect, and no expect.json beside the payload)" in run.stderr


def test_a_bad_expect_file_beside_the_payload_is_bad_usage(tmp_path):
    shutil.copytree(PAYLOAD_DIR, tmp_path / "envkit_check", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "expect.json").write_text('{"arch_list": "sm_90"}')
    run = payload(tmp_path / "envkit_check", "--json")
    assert (run.returncode, run.stdout) == (2, "")
    assert f"--expect {tmp_path / 'expect.json'}: arch_list \"sm_90\"" in run.stderr


# ------------------------------------------------------------------ --timeout
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e300", "-1", "0"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_bad_usage(value):
    """inf used to disable the watchdog silently (an OverflowError traceback in its thread) and exit 0."""
    run = payload(PAYLOAD_DIR, "--json", f"--timeout={value}", timeout=60)
    assert (run.returncode, run.stdout) == (2, "")
    assert "--timeout must be a positive, finite number of seconds" in run.stderr
    assert "Traceback" not in run.stderr


# ---------------------------------------------------------------- the expect file
@pytest.mark.parametrize("expect, named", [
    ({"arch_list": "sm_90"}, 'arch_list "sm_90": must be a list of archs'),
    ({"arch_list": [1, 2]}, "arch_list [1, 2]: must be a list of archs"),
    ({"arch_list": ["sm_90", "sm90"]}, 'arch_list ["sm_90", "sm90"]: "sm90" not an arch'),
    ({"python": None}, 'python null: must be a version string such as "3.11" (leave python out'),
    ({"python": 3.11}, "python 3.11: must be a version string"),
    ({"torch": ""}, 'torch "": must be a version string'),
    ({"cudnn": 9}, 'cudnn 9: must be a version string such as "2.5.1", or null for none (a CPU-only build)'),
    ({"driver_floor": ["525"]}, 'driver_floor ["525"]: must be a version string such as "525.60.13", or null for no floor'),
    ({"framework": "mxnet"}, 'framework "mxnet": this payload checks torch, jax, tensorflow images'),
    ({"framework": None}, "framework null: this payload checks"),
    ({"perf_floors": [600]}, "perf_floors [600]: must be an object of floors"),
    ({"perf_floors": {"bf16_matmul_tflops": "600"}}, "'bf16_matmul_tflops' not a finite number"),
    ({"perf_floors": {"nccl_busbw_gbps": True}}, "'nccl_busbw_gbps' not a finite number"),
    ({"pyhton": "3.11"}, "'pyhton' is not a key the payload knows"),
])
def test_expect_values_are_checked_per_key(expect, named):
    assert any(named in p for p in core.expect_problems(expect)), core.expect_problems(expect)


def test_infinite_floors_are_refused():
    assert core.expect_problems({"perf_floors": {"x": float("inf")}}) == [
        "perf_floors {\"x\": Infinity}: 'x' not a finite number"]


def _expects() -> List[dict]:
    """Every expect document envkit writes or sends: the example locks' (render's expect.json), the
    fixtures', and the pin labels' as the harness passes them on."""
    docs = [expected(i) for name in ("team.lock", "frameworks.lock")
            for i in load_lock(ROOT / "examples" / name).images]
    docs += [expected(make_image()), expected(make_jax_image()), expected(make_tf_image()),
             expected(make_image(cuda=None, cuda_major_minor=None, cudnn=None, nccl=None, arch_list=(),
                                 driver_floor=None))]
    docs += [expected(make_image(requested=("numpy",))), expected(make_jax_image(requested=("numpy", "not-locked")))]
    docs += [contents.payload_expect(expect_from_labels(labels)) for labels in (
        {}, {"io.envkit.framework": "torch==2.5.1", "io.envkit.cuda": "none"},
        {"io.envkit.framework": "jax==0.12.0.1"}, {"io.envkit.framework": "tensorflow==2.20.0", "io.envkit.python": ""},
        {"io.envkit.framework": "torch==2.5.1", "io.envkit.requested": "numpy==2.1.3 tqdm"})]
    return docs


@pytest.mark.parametrize("expect", _expects())
def test_every_expect_envkit_makes_passes(expect):
    assert core.expect_problems(expect) == []


def test_the_harness_leaves_out_nulls_the_payload_would_refuse():
    """A pin label an image lacks gives null (python, torch); null cuda still means a CPU-only build."""
    sent = contents.payload_expect({"torch": None, "python": None, "cuda": None, "arch_list": None,
                                    "driver_floor": None})
    assert sent == {"cuda": None, "arch_list": None, "driver_floor": None}


@pytest.mark.parametrize("expect, named", [
    ({"arch_list": "sm_90"}, 'arch_list "sm_90"'),
    ({"python": None}, "python null"),
    ({"framework": "mxnet"}, 'framework "mxnet"'),
])
def test_a_bad_expect_file_is_bad_usage_naming_key_and_value(tmp_path, expect, named):
    path = tmp_path / "expect.json"
    path.write_text(json.dumps(expect))
    run = payload(PAYLOAD_DIR, "--json", "--expect", str(path), timeout=60)
    assert (run.returncode, run.stdout) == (2, "")
    assert f"--expect {path}: {named}" in run.stderr and "Traceback" not in run.stderr


# -------------------------------------------------- the harness reads the document
DOC = {"schema": "envkit.payload/1", "payload": {"version": "2", "sha256": "a" * 64}, "mode": "verify",
       "status": "verified", "facts": {"python": "3.11.2"},
       "checks": [{"name": "python_version", "status": "passed", "value": {"nested": {"schema": "no"}},
                   "expected": "3.11", "message": "ok", "seconds": 0.0}], "telemetry": [], "seconds": 1.0}
PRINTED = json.dumps(DOC, indent=2) + "\n"  # as the payload prints it


@pytest.mark.parametrize("stdout", [
    PRINTED,
    "Welcome to the lab image (sitecustomize)\n" + PRINTED,
    "banner one\n{not json}\n{\"schema\": \"other\"}\n" + PRINTED,
    "a banner without its newline" + PRINTED,
    PRINTED + "printed at exit\n",
    json.dumps(DOC) + "\n",
])
def test_the_document_is_found_among_foreign_lines(stdout):
    assert harness.read_report(stdout) == DOC


@pytest.mark.parametrize("stdout", ["", "banner\n", '{"schema": "envkit.payload/2", "checks": []}\n',
                                    PRINTED[:-40], '["envkit.payload/1"]\n'])
def test_no_document_is_none(stdout):
    assert harness.read_report(stdout) is None


class PrintingEngine:
    """Only the engine: returns what an image's run printed; the harness does the rest."""

    def __init__(self, stdout: str, stderr: str = "", exit_code: int = 0):
        self.result, self.expect = RunResult(exit_code=exit_code, stdout=stdout, stderr=stderr), None

    def run(self, ref, command, options):
        self.expect = json.loads((Path(options.mounts[0].source) / "expect.json").read_text())
        return self.result


def test_a_banner_printed_at_startup_does_not_hide_the_report():
    engine = PrintingEngine("*** lab image: remember to cite us ***\n" + PRINTED)
    result = harness.run_payload(engine, "lab/torch:1", {"python": "3.11", "torch": None})
    assert result.status == "verified" and result.raw == DOC
    assert engine.expect == {"python": "3.11"}  # the null the payload would refuse is left out


def test_when_nothing_parses_the_hint_shows_how_stdout_began_and_ended():
    stdout = "*** lab banner: the offending first line ***\n" + "\n".join(f"line {i}" for i in range(30)) + "\n{trunc"
    engine = PrintingEngine(stdout, stderr="Traceback ...\nKilled\n")
    with pytest.raises(VerificationError) as caught:
        harness.run_payload(engine, "lab/torch:1", {})
    error = caught.value
    assert "did not report (exit 0)" in error.message
    assert error.hint.startswith("its stdout began with:\n    *** lab banner: the offending first line ***")
    assert "and ended with:\n" in error.hint and "{trunc" in error.hint
    assert error.hint.endswith("its stderr ended with:\n    Traceback ...\n    Killed")


def test_a_short_output_is_shown_whole():
    with pytest.raises(VerificationError) as caught:
        harness.run_payload(PrintingEngine("banner\n", stderr="", exit_code=2), "lab/torch:1", {})
    assert caught.value.hint == "its stdout was:\n    banner\nits stderr ended with:\n    (nothing)"


def test_a_lone_surrogate_in_the_report_becomes_encodable_text():
    """JSON's \\udc80 escape decodes to a lone surrogate, which the HTML report and the store could not write."""
    doc = harness.encodable(json.loads('{"checks": [{"message": "bad byte \\udc80 here"}], "n": 1}'))
    assert doc == {"checks": [{"message": "bad byte ? here"}], "n": 1}
    json.dumps(doc, ensure_ascii=False).encode("utf-8")
