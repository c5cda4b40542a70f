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

from .. import frameworks, scratch
from ..engine import Mount, RunOptions
from ..errors import VerificationError
from .payload.envkit_check import envkit_check_core as payload_identity

PAYLOAD = Path(__file__).resolve().parent / "payload" / "envkit_check"
PAYLOAD_NAME = PAYLOAD.name  # the directory's name in a build context, an image and the mount
MOUNT = "/opt/envkit-run"


def payload_files() -> dict[str, bytes]:
    """The payload's files by name, as they are copied into images and mounted (``*.py`` only)."""
    return {name: (PAYLOAD / name).read_bytes() for name in payload_identity.payload_files(str(PAYLOAD))}


def payload_sha256() -> str:
    """The payload's identity as its documents report it, computed here by the payload's own rule
    (``envkit_check_core.payload_sha256``: over every file's name and bytes)."""
    return payload_identity.payload_sha256(str(PAYLOAD))


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


def run_payload(engine, ref: str, expect: dict, *, gpus: bool = False, timeout: int = 600,
                mode: str = "auto") -> Verification:
    with scratch.directory("verify") as tmp:
        tmpdir = Path(tmp)
        payload = tmpdir / PAYLOAD_NAME
        payload.mkdir()
        for name, data in payload_files().items():
            (payload / name).write_bytes(data)
        (tmpdir / "expect.json").write_text(json.dumps(payload_expect(expect), sort_keys=True))
        for p in (tmpdir, payload):
            p.chmod(0o755)
        for p in [*payload.iterdir(), tmpdir / "expect.json"]:
            p.chmod(0o644)
        options = RunOptions(gpus=gpus, timeout=timeout, mounts=(Mount(str(tmpdir), MOUNT),), role="certify",
                             # NCCL needs unlimited locked memory and a large stack on GPU hosts
                             ulimits={"memlock": -1, "stack": 67108864} if gpus else {})
        result = engine.run(ref, ["python3", f"{MOUNT}/{PAYLOAD_NAME}", "--expect", f"{MOUNT}/expect.json",
                                  "--json", "--mode", mode, "--timeout", str(max(timeout - 10, 1))], options)
    if result.timed_out:
        raise VerificationError(f"the payload in {ref} ran past {timeout}s and was stopped")
    try:
        doc = json.loads(result.stdout)
    except json.JSONDecodeError:
        tail = "\n    ".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise VerificationError(f"the payload in {ref} did not report (exit {result.exit_code})",
                                hint=f"its output ended with:\n    {tail}") from None
    failed = [f"{c['name']}: {c.get('message', '')}" for c in doc.get("checks", []) if c.get("status") == "failed"]
    return Verification(image=ref, status=doc.get("status", "failed"), checks=doc.get("checks", []),
                        facts=doc.get("facts", {}), payload=doc.get("payload", {}), mismatches=failed,
                        seconds=float(doc.get("seconds", 0.0)), raw=doc)


def payload_expect(expect: dict) -> dict:
    """`expect` as the payload takes it: a key whose value is null where null says nothing (``python``,
    ``torch``: a pin label an image lacks) is left out, which skips that comparison inside; the
    payload refuses such a file (exit 2). The verdict (``certificate.decide``) still reads `expect`."""
    return {k: v for k, v in expect.items() if v is not None or k in payload_identity.EXPECT_NULLABLE}


def expect_from_labels(labels: dict[str, str]) -> dict:
    """What an image claims to hold, from the pin labels envkit stamped on it (per framework)."""
    return frameworks.expect_from_labels(labels)
