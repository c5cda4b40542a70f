"""What Slurm says of a job (``scontrol --oneliner show job``, as Slurm 22.05 prints it) and the faults named
from it."""

from __future__ import annotations

import pytest

from envkit.dispatch.states import JobState, classify, killed_by, parse_scontrol

LINE = ("JobId=5 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 "
        "Account=(null) QOS=(null) JobState={state} Reason={reason} Dependency=(null) Requeue=1 Restarts={restarts} "
        "BatchFlag=1 Reboot=0 ExitCode={exit} RunTime=00:00:14 TimeLimit=00:20:00 TimeMin=N/A "
        "SubmitTime=2026-12-06T02:49:48 EligibleTime=2026-12-06T02:49:48 AccrueTime=2026-12-06T02:49:48 "
        "StartTime={start} EndTime={end} Deadline=N/A Partition=gpu NodeList={node} BatchHost={node} "
        "NumNodes=1 Features=h100 TresPerNode=gres:gpu:h100:1")


def line(state="COMPLETED", reason="None", restarts=0, exit="0:0", start="2026-12-06T02:49:51",
         end="2026-12-06T02:50:05", node="h100"):
    return LINE.format(state=state, reason=reason, restarts=restarts, exit=exit, start=start, end=end, node=node)


def test_a_finished_job_has_its_node_state_and_queue_and_run_times_apart():
    (job,) = parse_scontrol(line() + "\n\n").values()
    assert (job.job_id, job.state, job.node, job.exit_code) == ("5", "COMPLETED", "h100", "0:0")
    assert job.finished and job.queue_s() == 3.0 and job.run_s() == 14.0


def test_a_pending_job_has_no_start_yet_and_says_why_it_waits():
    (job,) = parse_scontrol(line("PENDING", "Resources", start="2026-12-06T03:10:00", end="Unknown",
                                 node="(null)")).values()
    assert job.pending and job.started is None and job.ended is None and job.reason == "Resources"
    assert "reason Resources" in job.describe() and " on " not in job.describe()


def test_a_requeued_job_says_how_often():
    (job,) = parse_scontrol(line("RUNNING", restarts=2, end="Unknown")).values()
    assert job.running and job.restarts == 2 and "requeued 2x by Slurm" in job.describe()


@pytest.mark.parametrize("state, kind, retry", [
    ("NODE_FAIL", "node failure", True), ("BOOT_FAIL", "node failure", True), ("PREEMPTED", "preempted", True),
    ("TIMEOUT", "time limit", False), ("DEADLINE", "time limit", False),
    ("OUT_OF_MEMORY", "out of memory", False), ("CANCELLED", "cancelled", False), ("FAILED", "failed", False),
    ("COMPLETED", "no report", False), ("WEIRD_NEW_STATE", "failed", False)])
def test_each_state_that_left_no_report_is_a_named_fault(state, kind, retry):
    fault = classify(JobState("7", state, node="a100"), reported=False)
    assert (fault.kind, fault.state, fault.retry) == (kind, state, retry)
    assert f"job 7 {state} on a100" in fault.message


def test_a_job_that_reported_is_judged_by_its_report_whatever_its_exit():
    assert classify(JobState("7", "FAILED", exit_code="1:0"), reported=True) is None


def test_a_killed_job_is_named_as_killed():
    assert classify(JobState("7", "FAILED", exit_code="137:0"), reported=False).kind == "killed"
    assert classify(JobState("7", "FAILED", exit_code="0:9"), reported=False).kind == "killed"
    assert (killed_by("143:0"), killed_by("0:15"), killed_by("1:0"), killed_by("")) == (15, 15, None, None)
