"""Run the payload inside an image and turn its report into a result.

The payload (the directory ``payload/envkit_check``: ``__main__.py`` and the ``envkit_check_*``
modules) is mounted read-only from this envkit (its version and hash are recorded), with the
lock's expectations beside it; the image's own copy is the researcher's self-check. Without a
GPU the outcome is at best ``verified``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import frameworks
from ..engine.protocol import GPU_ULIMITS, RUN_SHM_SIZE, Mount, RunOptions
from ..errors import CommandNotFoundError, EnvkitError, VerificationError
from ..support import scratch
from .contents import PAYLOAD_NAME, SCHEMA, payload_expect, payload_files

if TYPE_CHECKING:
    from ..engine.protocol import Engine

MOUNT = "/opt/envkit-run"
RESERVE_S = 10  # the payload's own watchdog fires this long before the harness's limit, so that it still reports
MIN_TIMEOUT_S = 2 * RESERVE_S  # the least --timeout: the payload gets at least RESERVE_S of it


@dataclass
class Verification:
    image: str
    status: str  # verified | certified | failed
    checks: list[dict]
    facts: dict
    payload: dict
    mismatches: list[str] = field(default_factory=list)
    seconds: float = 0.0
    raw: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"image": self.image, "status": self.status, "mismatches": self.mismatches,
                "facts": self.facts, "payload": self.payload, "checks": self.checks,
                "seconds": self.seconds}


def payload_command(timeout: int, mode: str = "auto") -> list[str]:
    """The command that runs the payload mounted at ``MOUNT`` (``write_mount``'s directory) inside an image, with
    its own watchdog ``RESERVE_S`` before ``timeout`` (local certification and fleet jobs alike)."""
    return ["python3", f"{MOUNT}/{PAYLOAD_NAME}", "--expect", f"{MOUNT}/expect.json", "--json",
            "--mode", mode, "--timeout", str(max(timeout - RESERVE_S, 1))]


def write_mount(directory: Path, expect: dict) -> None:
    """Fill ``directory`` (mounted read-only at ``MOUNT``) with the payload and the expectations it checks, readable
    by the image's non-root user."""
    payload = directory / PAYLOAD_NAME
    payload.mkdir()
    for name, data in payload_files().items():
        (payload / name).write_bytes(data)
    (directory / "expect.json").write_text(json.dumps(payload_expect(expect), sort_keys=True))
    for p in (directory, payload):
        p.chmod(0o755)
    for p in [*payload.iterdir(), directory / "expect.json"]:
        p.chmod(0o644)


def run_payload(engine: Engine, ref: str, expect: dict, *, gpus: bool = False, timeout: int = 600,
                mode: str = "auto") -> Verification:
    with scratch.directory("verify") as tmp:
        tmpdir = Path(tmp)
        write_mount(tmpdir, expect)
        options = RunOptions(gpus=gpus, timeout=timeout, mounts=(Mount(str(tmpdir), MOUNT),), role="certify",
                             shm_size=RUN_SHM_SIZE, ulimits=GPU_ULIMITS if gpus else {})  # as `envkit run` jobs
        try:
            result = engine.run(ref, payload_command(timeout, mode), options)
        except CommandNotFoundError as exc:  # the image's fault (exit 8), not the engine's (6)
            raise VerificationError(f"{ref} has no {exc.command}: the payload runs with the image's own python3, "
                                    "so nothing in it can be checked",
                                    hint="envkit's images have python3 in their os stage; an image without it was "
                                         "not built from an envkit Dockerfile (or python3 was removed after)") from None
    if result.timed_out:
        raise VerificationError(f"the payload in {ref} ran past {timeout}s and was stopped before it reported",
                                hint="give a longer --timeout; a normal run takes well under a minute, so a "
                                     "much longer one may also mean the image or the host is stuck")
    doc = read_report(result.stdout)
    if doc is None:
        raise VerificationError(f"the payload in {ref} did not report (exit {result.exit_code})",
                                hint=unreported_hint(result.stdout, result.stderr))
    doc = encodable(doc)
    failed = [f"{c['name']}: {c.get('message', '')}" for c in doc.get("checks", []) if c.get("status") == "failed"]
    return Verification(image=ref, status=doc.get("status", "failed"), checks=doc.get("checks", []),
                        facts=doc.get("facts", {}), payload=doc.get("payload", {}), mismatches=failed,
                        seconds=float(doc.get("seconds", 0.0)), raw=doc)


def gpu_key(engine: Engine, ref: str, timeout: int = 60) -> tuple[str, str] | None:
    """(GPU model, driver) that certifying ``ref`` on this engine's GPUs would record, as the certificate
    spells them (``certify.certificate.gpu_model_of``: the distinct names joined by " + "), read by the NVIDIA
    Container Toolkit's nvidia-smi in a short container of the image; None when that cannot be read (no
    nvidia-smi, no GPU, an engine fault): a caller then certifies instead of trusting an older certificate."""
    options = RunOptions(gpus=True, timeout=timeout, network=False, role="certify")
    try:
        result = engine.run(ref, ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], options)
    except EnvkitError:
        return None
    rows = [[part.strip() for part in line.split(",")] for line in result.stdout.splitlines() if line.strip()]
    if result.exit_code != 0 or result.timed_out or not rows or any(len(r) != 2 or not all(r) for r in rows):
        return None
    drivers = {driver for _, driver in rows}
    if len(drivers) != 1:
        return None
    return " + ".join(dict.fromkeys(name for name, _ in rows)), drivers.pop()


def read_report(stdout: str) -> dict | None:
    """The payload's document in what a run wrote on stdout, or None.

    The payload (``--json``) writes nothing else there, but an image can: a ``.pth`` file or a
    ``sitecustomize`` that prints at Python startup writes before the payload holds fd 1. So the
    document is the last JSON object there that says it is one (``schema``), whatever comes before
    or after it (a banner printed without its newline included)."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError:
        doc = None
    if _is_report(doc):
        return doc
    decoder, found, start = json.JSONDecoder(), None, 0
    while (start := stdout.find("{", start)) != -1:
        try:
            doc, end = decoder.raw_decode(stdout, start)
        except json.JSONDecodeError:
            doc, end = None, start + 1
        if _is_report(doc):
            found, start = doc, end  # not into it: the objects inside a report are none
        else:
            start += 1
    return found


def encodable(obj: Any) -> Any:
    """``obj`` with every string made encodable as UTF-8: JSON's ``\\udc80`` escapes decode to lone surrogates
    (a message the payload took from a tool's undecodable output), which the reports and the store cannot write."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "replace").decode("utf-8")
    if isinstance(obj, list):
        return [encodable(x) for x in obj]
    if isinstance(obj, dict):
        return {encodable(k): encodable(v) for k, v in obj.items()}
    return obj


def _is_report(doc: object) -> bool:
    return isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get("checks"), list)


def unreported_hint(stdout: str, stderr: str, lines: int = 10) -> str:
    """Where a run that did not report went wrong: how its stdout began (a line the image printed
    before the payload ran, say) and how its output ended (a traceback)."""
    def excerpt(text: str, head: bool) -> str:
        kept = text.strip().splitlines()
        kept = kept[:lines] if head else kept[-lines:]
        return "\n    ".join(kept) if kept else "(nothing)"
    out = stdout.strip().splitlines()
    if len(out) <= lines:
        return f"its stdout was:\n    {excerpt(stdout, True)}\nits stderr ended with:\n    {excerpt(stderr, False)}"
    return (f"its stdout began with:\n    {excerpt(stdout, True)}\n"
            f"and ended with:\n    {excerpt(stdout, False)}\nits stderr ended with:\n    {excerpt(stderr, False)}")


def expect_from_labels(labels: dict[str, str]) -> dict:
    """What an image claims to hold, from the pin labels envkit stamped on it (per framework)."""
    return frameworks.expect_from_labels(labels)
