"""The host's verdict on each fleet job, and the promotion gate over the fleet (pure).

A job that reported is judged by the same ``certify.verdict.decide`` as local certification, asked for a GPU
exactly when its node had one (the job script ran the payload in certify mode there); a GPU that is not the
fleet model the job was sent to fails it (the target's constraint routed it wrong). A job that did not report
gets a failed certificate naming its fault and scheduler state. The gate promotes an image only when every fleet
model has a certificate at the level ``dispatch.require`` asks: ``certified`` (a GPU ran it), or ``verified`` (a
test fleet: the CPU checks passed on a node of every model, and the verdict says that no GPU ran).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..catalog.perf import model_key
from ..certify.certificate import Certificate, Dispatched, certificate_from
from ..payload.contents import SCHEMA
from .runner import Outcome

NO_ROUTE = "no dispatch target"
STDERR_KINDS = ("failed", "no report", "killed")  # faults whose cause the job's own stderr may name
_CC = re.compile(r"\d{1,2}\.\d")  # a fleet entry that is a compute capability, not a model name


def _dispatched(outcome: Outcome, scheduler: str, runtime: str) -> Dispatched:
    last = outcome.last
    state = last.state if last else None
    fault = outcome.fault
    return Dispatched(
        fleet_model=outcome.job.model, scheduler=scheduler, job_id=last.job_id if last else "",
        node=str(outcome.node.get("node") or (state.node if state else "")),
        state=(fault.state if fault else state.state if state else ""), fault=fault.kind if fault else "",
        attempts=len(outcome.attempts), queue_s=state.queue_s() if state else None,
        run_s=state.run_s() if state else None, gpu_seen=outcome.node.get("gpu") is True, runtime=runtime)


def _failed_document(message: str) -> dict:
    return {"schema": SCHEMA, "status": "failed", "facts": {},
            "checks": [{"name": "scheduler", "status": "failed", "message": message}]}


def fleet_certificate(outcome: Outcome, expect: dict, *, lock_hash: str, scheduler: str, runtime: str,
                      created_at: str, envkit_version: str) -> Certificate:
    """One (image, fleet model) job's certificate."""
    where = _dispatched(outcome, scheduler, runtime)
    job = outcome.job
    if outcome.report is None:
        fault = outcome.fault
        if outcome.cancelled and fault is None:
            message = "cancelled by envkit (the run was interrupted) before the payload reported"
        elif fault is not None:
            message = f"{fault.kind}: {fault.message}"
        else:
            message = "the job left no report"
        said = _tail(job.workdir / "payload.err") if fault is not None and fault.kind in STDERR_KINDS else ""
        doc = _failed_document(message + (f"; the job's stderr ended with: {said}" if said else ""))
    else:
        doc = outcome.report
    cert = certificate_from(doc, expect, image=job.image, image_id=job.image_id, lock_hash=lock_hash,
                            gpu_requested=where.gpu_seen, created_at=created_at, envkit_version=envkit_version)
    # a job that did not report: its fault is the reason (not each check the missing report could not show)
    reasons = list(cert.reasons) if outcome.report is not None else [doc["checks"][0]["message"]]
    if cert.gpu_count and not _CC.fullmatch(job.model) and model_key(job.model) not in model_key(cert.gpu_model):
        reasons.append(f"the job for {job.model} ran on {cert.gpu_model} (node {where.node or 'unknown'}): the "
                       f"target's constraint or gres does not select {job.model} nodes")
    status = "failed" if reasons else cert.status
    return cert.model_copy(update={"dispatch": where, "status": status, "reasons": tuple(reasons)})


def _tail(path: Path, limit: int = 300) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    return " ".join(text.splitlines()[-3:])[-limit:]


@dataclass(frozen=True)
class Gate:
    """Whether the image's promoted tag may move, and why not."""

    image: str
    promote: bool
    require: str
    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # true of a passing gate too (no GPU ran)
    models: dict[str, str] = field(default_factory=dict)  # fleet model -> its status (or "not dispatched")

    def to_json(self) -> dict:
        return {"image": self.image, "promote": self.promote, "require": self.require, "reasons": list(self.reasons),
                "notes": list(self.notes), "models": dict(self.models)}


def gate(image: str, fleet: list[str], certificates: list[Certificate], require: str) -> Gate:
    """The promotion gate for ``image`` over every model of ``fleet``."""
    wanted = ("certified",) if require == "certified" else ("certified", "verified")
    by_model = {c.dispatch.fleet_model: c for c in certificates if c.dispatch is not None}
    reasons, notes, models = [], [], {}
    for model in fleet:
        cert = by_model.get(model)
        if cert is None:
            models[model] = NO_ROUTE
            reasons.append(f"{model}: {NO_ROUTE} in dispatch.gpus, so nothing certified it")
            continue
        models[model] = cert.status
        node = cert.dispatch.node if cert.dispatch else ""
        if cert.status not in wanted:
            why = "; ".join(cert.reasons) if cert.status == "failed" else (
                f"verified only: no GPU ran on node {node or '?'} (dispatch.require is certified)")
            reasons.append(f"{model}: {why}")
        elif cert.status == "verified":
            notes.append(f"{model}: verified on node {node or '?'} without a GPU (CPU checks only; no GPU ran), "
                         "accepted by dispatch.require: verified")
    return Gate(image, not reasons, require, tuple(reasons), tuple(notes), models)
