"""Certificates: the host's verdict on one image, on one GPU model, under one driver.

The in-image payload reports *facts* (versions, GPUs, driver) and *checks*. The host does
not take the payload's own ``status`` on trust: ``decide`` re-derives the outcome from those
facts and checks against the lock's expectations (which versions and how, GPU coverage by arch
list or by minimum compute capability: per framework, ``envkit/frameworks.py``; the framework is
the lock's, never the payload's word), and the result is recorded in a
``Certificate`` keyed by (image id, GPU model, driver).

Outcomes:

* ``certified``: GPUs were visible, the framework's required GPU checks (PyTorch:
  ``cuda_available``, ``arch_covered``, ``cuda_train_step``; JAX and TensorFlow: ``gpu_devices``,
  ``cc_covered``, ``gpu_train_step``) really passed, and nothing failed.
* ``verified``: no GPU was visible (and none was asked for); every static/CPU check held and
  every GPU-only check was skipped.
* ``failed``: anything else, with the reasons.

The packages the team asked for (the lock's ``requested``: the spec's ``pip:`` packages) are judged
per package from the ``requested_imports`` check's value, whatever its status says: each must be
reported, at the lock's version, and not ``failed``; a failure's reason names the package and its error.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError, field_validator

from .. import __version__
from ..errors import VerificationError
from ..payload.harness import run_payload
from ..support.labels import LOCK_LABEL
from ..support.models import Frozen
from .verdict import CheckStatus, Status, as_dict, as_number, decide

if TYPE_CHECKING:
    from ..engine.protocol import Engine

CERTIFICATE_VERSION: Literal[1] = 1
LABEL_PREFIX = "io.envkit.certified."
MAX_SAMPLES_PER_GPU = 500  # plotted samples kept per GPU; the maxima are over every sample
_SLUG = re.compile(r"[^a-z0-9]+")


class CheckRecord(Frozen):
    """One payload check, as reported."""

    name: str
    status: CheckStatus
    value: Any = None
    expected: Any = None
    message: str = ""
    seconds: float = 0.0


class TelemetrySummary(Frozen):
    """The peaks of one GPU's NVML samples (None where NVML gave no reading)."""

    gpu: int
    samples: int
    max_util_pct: float | None = None
    max_mem_used_mib: float | None = None
    max_power_w: float | None = None
    max_temp_c: float | None = None
    clock_event_reasons: tuple[str, ...] = ()  # every reason seen, sorted


class TelemetrySample(Frozen):
    t: float
    gpu: int
    util_pct: float | None = None
    mem_used_mib: float | None = None
    power_w: float | None = None
    temp_c: float | None = None
    clock_event_reasons: tuple[str, ...] | None = None


class Dispatched(Frozen):
    """Where a fleet certification ran (``envkit certify --fleet``): the fleet GPU model it was sent to, and what
    the scheduler said. ``gpu_seen`` false: the node showed no GPU, so the payload ran its CPU checks only and the
    certificate is at best ``verified``; its store key is then ``no_gpu_key(fleet_model)``, never a GPU's name."""

    fleet_model: str  # as fleet.gpus names it, e.g. "H100"
    scheduler: str  # slurm | kubernetes
    job_id: str = ""
    node: str = ""
    state: str = ""  # the scheduler's final state, e.g. COMPLETED, NODE_FAIL
    fault: str = ""  # the fault's kind when it did not report: "time limit", "node failure", ...
    attempts: int = 1
    queue_s: float | None = None
    run_s: float | None = None
    gpu_seen: bool = False
    runtime: str = ""  # docker | pyxis | apptainer


class Certificate(Frozen):
    version: Literal[1] = CERTIFICATE_VERSION
    image: str  # the reference that was run (tag)
    image_id: str  # the engine's image id (content digest)
    lock_hash: str
    gpu_model: str  # e.g. "NVIDIA H200"; "none" without a GPU
    driver: str  # e.g. "570.124.06"; "none" when unknown
    status: Status
    reasons: tuple[str, ...] = ()  # why it failed; empty otherwise
    mode: str = ""  # the payload's mode: verify | certify
    gpu_count: int = 0
    expect: dict[str, Any] = Field(default_factory=dict)  # what the lock said the image holds
    checks: tuple[CheckRecord, ...] = ()
    facts: dict[str, Any] = Field(default_factory=dict)
    telemetry_summary: tuple[TelemetrySummary, ...] = ()
    telemetry: tuple[TelemetrySample, ...] = ()  # for plots: thinned to MAX_SAMPLES_PER_GPU per GPU
    payload_version: str
    payload_sha256: str
    envkit_version: str
    created_at: str  # ISO-8601, UTC
    dispatch: Dispatched | None = None  # set by a fleet certification: where it ran

    @property
    def record_model(self) -> str:
        """The GPU model the store and the registry key this certificate by: the GPU's own name, or for a fleet job
        whose node showed no GPU, ``no_gpu_key`` of the fleet model it was sent to (never a GPU name)."""
        if self.dispatch is not None and not self.gpu_count:
            return no_gpu_key(self.dispatch.fleet_model)
        return self.gpu_model

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: str) -> str:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"created_at {value!r} is not an ISO-8601 timestamp") from None
        offset = when.utcoffset()
        if offset is None or offset.total_seconds() != 0:
            raise ValueError(f"created_at {value!r} must be in UTC (end in Z or +00:00)")
        return value

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.image_id, self.gpu_model, self.driver)

    def with_check(self, check: dict | None) -> Certificate:
        """This certificate with ``check`` (a check record's fields) among its checks, in place of one of the same
        name; its status is not changed (a host's check beside the payload's, e.g. ``nightly --reproducible``'s
        ``layers``, which passed or was skipped: one that failed fails the image before certification)."""
        if check is None:
            return self
        others = tuple(c for c in self.checks if c.name != check["name"])
        return self.model_copy(update={"checks": (*others, CheckRecord(**check))})

    def to_json(self) -> dict:
        return self.model_dump(mode="json")

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), indent=2, sort_keys=True).encode() + b"\n"


def no_gpu_key(fleet_model: str) -> str:
    """How a fleet job on a node that showed no GPU is keyed: 'none (H100 node)'; ``gate.judge`` and ``ls`` read
    it as no GPU, and no GPU model matches it."""
    return f"none ({fleet_model} node)"


def summarize_telemetry(samples: list[dict]) -> tuple[TelemetrySummary, ...]:
    per_gpu: dict[int, list[dict]] = {}
    for s in samples:
        if isinstance(s, dict) and isinstance(s.get("gpu"), int):
            per_gpu.setdefault(s["gpu"], []).append(s)
    out = []
    for gpu in sorted(per_gpu):
        rows = per_gpu[gpu]

        def peak(key: str) -> float | None:
            return max((v for v in (as_number(r.get(key)) for r in rows) if v is not None), default=None)

        seen = sorted({str(r) for s in rows for r in (s.get("clock_event_reasons") or [])})
        out.append(TelemetrySummary(gpu=gpu, samples=len(rows), max_util_pct=peak("util_pct"),
                                    max_mem_used_mib=peak("mem_used_mib"), max_power_w=peak("power_w"),
                                    max_temp_c=peak("temp_c"), clock_event_reasons=tuple(seen)))
    return tuple(out)


def _thin(samples: list[dict]) -> tuple[TelemetrySample, ...]:
    per_gpu: dict[int, list[dict]] = {}
    for s in samples:
        if isinstance(s, dict) and isinstance(s.get("gpu"), int) and as_number(s.get("t")) is not None:
            per_gpu.setdefault(s["gpu"], []).append(s)
    kept = []
    for gpu in sorted(per_gpu):
        rows = sorted(per_gpu[gpu], key=lambda r: r["t"])
        if len(rows) > MAX_SAMPLES_PER_GPU:
            step = len(rows) / MAX_SAMPLES_PER_GPU
            rows = [rows[int(i * step)] for i in range(MAX_SAMPLES_PER_GPU - 1)] + [rows[-1]]
        for r in rows:
            reasons = r.get("clock_event_reasons")
            kept.append(TelemetrySample(
                t=float(r["t"]), gpu=gpu, util_pct=as_number(r.get("util_pct")),
                mem_used_mib=as_number(r.get("mem_used_mib")), power_w=as_number(r.get("power_w")),
                temp_c=as_number(r.get("temp_c")),
                clock_event_reasons=tuple(map(str, reasons)) if isinstance(reasons, list) else None))
    return tuple(kept)


def _check_record(c: dict) -> CheckRecord:
    status: CheckStatus = c["status"] if c.get("status") in ("passed", "failed", "skipped") else "failed"
    return CheckRecord(name=str(c.get("name") or "(unnamed)"), status=status, value=c.get("value"),
                       expected=c.get("expected"), message=str(c.get("message") or ""),
                       seconds=as_number(c.get("seconds")) or 0.0)


def gpu_model_of(facts: dict) -> str:
    names = list(
        dict.fromkeys(str(g.get("name") or "unknown GPU") for g in facts.get("gpus") or [] if isinstance(g, dict))
    )
    return " + ".join(names) if names else "none"


def certificate_from(doc: dict, expect: dict, *, image: str, image_id: str, lock_hash: str, gpu_requested: bool,
                     created_at: str, envkit_version: str) -> Certificate:
    status, reasons = decide(doc, expect, gpu_requested=gpu_requested)
    facts = as_dict(doc.get("facts"))
    payload = as_dict(doc.get("payload"))
    samples = [s for s in doc.get("telemetry") or [] if isinstance(s, dict)] if isinstance(doc.get("telemetry"), list) \
        else []
    return Certificate(
        image=image, image_id=image_id, lock_hash=lock_hash or "", gpu_model=gpu_model_of(facts),
        driver=str(facts.get("driver") or "none"), status=status, reasons=reasons, mode=str(doc.get("mode") or ""),
        gpu_count=len(facts.get("gpus") or []), expect=dict(expect),
        checks=tuple(_check_record(c) for c in doc.get("checks") or [] if isinstance(c, dict)),
        facts=facts, telemetry_summary=summarize_telemetry(samples), telemetry=_thin(samples),
        payload_version=str(payload.get("version") or "unknown"), payload_sha256=str(payload.get("sha256") or ""),
        envkit_version=envkit_version, created_at=created_at)


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def certify_image(engine: Engine, ref: str, expect: dict, *, gpus: bool, timeout: int = 600,
                  created_at: str | None = None) -> Certificate:
    """Run the payload in ``ref`` (on the GPUs when ``gpus``) and certify the outcome."""
    info = engine.inspect(ref)
    if info is None:
        raise VerificationError(f"no image {ref} in the engine", hint="build it first with `envkit build SPEC`")
    verification = run_payload(engine, ref, expect, gpus=gpus, timeout=timeout, mode="certify" if gpus else "verify")
    return certificate_from(verification.raw, expect, image=ref, image_id=info.id,
                            lock_hash=info.labels.get(LOCK_LABEL, ""), gpu_requested=gpus,
                            created_at=created_at or utc_now(), envkit_version=__version__)


# ------------------------------------------------------------------ files and labels
def parse_certificate(data: bytes | str, source: str = "certificate") -> Certificate:
    try:
        obj = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise VerificationError(
            f"{source} is not JSON: {exc}", hint="re-run `envkit certify` to write it again"
        ) from None
    version = obj.get("version") if isinstance(obj, dict) else None
    if version != CERTIFICATE_VERSION:
        raise VerificationError(f"{source}: unsupported certificate version {version!r}",
                                hint=f"this envkit reads certificate version {CERTIFICATE_VERSION}; "
                                     "use the envkit that wrote it, or re-certify the image")
    try:
        return Certificate.model_validate(obj)
    except ValidationError as exc:
        raise VerificationError(f"{source} is not a valid certificate: {exc}",
                                hint="re-run `envkit certify` to write it again") from None


def load_certificate(path: str | Path) -> Certificate:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise VerificationError(f"cannot read certificate {path}: {exc.strerror or exc}",
                                hint="run `envkit certify` first") from None
    return parse_certificate(data, str(path))


def slug(text: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (a label-key-safe name)."""
    return _SLUG.sub("-", text.lower()).strip("-") or "none"


def certificate_label(cert: Certificate) -> dict[str, str]:
    """``{io.envkit.certified.<gpu-slug>: "<status> <driver> <YYYY-MM-DD>"}`` to record on the image."""
    return {f"{LABEL_PREFIX}{slug(cert.gpu_model)}": f"{cert.status} {cert.driver} {cert.created_at[:10]}"}


PERF_CHECKS = ("matmul_tflops", "h2d_d2h_bandwidth", "nccl_allreduce")


def perf_metrics(cert: Certificate) -> dict[str, float]:
    """Numeric results of the performance probes, flattened: e.g. matmul_tflops.bf16_tflops."""
    out: dict[str, float] = {}
    for check in cert.checks:
        if check.name in PERF_CHECKS and check.status == "passed" and isinstance(check.value, dict):
            for key, value in check.value.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[f"{check.name}.{key}"] = float(value)
    return out
