"""`envkit doctor`: is this host ready to build and certify?"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok | warn | fail | skip
    value: str
    hint: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def diagnose(connect) -> list[Finding]:
    """``connect`` returns an engine or raises EngineError."""
    from .errors import EnvkitError

    findings: list[Finding] = []
    try:
        engine = connect()
        v = engine.version()
        findings.append(Finding("engine", "ok", f"{v['engine']} {v['version']} (API {v['api']}, {v['os']}/{v['arch']})"))
        has_nvidia = engine.nvidia_runtime()
        findings.append(Finding("nvidia_runtime", "ok" if has_nvidia else "warn",
                                "registered" if has_nvidia else "not registered",
                                "" if has_nvidia else "install the NVIDIA Container Toolkit to certify on GPUs "
                                "(nvidia-ctk runtime configure --runtime=docker); builds and verification work without it"))
    except EnvkitError as exc:
        findings.append(Finding("engine", "fail", exc.message, exc.hint or ""))
    smi = shutil.which("nvidia-smi")
    if smi:
        proc = subprocess.run([smi, "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True)
        gpus = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        findings.append(Finding("gpus", "ok" if proc.returncode == 0 and gpus else "fail",
                                "; ".join(gpus) or proc.stderr.strip()[:200]))
    else:
        findings.append(Finding("gpus", "skip", "no nvidia-smi on this host (no NVIDIA driver)",
                                "images can be built and verified here; certification needs a GPU host"))
    deb = shutil.which("debootstrap") or (os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap")
    findings.append(Finding("debootstrap", "ok" if deb else "warn", deb or "not installed",
                            "" if deb else "apt-get install debootstrap, to make `bootstrap:` bases"))
    ca = os.environ.get("ENVKIT_CA_BUNDLE") or os.environ.get("PIP_CERT")
    findings.append(Finding("ca_bundle", "ok", ca if ca and os.path.isfile(ca) else "none (direct TLS)"))
    return findings
