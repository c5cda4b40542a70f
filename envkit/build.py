"""Build each locked image (skipping ones already built from the same lock and context),
then verify it with the payload.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .base import ensure_base
from .certify.harness import Verification, run_payload
from .engine import BuildEvent
from .lock import Lock, LockedImage
from .render import context_hash, image_tag, render_files

Progress = Callable[[str, BuildEvent | str], None]

LOCK_LABEL = "io.envkit.lock-hash"
CONTEXT_LABEL = "io.envkit.context-hash"


@dataclass
class Outcome:
    name: str
    tag: str
    action: str  # built | skipped
    image_id: str = ""
    size: int = 0
    seconds: float = 0.0
    verification: Verification | None = None
    labels: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        return self.verification.status if self.verification else "built"

    def to_json(self) -> dict:
        return {"name": self.name, "tag": self.tag, "action": self.action, "image_id": self.image_id,
                "size_bytes": self.size, "build_seconds": round(self.seconds, 1), "status": self.status,
                "verification": self.verification.to_json() if self.verification else None}


def build_image(engine, lock: Lock, image: LockedImage, spec_name: str, *, ca_bundle: Path | None,
                progress: Progress, verify: bool = True) -> Outcome:
    files = render_files(lock, image, spec_name)
    identity = {LOCK_LABEL: image.hash, CONTEXT_LABEL: context_hash(files)}
    tag = image_tag(lock.team, image)
    started = time.monotonic()
    existing = engine.find_image(identity)
    if existing is not None:
        if tag not in existing.tags:
            engine.tag(existing.id, tag)
        progress(image.name, f"unchanged since its last build ({existing.id[:19]}); skipping")
        outcome = Outcome(image.name, tag, "skipped", existing.id, existing.size)
    else:
        base = ensure_base(engine, image.base, lambda msg: progress(image.name, msg))
        labels = dict(identity, **{"io.envkit.base-id": base.id})
        with tempfile.TemporaryDirectory(prefix=f"envkit-ctx-{image.name}-") as tmp:
            ctx = Path(tmp)
            for rel, data in files.items():
                (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
                (ctx / rel).write_bytes(data)
            if ca_bundle is not None:
                shutil.copyfile(ca_bundle, ctx / "site-ca" / "ca.pem")
            image_id = ""
            for event in engine.build(ctx, tag, labels):
                if event.kind == "done":
                    image_id = event.text
                progress(image.name, event)
        info = engine.inspect(tag)
        outcome = Outcome(image.name, tag, "built", info.id if info else image_id, info.size if info else 0,
                          time.monotonic() - started)
    if verify:
        progress(image.name, "verifying inside the image")
        outcome.verification = run_payload(engine, tag, image.expect())
    return outcome
