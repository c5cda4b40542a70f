"""The runner's loop against a scripted scheduler (the real Slurm runs in tests/integration/test_fleet.py): the
bound on jobs in flight, retries of node failures, the pending limit, cancellation on the way out, re-attaching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envkit.dispatch.jobs import REPORT
from envkit.dispatch.runner import _save, clear, run_jobs, saved_job
from envkit.dispatch.states import JobState
from envkit.payload.contents import SCHEMA


class Scripted:
    """A scheduler whose jobs go through the states given per model, one per poll; a job's last state sticks.
    ``report``: the models whose finished jobs leave a payload report."""

    scheduler = "slurm"

    def __init__(self, plans: dict[str, list[list[str]]], report: set[str] = frozenset(), known=None):
        self.plans = {m: list(p) for m, p in plans.items()}  # per model, one plan per submission
        self.report = report
        self.jobs: dict[str, tuple[str, list[str], Path]] = dict(known or {})
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.in_flight_max = 0

    def submit(self, job) -> str:
        job_id = str(100 + len(self.jobs))
        self.jobs[job_id] = (job.model, list(self.plans[job.model].pop(0)), job.workdir)
        self.submitted.append(job_id)
        return job_id

    def states(self, job_ids) -> dict[str, JobState]:
        ids = [i for i in job_ids if i in self.jobs]
        live = [i for i in self.jobs if i not in self.cancelled and self.jobs[i][1][0] in ("PENDING", "RUNNING")]
        self.in_flight_max = max(self.in_flight_max, len(live))
        out = {}
        for job_id in ids:
            model, plan, workdir = self.jobs[job_id]
            state = "CANCELLED" if job_id in self.cancelled else plan[0]
            if len(plan) > 1:
                plan.pop(0)
            if state == "COMPLETED" and model in self.report:
                (workdir / REPORT).write_text(json.dumps({"schema": SCHEMA, "status": "verified", "checks": []}))
            out[job_id] = JobState(job_id, state, node=model.lower())
        return out

    def collect(self, job, job_id) -> None:
        pass

    def cancel(self, job_ids) -> None:
        self.cancelled += list(job_ids)


def run(jobs, scheduler, **kw):
    kw = {"max_parallel": 8, "pending_limit": 3600, "retries": 1, "poll_s": 0,
          "sleep": lambda _: None, **kw}
    return run_jobs(jobs, scheduler, **kw)


def test_every_job_runs_to_its_report_and_no_more_are_in_flight_than_the_bound(make_job):
    jobs = [make_job(m) for m in ("A100", "H100", "L40S")]
    plan = [["PENDING", "RUNNING", "COMPLETED"]]
    sched = Scripted({"A100": plan, "H100": plan, "L40S": plan}, report={"A100", "H100", "L40S"})
    outcomes = run(jobs, sched, max_parallel=2)
    assert [o.report["status"] for o in outcomes] == ["verified"] * 3
    assert sched.in_flight_max <= 2 and len(sched.submitted) == 3 and not sched.cancelled


def test_a_node_failure_is_retried_and_a_time_limit_is_not(make_job):
    sched = Scripted({"A100": [["RUNNING", "NODE_FAIL"], ["RUNNING", "COMPLETED"]], "H100": [["RUNNING", "TIMEOUT"]]},
                     report={"A100"})
    a100, h100 = run([make_job("A100"), make_job("H100")], sched)
    assert a100.report is not None and len(a100.attempts) == 2
    assert a100.history() and a100.history()[0].startswith("attempt 1: node failure")
    assert h100.report is None and len(h100.attempts) == 1 and h100.fault.kind == "time limit"


def test_retries_stop_at_the_limit(make_job):
    sched = Scripted({"A100": [["PREEMPTED"]] * 3})
    (a100,) = run([make_job("A100")], sched, retries=1)
    assert len(a100.attempts) == 2 and a100.fault.kind == "preempted"


def test_a_job_pending_past_the_limit_is_cancelled_and_named(make_job):
    ticks = iter(range(0, 1000, 10))
    sched = Scripted({"A100": [["PENDING"]]})
    (a100,) = run([make_job("A100")], sched, pending_limit=15, clock=lambda: next(ticks))
    assert sched.cancelled == sched.submitted and a100.cancelled
    assert (a100.fault.kind, a100.fault.state, a100.fault.retry) == ("pending limit", "PENDING", False)


def test_an_interruption_cancels_every_submitted_job(make_job):
    sched = Scripted({"A100": [["RUNNING"]], "H100": [["PENDING"]]})

    def interrupted(_):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run([make_job("A100"), make_job("H100")], sched, sleep=interrupted)
    assert sorted(sched.cancelled) == sorted(sched.submitted) and len(sched.submitted) == 2


def test_a_second_run_reattaches_to_a_job_an_earlier_run_left_running(make_job):
    job = make_job("A100")
    clear(job)
    _save(job, "42", finished=False, scheduler="slurm")  # what a run killed by SIGKILL leaves
    sched = Scripted({}, report={"A100"}, known={"42": ("A100", ["RUNNING", "COMPLETED"], job.workdir)})
    (outcome,) = run([job], sched)
    assert sched.submitted == [] and outcome.attempts[0].reattached and outcome.attempts[0].job_id == "42"
    assert outcome.report is not None and saved_job(job) is None  # finished: the next run submits afresh


def test_an_unfinished_job_the_scheduler_no_longer_knows_is_submitted_again(make_job):
    job = make_job("A100")
    clear(job)
    _save(job, "42", finished=False, scheduler="slurm")
    sched = Scripted({"A100": [["COMPLETED"]]}, report={"A100"})
    (outcome,) = run([job], sched)
    assert len(sched.submitted) == 1 and not outcome.attempts[0].reattached


def test_a_job_the_scheduler_forgot_without_a_report_is_lost_and_retried(make_job):
    class Forgetful(Scripted):
        def states(self, job_ids):
            return {}

    sched = Forgetful({"A100": [["RUNNING"], ["RUNNING"]]})
    (a100,) = run([make_job("A100")], sched, retries=1)
    assert len(sched.submitted) == 2 and a100.fault.kind == "lost"
