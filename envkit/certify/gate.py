"""Whether an image was certified for this host: the gate `envkit run` puts before a researcher's job.

Certificates are keyed by (image, GPU model, driver). A run on GPUs asks, for each GPU model
``nvidia-smi`` lists on this host, for the newest certificate of the image on that model: it must
be ``certified``. A run without GPUs asks for any certificate that is not ``failed`` (``verified``
is what a host without a GPU can give). The certificates are the store's and, for an image named by
its registry reference, the registry's certificate artifacts (``app.researchers.show_image``).

By default an image that does not pass is run with a warning; ``--require-certified`` (or
``ENVKIT_REQUIRE_CERTIFIED=1``, for a cluster's login nodes) refuses it instead.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import asdict, dataclass, field

from ..catalog.perf import model_key

SMI_QUERY = ["--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"]


@dataclass(frozen=True)
class HostGpu:
    name: str  # as nvidia-smi says it, e.g. "NVIDIA H200"
    driver: str
    cc: str = ""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str
    hint: str = ""
    certificates: list[dict] = field(default_factory=list)  # the ones the verdict rests on

    def to_json(self) -> dict:
        return asdict(self)


def host_gpus() -> tuple[list[HostGpu], str | None]:
    """This host's GPUs from nvidia-smi, and why none could be read (None when it answered)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return [], "no nvidia-smi on this host (no NVIDIA driver)"
    try:
        proc = subprocess.run([smi, *SMI_QUERY], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"nvidia-smi did not answer: {exc}"
    gpus = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0]:
            gpus.append(HostGpu(parts[0], parts[1], parts[2] if len(parts) > 2 else ""))
    if proc.returncode != 0 or not gpus:
        return gpus, (proc.stderr.strip() or proc.stdout.strip() or f"nvidia-smi exited {proc.returncode}")[:200]
    return gpus, None


def judge(certificates: list[dict], gpus: list[HostGpu], *, on_gpus: bool, image: str,
          envkit_built: bool = True) -> Verdict:
    """The gate's verdict for ``image`` (its certificates: dicts with status, gpu_model, driver, created_at,
    reasons) on this host's ``gpus``, run with (``on_gpus``) or without them. ``envkit_built``: the image has
    envkit's lock-hash label; one without it cannot be certified, so the way out is another image."""
    fix = (f"certify it on this host (`envkit certify {image}`), or run the image your team marks certified "
           f"(its `:certified` tag; `envkit ls` lists them)")
    if not envkit_built:
        fix = ("envkit did not build this image (it has no io.envkit.lock-hash label), so it cannot be certified: "
               "run an envkit image your team marks certified (its `:certified` tag; `envkit ls` lists them), or "
               "build one with `envkit build SPEC` and certify that")
    if not on_gpus or not gpus:  # no GPU, or GPUs whose models nvidia-smi did not give: a GPU run needs certified
        good = [
            c for c in certificates if c.get("status") in (("certified",) if on_gpus else ("certified", "verified"))
        ]
        if good:
            newest = max(good, key=_when)
            then = "this run uses no GPU" if not on_gpus else "this host's GPU models could not be checked against it"
            return Verdict(True, f"{image}: {newest['status']} ({_on(newest)}); {then}", certificates=[newest])
        wanted = "certified certificate (a GPU run needs one)" if on_gpus else "certificate that passed"
        return Verdict(False, f"{image} has no {wanted}{_failed_note(certificates)}", fix,
                       certificates=list(certificates))
    used, problems = [], []
    for model in dict.fromkeys(g.name for g in gpus):
        mine = [c for c in certificates if model_key(c.get("gpu_model", "")) == model_key(model)]
        if not mine:
            others = sorted({str(c.get("gpu_model")) for c in certificates if c.get("status") == "certified"})
            problems.append(f"not certified on {model}" + (f" (certified on {', '.join(others)})" if others else ""))
            continue
        newest = max(mine, key=_when)
        used.append(newest)
        if newest.get("status") != "certified":
            why = "; ".join(newest.get("reasons") or []) or newest.get("status")
            problems.append(f"its newest certificate on {model} ({_on(newest)}) is {newest.get('status')}: {why}")
    if problems:
        return Verdict(False, f"{image}: " + "; ".join(problems), fix, certificates=used)
    drivers = sorted({g.driver for g in gpus})
    return Verdict(True, f"{image}: certified on {', '.join(_on(c) for c in used)}; this host runs driver "
                         f"{', '.join(drivers)}", certificates=used)


def _when(cert: dict) -> str:
    return str(cert.get("created_at") or "")


def _on(cert: dict) -> str:
    model = cert.get("gpu_model")
    where = "no GPU" if model in (None, "", "none") else model
    return f"{where}, driver {cert.get('driver') or 'none'}, {str(cert.get('created_at') or '')[:10]}".rstrip(", ")


def _failed_note(certificates: list[dict]) -> str:
    if not certificates:
        return " (none at all)"
    failed = [c for c in certificates if c.get("status") == "failed"]
    if not failed:
        newest = max(certificates, key=_when)
        return f" (its newest is {newest.get('status')} on {_on(newest)})"
    newest = max(failed, key=_when)
    return f" (it failed on {_on(newest)}: {'; '.join(newest.get('reasons') or []) or 'see its report'})"
