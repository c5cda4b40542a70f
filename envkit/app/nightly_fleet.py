"""``envkit nightly --dispatch``: the nightly's images (built or kept) certified through the spec's ``dispatch:``
(``fleet.dispatch_fleet``, as ``certify --fleet`` does) instead of on this runner, and promoted by the fleet's
``publish`` only where the fleet gate passed and no model regressed."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..certify.certificate import perf_metrics
from ..lock import Lock, LockedImage
from ..support.progress import Progress
from ..trust.keys import SigningKey
from .fleet import FleetResult, dispatch_fleet, publish
from .image_attestations import lock_documents
from .nightly_publish import ImageReport

if TYPE_CHECKING:
    from ..dispatch.runner import Scheduler
    from ..engine.protocol import Engine
    from ..spec import Spec
    from ..store.history import Store


@dataclasses.dataclass
class FleetStep:
    """How the nightly dispatches: the scheduler (None: the one ``dispatch:`` names) and its poll interval."""

    poll_s: float = 2.0
    timeout: int = 600
    scheduler: Scheduler | None = None


def certify_on_fleet(spec_path: Path, spec: Spec, engine: Engine, store: Store, run_id: int, lock: Lock,
                     ready: list[tuple[LockedImage, ImageReport]], *, registry: str | None, threshold: float,
                     step: FleetStep, progress: Progress, checks: dict[str, dict] | None = None,
                     signing_key: SigningKey | None = None) -> FleetResult:
    """Certify ``ready`` (the images this run built or kept) on every fleet model, judge each report by its gate
    (status, reasons, a regression per model), and promote where it passed. ``checks``: the run's own check of an
    image (``--reproducible``'s ``layers``), in each of its fleet certificates."""
    started = time.monotonic()
    reports = {image.name: report for image, report in ready}
    for image, _ in ready:
        store.mark_step(run_id, image.name, "certify", "started", image.hash)
    images = dispatch_fleet(spec_path, spec, engine, store, lock, [image for image, _ in ready], registry=registry,
                            timeout=step.timeout, poll_s=step.poll_s, scheduler=step.scheduler, progress=progress,
                            checks=checks)
    hashes = {image.name: image.hash for image, _ in ready}
    for fleet_image in images:
        report = reports[fleet_image.name]
        passed = fleet_image.gate.promote
        for cert in fleet_image.certificates:
            if cert.status == "certified":
                model = cert.dispatch.fleet_model if cert.dispatch else cert.gpu_model
                report.regressions += [f"{model}: {r}" for r in store.regressions(
                    cert.record_model, perf_metrics(cert), threshold, exclude_image=fleet_image.image_id)]
        if report.regressions and fleet_image.gate.promote:
            fleet_image.gate = dataclasses.replace(
                fleet_image.gate, promote=False,
                reasons=(*fleet_image.gate.reasons, "a probe regressed on a fleet model (see regressions)"))
        statuses = {c.status for c in fleet_image.certificates}
        report.status = ("failed" if not passed else "certified" if statuses == {"certified"} else "verified")
        report.reasons += list(fleet_image.gate.reasons)
        report.notes += list(fleet_image.gate.notes)
        report.worked = True
        publish(engine, fleet_image, lock.team, registry, progress, signing_key,
                lock_documents(engine, store, lock, fleet_image.name, fleet_image.tag,
                               str(spec_path)))
        report.pushed += fleet_image.promoted
        if fleet_image.publish_error:
            report.publish_error = fleet_image.publish_error
        store.mark_step(run_id, fleet_image.name, "certify", "done", hashes[fleet_image.name])
    return FleetResult(images, {}, time.monotonic() - started)
