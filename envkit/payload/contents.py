"""The payload as the host sees it, before any engine is involved: its directory, its files (copied into build
contexts by render, mounted by the harness), its identity (``payload_sha256``, by the payload's own rule) and the
expectations it takes (``payload_expect``: checked by the payload's own rules before they are written or mounted)."""

from __future__ import annotations

from pathlib import Path

from ..errors import VerificationError
from .envkit_check import envkit_check_core as payload_identity

SCHEMA = payload_identity.SCHEMA  # what the payload's document says it is: "envkit.payload/1"
PAYLOAD = Path(__file__).resolve().parent / "envkit_check"
PAYLOAD_NAME = PAYLOAD.name  # the directory's name in a build context, an image and the mount


def payload_files() -> dict[str, bytes]:
    """The payload's files by name, as they are copied into images and mounted (``*.py`` only)."""
    return {name: (PAYLOAD / name).read_bytes() for name in payload_identity.payload_files(str(PAYLOAD))}


def payload_sha256() -> str:
    """The payload's identity as its documents report it, computed here by the payload's own rule
    (``envkit_check_core.payload_sha256``: over every file's name and bytes)."""
    return payload_identity.payload_sha256(str(PAYLOAD))


def payload_expect(expect: dict) -> dict:
    """`expect` as the payload takes it: a key whose value is null where null says nothing (``python``,
    ``torch``: a pin label an image lacks) is left out, which skips that comparison inside; the
    payload refuses such a file (exit 2). The verdict (``certify.verdict.decide``) still reads `expect`.

    What is left is checked by the payload's own rules (``expect_problems``) before it is written into a
    build context or mounted: a value the payload would refuse (a malformed ``requested`` pin label, say)
    is named here, not as a payload that did not report."""
    sent = {k: v for k, v in expect.items() if v is not None or k in payload_identity.EXPECT_NULLABLE}
    problems = payload_identity.expect_problems(sent)
    if problems:
        raise VerificationError("the expectations for the payload are not ones it takes: " + "; ".join(problems),
                                hint="they come from the lock (or an image's io.envkit.* pin labels): resolve the "
                                     "spec again, or pass the lock the image was built from with --lock")
    return sent
