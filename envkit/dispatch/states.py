"""What the scheduler says of a job, and what envkit makes of it (pure).

``parse_scontrol`` reads ``scontrol show job --oneliner`` (one line per job, ``Key=Value`` words): it answers for
pending, running and finished jobs alike (finished ones for ``MinJobAge`` seconds, 300 by default), and needs no
accounting database, which ``sacct`` does. ``classify`` names a finished job's fault by its Slurm state: each is
reported with that state, retried only where a new attempt can change it (the node failed or was taken back),
and never counted as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD",
                     "SUSPENDED", "STOPPED"})
RUNNING = frozenset({"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"})
# A finished job's state -> (fault kind, whether a new attempt may pass, what it means)
FAULTS: dict[str, tuple[str, bool, str]] = {
    "NODE_FAIL": ("node failure", True, "the node failed while the job ran"),
    "BOOT_FAIL": ("node failure", True, "the node failed to boot for the job"),
    "PREEMPTED": ("preempted", True, "the job was preempted by a higher-priority job"),
    "TIMEOUT": ("time limit", False, "the job ran past its time limit and was killed"),
    "DEADLINE": ("time limit", False, "the job reached its deadline"),
    "OUT_OF_MEMORY": ("out of memory", False, "the job was killed for using more memory than it was given"),
    "CANCELLED": ("cancelled", False, "the job was cancelled (scancel, or an administrator) before it reported"),
    "FAILED": ("failed", False, "the job script failed before the payload reported"),
    "COMPLETED": ("no report", False, "the job completed but the payload wrote no report"),
    "SPECIAL_EXIT": ("failed", False, "the job ended in a special exit state"),
    "REVOKED": ("cancelled", False, "the job was revoked (federation)"),
}


@dataclass(frozen=True)
class JobState:
    job_id: str
    state: str  # Slurm's JobState: PENDING, RUNNING, COMPLETED, NODE_FAIL, ...
    reason: str = ""  # why it waits or ended (Reason=)
    node: str = ""  # NodeList= (the batch host)
    exit_code: str = ""  # ExitCode=: "<code>:<signal>"
    restarts: int = 0  # times Slurm requeued it (node failure, preemption)
    submitted: datetime | None = None
    started: datetime | None = None
    ended: datetime | None = None

    @property
    def pending(self) -> bool:
        return self.state in PENDING

    @property
    def running(self) -> bool:
        return self.state in RUNNING

    @property
    def finished(self) -> bool:
        return not (self.pending or self.running)

    def queue_s(self, now: datetime | None = None) -> float | None:
        """Seconds from submission to start (to ``now`` while it waits)."""
        end = self.started or (now if self.pending else None)
        return _seconds(self.submitted, end)

    def run_s(self, now: datetime | None = None) -> float | None:
        """Seconds from start to end (to ``now`` while it runs)."""
        return _seconds(self.started, self.ended or (now if self.running else None))

    def describe(self) -> str:
        where = f" on {self.node}" if self.node and self.node != "(null)" else ""
        why = f", reason {self.reason}" if self.reason and self.reason != "None" else ""
        code = f", exit {self.exit_code}" if self.exit_code and self.exit_code != "0:0" else ""
        again = f", requeued {self.restarts}x by Slurm" if self.restarts else ""
        return f"job {self.job_id} {self.state}{where}{why}{code}{again}"


@dataclass(frozen=True)
class Fault:
    kind: str  # "pending limit", "time limit", "node failure", "out of memory", "preempted", "cancelled", ...
    state: str  # the scheduler's state it was read from
    retry: bool
    message: str


def _seconds(a: datetime | None, b: datetime | None) -> float | None:
    return None if a is None or b is None else max((b - a).total_seconds(), 0.0)


def _when(value: str) -> datetime | None:
    if not value or value in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def parse_scontrol(text: str) -> dict[str, JobState]:
    """``scontrol show job --oneliner`` output -> job id -> state (lines that are not jobs are skipped). A value
    is one word; the few free-text fields that may hold spaces (Comment=, Command=) are not read."""
    jobs: dict[str, JobState] = {}
    for line in text.splitlines():
        fields = dict(word.partition("=")[::2] for word in line.split() if "=" in word)
        job_id = fields.get("JobId")
        if not job_id:
            continue
        restarts = fields.get("Restarts", "0")
        jobs[job_id] = JobState(
            job_id=job_id, state=fields.get("JobState", "UNKNOWN"), reason=fields.get("Reason", ""),
            node=fields.get("BatchHost") or fields.get("NodeList", ""), exit_code=fields.get("ExitCode", ""),
            restarts=int(restarts) if restarts.isdigit() else 0, submitted=_when(fields.get("SubmitTime", "")),
            started=_when(fields.get("StartTime", "")) if fields.get("JobState") not in PENDING else None,
            ended=_when(fields.get("EndTime", "")) if fields.get("JobState") not in PENDING | RUNNING else None)
    return jobs


def classify(state: JobState, *, reported: bool) -> Fault | None:
    """The fault of a finished job, or None when its payload reported (then the report is judged, whatever the
    job's exit: the payload exits non-zero when a check failed)."""
    if reported:
        return None
    kind, retry, meaning = FAULTS.get(state.state, ("failed", False, f"the job ended in state {state.state}"))
    signal = killed_by(state.exit_code)
    if state.state == "FAILED" and signal:
        kind, meaning = "killed", f"the job (or the container it ran) was killed by signal {signal} before the " \
                                  "payload reported"
    return Fault(kind, state.state, retry, f"{meaning} ({state.describe()})")


def killed_by(exit_code: str) -> int | None:
    """The signal in Slurm's ``ExitCode=code:signal`` (or a shell's 128+N exit code), else None."""
    code, _, sig = exit_code.partition(":")
    if sig.isdigit() and int(sig):
        return int(sig)
    if code.isdigit() and 128 < int(code) < 160:
        return int(code) - 128
    return None


def pending_fault(state: JobState, limit: int) -> Fault:
    return Fault("pending limit", state.state, False,
                 f"the job waited in the queue past dispatch.pending_limit ({limit} s) and was cancelled "
                 f"({state.describe()}); is the partition busy, or does no node match its constraint and gres?")


def lost_fault(job_id: str) -> Fault:
    return Fault("lost", "UNKNOWN", True, f"job {job_id} is gone from the scheduler (scontrol no longer knows it) "
                                          "and left no report")
