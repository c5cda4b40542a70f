"""The host's verdict on fleet jobs (the same ``decide`` as local certification) and the promotion gate."""

from __future__ import annotations

from dataclasses import replace

from envkit.certify.report import dispatched, report_junit, suite_name
from envkit.dispatch.runner import Attempt, Outcome
from envkit.dispatch.states import JobState, classify
from envkit.dispatch.verdict import fleet_certificate, gate
from tests.unit.certify.test_certificate import EXPECT, H200, WHEN, cpu_doc, gpu_doc

H100 = {**H200, "name": "NVIDIA H100 80GB HBM3"}


def outcome(job, report=None, state="COMPLETED", gpu=False, node="h100", exit_code="0:0"):
    st = JobState("9", state, node=node, exit_code=exit_code)
    attempt = Attempt("9", st, classify(st, reported=report is not None))
    return Outcome(job, [attempt], report, {"node": node, "gpu": gpu})


def cert(o):
    return fleet_certificate(o, EXPECT, lock_hash="sha256:" + "d" * 64, scheduler="slurm", runtime="docker",
                             created_at=WHEN, envkit_version="0.1.0")


def test_a_cpu_node_posing_as_an_h100_gives_a_verified_certificate_keyed_apart_from_any_gpu(make_job):
    c = cert(outcome(make_job("H100"), cpu_doc()))
    assert (c.status, c.gpu_model, c.record_model) == ("verified", "none", "none (H100 node)")
    assert c.dispatch.fleet_model == "H100" and not c.dispatch.gpu_seen and c.dispatch.node == "h100"
    assert "no GPU ran" in dispatched(c) and suite_name(c).endswith("[H100: no GPU, node h100]")


def test_a_gpu_node_certifies_under_the_gpus_own_name(make_job):
    c = cert(outcome(make_job("H100"), gpu_doc(gpus=(H100,)), gpu=True))
    assert (c.status, c.record_model) == ("certified", "NVIDIA H100 80GB HBM3")


def test_a_gpu_that_is_not_the_targets_model_fails_the_job(make_job):
    c = cert(outcome(make_job("A100"), gpu_doc(gpus=(H100,)), gpu=True, node="gpu7"))
    assert c.status == "failed"
    assert any("the job for A100 ran on NVIDIA H100 80GB HBM3 (node gpu7)" in r for r in c.reasons)


def test_a_node_that_has_a_gpu_the_container_does_not_see_fails(make_job):
    c = cert(outcome(make_job("H100"), cpu_doc(), gpu=True))
    assert c.status == "failed"


def test_a_job_without_a_report_fails_with_its_fault_and_state_alone(make_job):
    c = cert(outcome(make_job("H100"), None, state="OUT_OF_MEMORY"))
    assert c.status == "failed" and len(c.reasons) == 1
    assert c.reasons[0].startswith("out of memory: ") and "OUT_OF_MEMORY" in c.reasons[0]
    assert (c.dispatch.state, c.dispatch.fault) == ("OUT_OF_MEMORY", "out of memory")
    assert 'type="certificate-failed"' in report_junit([c]).decode()


def test_the_gate_promotes_only_when_every_fleet_model_passed_at_the_required_level(make_job):
    fleet = ["A100", "H100", "L40S"]
    verified = [cert(outcome(make_job(m), cpu_doc(), node=m.lower())) for m in fleet]
    test_fleet = gate("img", fleet, verified, "verified")
    assert test_fleet.promote and len(test_fleet.notes) == 3 and all("no GPU ran" in n for n in test_fleet.notes)
    real_fleet = gate("img", fleet, verified, "certified")
    assert not real_fleet.promote
    assert real_fleet.reasons[0] == "A100: verified only: no GPU ran on node a100 (dispatch.require is certified)"
    one_failed = gate("img", fleet, [*verified[:2], cert(outcome(make_job("L40S"), None, state="NODE_FAIL"))],
                      "verified")
    assert not one_failed.promote and one_failed.reasons[0].startswith("L40S: node failure")
    assert one_failed.models == {"A100": "verified", "H100": "verified", "L40S": "failed"}


def test_a_fleet_model_without_a_target_keeps_the_gate_closed(make_job):
    g = gate("img", ["A100", "H100"], [cert(outcome(make_job("A100"), cpu_doc(), node="a100"))], "verified")
    assert not g.promote and g.models["H100"] == "no dispatch target"


def test_a_cancelled_run_names_it(make_job):
    o = replace(outcome(make_job("H100"), None, state="RUNNING"), cancelled=True)
    o.attempts[-1].fault = None
    assert "cancelled by envkit" in cert(o).reasons[0]
