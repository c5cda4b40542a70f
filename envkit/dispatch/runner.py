"""Run fleet jobs through a scheduler: submitted concurrently up to a bound, watched until each finished, each
finished one's report collected from the shared directory, faults named by their scheduler state and retried
where a new attempt may pass (``states.classify``); a job pending past the limit is cancelled and named.

Whatever ends the run early (Ctrl-C and SIGTERM, as ``errors.Interrupted``; the scheduler no longer answering)
cancels every job still submitted. Each job's id is kept in its directory (``job.json``) until it finished, so a
run started again re-attaches to a job still queued or running instead of submitting it twice.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from ..errors import EnvkitError
from ..payload.harness import encodable, read_report
from ..spec_dispatch import KubernetesTarget
from ..support.atomic import write_atomic
from ..support.progress import Progress
from .jobs import NODE, REPORT, STATE, FleetJob
from .states import Fault, JobState, classify, lost_fault, pending_fault


class Scheduler(Protocol):
    """A scheduler as the runner uses it (``slurm.SlurmCli``, ``kube_api.KubeJobs``): ``submit`` one job (its
    directory is cleared first), read ``states`` of many in one call, ``collect`` a finished job's report and node
    into its directory (where they are not there already), ``cancel``."""

    scheduler: str

    def submit(self, job: FleetJob) -> str: ...
    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]: ...
    def collect(self, job: FleetJob, job_id: str) -> None: ...
    def cancel(self, job_ids: Iterable[str]) -> None: ...


class Routed:
    """One scheduler for a fleet whose models live on several: Slurm's jobs to ``slurm``, Kubernetes' to ``kube``
    (their ids never collide: Kubernetes' are ``namespace/name``)."""

    scheduler = "routed"

    def __init__(self, slurm: Scheduler | None, kube: Scheduler | None):
        self.slurm, self.kube = slurm, kube

    def _for_id(self, job_id: str) -> Scheduler | None:
        return self.kube if "/" in job_id else self.slurm

    def _for_job(self, job: FleetJob) -> Scheduler:
        chosen = self.kube if isinstance(job.target, KubernetesTarget) else self.slurm
        assert chosen is not None, f"no scheduler for {job.key}"
        return chosen

    def submit(self, job: FleetJob) -> str:
        return self._for_job(job).submit(job)

    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        out: dict[str, JobState] = {}
        ids = list(job_ids)
        for backend in (self.slurm, self.kube):
            mine = [i for i in ids if backend is not None and self._for_id(i) is backend]
            if backend is not None and mine:
                out.update(backend.states(mine))
        return out

    def collect(self, job: FleetJob, job_id: str) -> None:
        self._for_job(job).collect(job, job_id)

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = list(job_ids)
        for backend in (self.slurm, self.kube):
            mine = [i for i in ids if backend is not None and self._for_id(i) is backend]
            if backend is not None and mine:
                backend.cancel(mine)


@dataclass
class Attempt:
    job_id: str
    state: JobState | None = None  # the last the scheduler said
    fault: Fault | None = None
    reattached: bool = False


@dataclass
class Outcome:
    """What became of one (image, model) job: its attempts, and the payload's report or the fault."""

    job: FleetJob
    attempts: list[Attempt] = field(default_factory=list)
    report: dict | None = None  # the payload's document
    node: dict = field(default_factory=dict)  # what the job script said of its node (node.json)
    cancelled: bool = False  # cancelled by this run (interrupted, pending past the limit)

    @property
    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def fault(self) -> Fault | None:
        return self.last.fault if self.last else None

    def history(self) -> list[str]:
        """One line per attempt that did not pass (a retried node failure, say)."""
        return [f"attempt {i}: {a.fault.kind}: {a.fault.message}" for i, a in enumerate(self.attempts, 1) if a.fault]


@dataclass
class _Tracked:
    outcome: Outcome
    since: float  # this run's clock when it was submitted or re-attached
    said: str = ""


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def read_job_report(job: FleetJob) -> dict | None:
    """The payload's document the job left (None: none, or one the payload did not finish)."""
    try:
        text = (job.workdir / REPORT).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    doc = read_report(text)
    return encodable(doc) if doc is not None else None


def saved_job(job: FleetJob) -> str | None:
    """The id of ``job``'s unfinished submission an earlier run left, if any."""
    state = _read_json(job.workdir / STATE)
    job_id = state.get("job_id")
    return str(job_id) if job_id and not state.get("finished") else None


def _save(job: FleetJob, job_id: str, *, finished: bool, scheduler: str) -> None:
    doc = {"job_id": job_id, "finished": finished, "scheduler": scheduler, "key": job.key, "image": job.image,
           "image_id": job.image_id, "model": job.model}
    write_atomic(job.workdir / STATE, json.dumps(doc, sort_keys=True).encode() + b"\n")


def clear(job: FleetJob) -> None:
    """``job``'s directory, without what an earlier attempt left there."""
    job.workdir.mkdir(parents=True, exist_ok=True)
    for name in (REPORT, NODE):
        (job.workdir / name).unlink(missing_ok=True)


def run_jobs(jobs: list[FleetJob], scheduler: Scheduler, *, max_parallel: int, pending_limit: int, retries: int,
             poll_s: float = 2.0, progress: Progress = lambda _: None,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
             now: Callable[[], datetime] = datetime.now) -> list[Outcome]:
    """Run every job to its end; one ``Outcome`` per job, in ``jobs``' order."""
    outcomes = {job.key: Outcome(job) for job in jobs}
    active = _reattach(jobs, scheduler, outcomes, clock, progress)
    queue = deque(job for job in jobs if not outcomes[job.key].attempts)
    try:
        while queue or active:
            while queue and len(active) < max_parallel:
                job = queue.popleft()
                clear(job)
                job_id = scheduler.submit(job)
                _save(job, job_id, finished=False, scheduler=scheduler.scheduler)
                outcomes[job.key].attempts.append(Attempt(job_id))
                active[job_id] = _Tracked(outcomes[job.key], clock())
                progress(f"[{job.key}] submitted job {job_id}")
            sleep(poll_s)
            states = scheduler.states(list(active))
            for job_id, tracked in list(active.items()):
                if _step(job_id, tracked, states.get(job_id), scheduler, pending_limit, clock, now, progress):
                    del active[job_id]
                    _save(tracked.outcome.job, job_id, finished=True, scheduler=scheduler.scheduler)
                    if _retry(tracked.outcome, retries, progress):
                        queue.appendleft(tracked.outcome.job)
    finally:
        if active:  # interrupted, or the scheduler failed us: leave nothing queued behind
            _cancel_all(active, scheduler, progress)
    return [outcomes[job.key] for job in jobs]


def _reattach(jobs: list[FleetJob], scheduler: Scheduler, outcomes: dict[str, Outcome], clock: Callable[[], float],
              progress: Progress) -> dict[str, _Tracked]:
    """The jobs an earlier run submitted that the scheduler still knows, tracked again instead of submitted."""
    saved = {job.key: saved_job(job) for job in jobs}
    known = scheduler.states(i for i in saved.values() if i)
    active = {}
    for job in jobs:
        job_id = saved[job.key]
        if job_id and job_id in known:
            outcomes[job.key].attempts.append(Attempt(job_id, known[job_id], reattached=True))
            active[job_id] = _Tracked(outcomes[job.key], clock())
            progress(f"[{job.key}] re-attached to {known[job_id].describe()} (submitted by an earlier run)")
    return active


def _retry(outcome: Outcome, retries: int, progress: Progress) -> bool:
    """Whether a finished job is submitted again: its fault may pass on another attempt, and retries are left."""
    fault = outcome.fault
    tries = sum(1 for a in outcome.attempts if not a.reattached)
    if fault is None or not fault.retry or tries > retries:
        return False
    progress(f"[{outcome.job.key}] {fault.kind} ({fault.state}): submitting again (retry {tries} of {retries})")
    return True


def _cancel_all(active: dict[str, _Tracked], scheduler: Scheduler, progress: Progress) -> None:
    try:
        scheduler.cancel(list(active))
    except EnvkitError:
        pass
    for job_id, tracked in active.items():
        tracked.outcome.cancelled = True
        progress(f"[{tracked.outcome.job.key}] cancelled job {job_id}")
        _save(tracked.outcome.job, job_id, finished=True, scheduler=scheduler.scheduler)


def _collect(scheduler: Scheduler, job: FleetJob, job_id: str) -> None:
    try:
        scheduler.collect(job, job_id)
    except EnvkitError:
        pass  # nothing collected: the job is then judged as one that left no report


def _step(job_id: str, tracked: _Tracked, state: JobState | None, scheduler: Scheduler, pending_limit: int,
          clock: Callable[[], float], now: Callable[[], datetime], progress: Progress) -> bool:
    """Look at one job's new state; True when it is over (its outcome filled in)."""
    outcome = tracked.outcome
    attempt = outcome.attempts[-1]
    job = outcome.job
    if state is None:  # gone from the controller: finished long ago (MinJobAge), or lost
        _collect(scheduler, job, job_id)
        outcome.report = read_job_report(job)
        outcome.node = _read_json(job.workdir / NODE)
        attempt.fault = None if outcome.report is not None else lost_fault(job_id)
        return True
    attempt.state = state
    said = f"{state.state} {state.reason}" if state.pending else state.state
    if said != tracked.said:
        tracked.said = said
        if not state.finished:
            where = f" on {state.node}" if state.running and state.node else ""
            why = f" ({state.reason})" if state.pending and state.reason not in ("", "None") else ""
            progress(f"[{job.key}] job {job_id} {state.state}{where}{why}")
    if state.pending and clock() - tracked.since > pending_limit:
        scheduler.cancel([job_id])
        outcome.cancelled = True
        attempt.fault = pending_fault(state, pending_limit)
        progress(f"[{job.key}] {attempt.fault.message}")
        return True
    if not state.finished:
        return False
    _collect(scheduler, job, job_id)
    outcome.report = read_job_report(job)
    outcome.node = _read_json(job.workdir / NODE)
    attempt.fault = classify(state, reported=outcome.report is not None)
    progress(f"[{job.key}] {state.describe()}" + (f": {attempt.fault.kind}" if attempt.fault else ": reported"))
    return True
