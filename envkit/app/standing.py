"""Where an image stands on each GPU model, from its certificates: the one answer `envkit ls`, `show` and `pull`
give (and `run`'s gate weighs the same certificates: ``certify.gate.judge``).

A certificate is a dict as ``app.researchers`` gathers them (the store's and the registry's artifacts alike):
``status``, ``gpu_model``, ``driver``, ``created_at``, ``source`` and, where known, ``metrics`` (the performance
probes' numbers, ``certify.certificate.perf_metrics``). Per GPU model the newest certificate speaks. A certificate
made without a GPU (its model ``none``) is a CPU-only verification: it is shown as such, never as a GPU model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ..catalog.perf import model_key
from ..frameworks import NAMES, expect_from_labels
from ..support.labels import LOCK_LABEL

NO_GPU = ("", "none")  # the gpu_model of a certificate made without a GPU
CPU_ONLY = "CPU only"
BF16_METRIC = "bf16_matmul_tflops"  # the payload's bf16 matmul probe (``matmul_tflops.bf16_matmul_tflops``)
State = Literal["certified", "verified only", "failed", "not certified"]


@dataclass(frozen=True)
class Standing:
    """The newest certificate on one GPU model (``model`` "": the CPU-only verification)."""

    model: str  # as the certificate names it, e.g. "NVIDIA H200"; "" for a run without GPU
    status: str  # the certificate's: certified | verified | failed
    when: str  # created_at, ISO-8601 UTC
    driver: str
    source: str  # store | registry
    bf16_tflops: float | None = None

    @property
    def cpu_only(self) -> bool:
        return self.model == ""

    @property
    def short(self) -> str:
        """'H200' for 'NVIDIA H200'; 'CPU only' for a run without GPU."""
        return CPU_ONLY if self.cpu_only else short_model(self.model)

    def words(self) -> str:
        """'H200 certified 2026-12-01', 'CPU only verified 2026-11-30'."""
        return f"{self.short} {self.status} {self.when[:10]}".rstrip()

    def to_json(self) -> dict[str, Any]:
        return {"gpu_model": self.model or None, "cpu_only": self.cpu_only, "status": self.status,
                "created_at": self.when, "driver": None if self.driver in NO_GPU else self.driver,
                "source": self.source, "bf16_tflops": self.bf16_tflops}


def short_model(name: str) -> str:
    """'NVIDIA H200' -> 'H200' (the names the spec's fleet uses)."""
    text = " ".join(str(name).split())
    return text[len("NVIDIA "):] if text.lower().startswith("nvidia ") else text


def bf16_of(metrics: dict[str, Any] | None) -> float | None:
    for key, value in (metrics or {}).items():
        if key.endswith(BF16_METRIC) and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def standings(certificates: list[dict[str, Any]]) -> list[Standing]:
    """The newest certificate per GPU model (models compared as the gate compares them: without case or an
    ``NVIDIA`` prefix), GPU models by name first, then the CPU-only verification."""
    newest: dict[str, dict[str, Any]] = {}
    for cert in certificates:
        model = str(cert.get("gpu_model") or "")
        key = "" if model in NO_GPU else model_key(model)
        if key not in newest or str(cert.get("created_at") or "") >= str(newest[key].get("created_at") or ""):
            newest[key] = cert
    out = [Standing(model="" if key == "" else str(c.get("gpu_model")), status=str(c.get("status") or "failed"),
                    when=str(c.get("created_at") or ""), driver=str(c.get("driver") or ""),
                    source=str(c.get("source") or "store"), bf16_tflops=bf16_of(c.get("metrics")))
           for key, c in newest.items()]
    return sorted(out, key=lambda s: (s.cpu_only, model_key(s.model)))


def on_model(found: list[Standing], model: str) -> tuple[State, Standing | None]:
    """Where the image stands on GPU ``model`` (as the spec's fleet names it, 'H100', or as nvidia-smi does):
    certified or failed there; else ``verified only`` when a CPU-only verification passed; else not certified."""
    mine = [s for s in found if not s.cpu_only and model_key(s.model) == model_key(model)]
    if mine:
        s = mine[0]
        return ("certified" if s.status == "certified" else "failed"), s
    cpu = [s for s in found if s.cpu_only and s.status in ("verified", "certified")]
    return ("verified only", cpu[0]) if cpu else ("not certified", None)


def summary(found: list[Standing], gpu: str | None = None) -> str:
    """One cell for `envkit ls`: 'H200 certified 2026-12-01, CPU only verified 2026-11-30'; with ``gpu``, that
    model's state alone ('H100: verified only (CPU only 2026-11-30)')."""
    if gpu is not None:
        state, s = on_model(found, gpu)
        when = f" ({s.words() if state == 'verified only' else s.when[:10]})" if s is not None else ""
        return f"{short_model(gpu)}: {state}{when}"
    return ", ".join(s.words() for s in found) or "no certificate"


def certified_on(found: list[Standing], gpu: str | None) -> bool:
    """Certified on ``gpu`` (None: on any GPU model)."""
    if gpu is not None:
        return on_model(found, gpu)[0] == "certified"
    return any(s.status == "certified" and not s.cpu_only for s in found)


def stack_facts(labels: dict[str, str] | None, certificates: list[dict[str, Any]]) -> dict[str, str | None]:
    """framework ('torch 2.5.1'), CUDA ('12.4'; 'none' for a CPU-only build) and driver floor of an image: from its
    pin labels (engine or registry; ``frameworks.expect_from_labels``), else from what a certificate says the lock
    expected (an image no longer here)."""
    expects = [expect_from_labels(labels)] if labels and labels.get(LOCK_LABEL) else []
    for expect in [*expects, *(c.get("expect") or {} for c in certificates)]:
        for key in NAMES:  # an expectation names its framework's version so
            if expect.get(key):
                return {"framework": f"{key} {expect[key]}", "cuda": expect.get("cuda") or "none",
                        "driver_floor": expect.get("driver_floor")}
    return {"framework": None, "cuda": None, "driver_floor": None}


def described(row: dict[str, Any], certificates: list[dict[str, Any]],
              labels: dict[str, str] | None) -> dict[str, Any]:
    """A listing row with what `envkit ls` shows of it: framework, CUDA, and where it stands per GPU model."""
    found = standings(certificates)
    return {**row, **stack_facts(labels, certificates), "standing": [s.to_json() for s in found],
            "status": summary(found)}


def from_json(docs: list[dict[str, Any]]) -> list[Standing]:
    """``Standing.to_json`` read back (a listing row's ``standing``)."""
    return [Standing(model=d.get("gpu_model") or "", status=d["status"], when=d.get("created_at") or "",
                     driver=d.get("driver") or "", source=d.get("source") or "store", bf16_tflops=d.get("bf16_tflops"))
            for d in docs]
