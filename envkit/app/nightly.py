"""The nightly job: re-resolve, rebuild what changed, certify, promote, remember.

Every step is recorded in the store before and after it runs, inside transactions, so a
run killed at any point (SIGKILL included) is finished by the next one: it resumes the
unfinished run, rebuilds only what has no completed build, re-certifies only what has no
certificate, and never records a push that did not happen.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from .. import __version__
from ..catalog.files import CATALOG_ENV, load_catalog, team_dir
from ..catalog.perf import load_perf
from ..catalog.refresh.run import parse_frameworks, refresh_catalog
from ..certify.certificate import Certificate, certificate_from, certify_image, parse_certificate, perf_metrics, utc_now
from ..certify.report import FILES, write_reports
from ..engine.protocol import AUTO
from ..engine.space import engine_full
from ..errors import BuildError, EngineError, LockError, VerificationError
from ..frameworks import expected
from ..images.builder import CONTEXT_LABEL, build_image, pick_builder, picked
from ..images.reproducible import require_local
from ..index.client import PackageIndex
from ..lock import Lock, LockedImage, lock_changes, write_lock
from ..payload.contents import SCHEMA
from ..payload.harness import gpu_key
from ..render.files import image_tag, render
from ..store.history import Store
from ..support.atomic import check_writable, write_atomic
from ..support.labels import made_reproducibly
from ..support.progress import Phase, Progress, phase_lines
from .build import display_name
from .fleet import FLEET_FILE, FleetResult, require_dispatch, shared_dir, write_fleet_reports
from .image_attestations import documents_for
from .nightly_disk import Disk
from .nightly_fleet import FleetStep, certify_on_fleet
from .nightly_layers import LayerStep
from .nightly_publish import Asked, ImageReport, _publish, note_built, restore_stages
from .resolve import load, lock_path_for, resolve_spec

if TYPE_CHECKING:
    from ..catalog.models import Catalog
    from ..catalog.refresh.common import ReadingIndex
    from ..engine.protocol import Engine, ImageInfo
    from ..spec import Spec
    from ..trust.keys import SigningKey

# Exit codes, distinct from the error codes of errors.py (15-17 are errors too).
PASSED, NOTHING_TO_DO, BUILD_FAILED, CERT_FAILED, REGRESSION, PUBLISH_FAILED = 0, 10, 11, 12, 13, 14
LAYERS_DIFFER = 18  # --reproducible: an image's environment layers are not the ones the lock's record holds
EXIT_NAMES = {PASSED: "passed", NOTHING_TO_DO: "nothing to do", BUILD_FAILED: "build failure",
              CERT_FAILED: "certification failure", REGRESSION: "regression", PUBLISH_FAILED: "publish failure",
              LAYERS_DIFFER: "layer mismatch"}


@dataclass
class NightlyResult:
    run_id: int
    exit_code: int
    images: list[ImageReport]
    reports: dict[str, str]
    seconds: float
    resumed: bool
    catalog: dict | None = None  # what --refresh-catalog found and did
    reclaimed: dict | None = None  # the gc run when a build filled the engine's disk (``reclaim``)
    fleet: dict | None = None  # with --dispatch: the fleet certification (as `certify --fleet --json` prints it)

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "exit_code": self.exit_code, "outcome": EXIT_NAMES[self.exit_code],
                "resumed": self.resumed, "seconds": round(self.seconds, 2), "reports": self.reports,
                "catalog": self.catalog, "reclaimed": self.reclaimed, "fleet": self.fleet,
                "images": [i.to_json() for i in self.images]}


def refresh_catalog_step(
    reports_dir: Path,
    *,
    index: ReadingIndex | None = None,
    today: str | None = None,
    frameworks: Iterable[str] = (),
    progress: Progress = lambda _: None,
) -> dict:
    """``--refresh-catalog``: ask the package index for the releases of ``frameworks`` (default:
    torch, jax and tensorflow) that the catalog lacks.

    A team's own catalog (``$ENVKIT_CATALOG``, made with ``envkit catalog export``) is updated
    in place before re-resolving, so new patch releases reach the images tonight; the diff is
    kept beside the reports for review. The catalog packaged with envkit is never edited: its
    proposed diff is written for review and the run goes on with the catalog as it is.
    """
    from datetime import date

    chosen = parse_frameworks(frameworks)
    progress(f"refreshing the catalog ({', '.join(chosen)}) from the package index")
    result = refresh_catalog(load_catalog(), index or PackageIndex(), today=today or date.today().isoformat(),
                             frameworks=chosen)
    doc: dict = {"changed": result.changed, "applied": False, "files": [], "diff": None,
                 "frameworks": {r.framework: {"added_series": list(r.added_series),
                                              "added_patches": list(r.added_patches),
                                              "warnings": list(r.warnings),
                                              "skipped": list(r.skipped)} for r in result.results}}
    if not result.changed:
        return doc
    diff_path = Path(reports_dir) / "catalog-refresh.diff"
    write_atomic(diff_path, result.diff().encode())
    doc["diff"] = str(diff_path)
    if team_dir() is not None:
        doc["files"] = [str(p) for p in result.apply()]
        doc["applied"] = True
        progress(f"catalog refreshed: {', '.join(doc['files'])} (diff in {diff_path})")
    else:
        doc["note"] = (f"the catalog packaged with envkit is not edited; point {CATALOG_ENV} at a team copy "
                       f"(`envkit catalog export DIR`) to apply refreshes in nightly runs")
        progress(f"catalog refresh proposed (not applied): {diff_path}")
    return doc


def _locks(spec_path: Path, spec: Spec, catalog: Catalog, *, locked: bool, progress: Progress,
           refreshed: bool = False) -> tuple[dict[str, list[str]], Lock]:
    """Per image, what changed since the lock before this run (read once; missing or unreadable: every image is new),
    and the lock this run builds: with ``locked``, the lock as it is (missing or stale fails, exit 5), else
    re-resolved. The spec and catalog are the run's (``refreshed``: the team's catalog, refreshed in place, again)."""
    if not locked:
        progress("re-resolving against the catalog and the package index")
    catalog = load_catalog() if refreshed else catalog
    resolved = resolve_spec(spec_path, locked=locked, progress=progress, loaded=(spec, catalog))
    if resolved.moved is not None:
        return resolved.moved, resolved.lock
    return lock_changes(resolved.lock if resolved.reused else None, resolved.lock), resolved.lock


def run_nightly(spec_path: Path, engine: Engine, store: Store, *, out_root: Path, reports_dir: Path,
                registry: str | None = None, locked: bool = False, gpus: bool | None = None,
                threshold: float = 0.10, builder: str = AUTO, refresh_catalog: bool = False,
                refresh_frameworks: Iterable[str]=(), reclaim: Callable[[list[str]], dict] | None = None,
                dispatch: FleetStep | None = None, reproducible: bool = False,
                progress: Progress = lambda _: None, signing_key: SigningKey | None = None) -> NightlyResult:
    """``builder`` builds what changed; an image whose build is already recorded is kept as it is.
    ``reproducible``: through ``images.reproducible``, each image's layers checked against the lock's record
    (``nightly_layers``).
    ``reclaim``: frees the engine's disk when a build fills it, never removing the images tagged as
    given (``Disk``); without it the first full disk ends the run's building. ``dispatch``: certify through the
    spec's ``dispatch:`` section (``nightly_fleet``) instead of on this runner. ``signing_key``: what is pushed is
    signed and its certificates attached as signed attestations (``registry.signing``)."""
    builder = builder if builder == AUTO else pick_builder(engine, builder)  # a name: checked now; auto: below
    if refresh_catalog and locked:
        raise LockError("--refresh-catalog re-resolves the spec, so it cannot be combined with --locked",
                        hint="refresh on the CPU build job; the GPU job certifies its lock with --locked")
    started = time.monotonic()
    spec, catalog = load(spec_path)
    lock_path = lock_path_for(spec_path)
    load_perf()  # the floors certification judges: a broken team perf.yaml fails before the builds
    _check_outputs(spec_path, spec, Path(reports_dir), dispatch is not None, engine if reproducible else None)
    # One nightly per team at a time against this store (two CI runners, or a run that overlaps
    # the next): the lock goes with the process, so a killed run never blocks its own resume.
    with store.run_lock(f"nightly:{spec.team}", f"the nightly run of team {spec.team!r}"):
        catalog_doc = (refresh_catalog_step(reports_dir, frameworks=refresh_frameworks, progress=progress)
                       if refresh_catalog else None)
        changes, lock = _locks(spec_path, spec, catalog, locked=locked, progress=progress,
                               refreshed=bool(catalog_doc and catalog_doc["applied"]))
        # as `envkit build`: the builder picked once, rendered once for it into dockerfiles/, those files built
        builder = picked(engine, builder)
        rendered = render(lock, out_root, display_name(spec_path), buildkit=builder == "buildkit")
        layers = LayerStep.open(lock_path, locked=locked) if reproducible else None
        digest = lock.spec_digest
        resumed = store.unfinished_run(digest)
        run_id = resumed or store.start_run(digest)
        if resumed:
            progress(f"resuming unfinished run {run_id}")
        use_gpus = engine.nvidia_runtime() if gpus is None else gpus
        ca = spec.ca_bundle_path()
        reports: list[ImageReport] = []
        certificates: list[Certificate] = []
        disk = Disk(reclaim)
        asked = Asked()
        tags = [image_tag(lock.team, i) for i in lock.images]
        ready = []
        for image in lock.images:
            report = ImageReport(image.name, image_tag(lock.team, image), changes.get(image.name, []))
            reports.append(report)
            info = _build(engine, store, run_id, lock, image, spec_path, ca, report, progress, builder, disk, tags,
                          reproducible, files=rendered.files[image.name])
            # --reproducible: an image whose layers are not the lock's is neither certified nor published
            if info is None or (layers is not None and not layers.judge(store, image, report, info, use_gpus)):
                continue
            if dispatch is not None:
                ready.append((image, report))
                continue
            cert = _certify(engine, store, run_id, image, report, info, use_gpus, threshold, progress,
                            layers.checks.get(image.name) if layers else None)
            if cert is not None:
                certificates.append(cert)
            if registry and report.status in ("certified", "verified") and not report.regressions:
                _publish(engine, store, run_id, lock, image, report, info, registry, progress, cert, asked,
                         signing_key, documents=documents_for(engine, store, image, report.tag, str(spec_path)))
        fleet = None
        if dispatch is not None and ready:
            fleet = certify_on_fleet(spec_path, spec, engine, store, run_id, lock, ready, registry=registry,
                                     threshold=threshold, step=dispatch, progress=progress,
                                     checks=layers.checks if layers else None, signing_key=signing_key)
        written = _write_reports(Path(reports_dir), certificates + (layers.failed if layers else []), fleet)
        code = _exit_code(reports)
        store.finish_run(run_id, EXIT_NAMES[code], code)
        if not locked:
            _write_lock(lock, lock_path, layers, progress)
        result = NightlyResult(run_id, code, reports, written, time.monotonic() - started, bool(resumed),
                               catalog_doc, disk.reclaimed, fleet.to_json() if fleet else None)
    return result


def _write_lock(lock: Lock, lock_path: Path, layers: LayerStep | None, progress: Progress) -> None:
    """The lock this run re-resolved, and (--reproducible) the layer record of the images it built, beside it."""
    write_lock(lock, lock_path)
    if layers is not None:
        layers.finish(progress)


def _check_outputs(spec_path: Path, spec: Spec, reports_dir: Path, dispatch: bool,
                   reproducible_on: Engine | None = None) -> None:
    """What must hold before an hour of builds, not after them: a spec that can be dispatched (with --dispatch),
    reports that can be written, and (--reproducible) an engine that can mount this host's directories."""
    if reproducible_on is not None:
        require_local(reproducible_on)
    if dispatch:
        shared_dir(spec, require_dispatch(spec_path, spec))
    for name in [*FILES.values(), *([FLEET_FILE] if dispatch else [])]:
        check_writable(reports_dir / name)


def _write_reports(reports_dir: Path, certificates: list[Certificate], fleet: FleetResult | None) -> dict[str, str]:
    if fleet is not None:
        write_fleet_reports(fleet, reports_dir)
        return fleet.reports
    if certificates:
        return {k: str(v) for k, v in write_reports(certificates, reports_dir).items()}
    return {}


def _build(
    engine: Engine,
    store: Store,
    run_id: int,
    lock: Lock,
    image: LockedImage,
    spec_path: Path,
    ca: Path | None,
    report: ImageReport,
    progress: Progress,
    builder: str = AUTO,
    disk: Disk | None = None,
    tags: Sequence[str] = (),
    reproducible: bool = False,
    files: dict[str, bytes] | None = None,
) -> ImageInfo | None:
    """Build ``image`` unless its recorded build is on the engine. ``files``: its context as the run rendered it
    for ``builder`` (picked: ``pick_builder``), built as it is (None: ``build_image`` renders it)."""
    disk = disk or Disk()
    tag = report.tag
    info = engine.inspect(tag)
    ctx = info.labels.get(CONTEXT_LABEL, "") if info else ""
    known = store.find_build(image.name, image.hash, ctx) if info else None
    # (--reproducible: a builder's image of the lock is built again, so what is checked and promoted is envkit's)
    if info is not None and known is not None and known.image_id == info.id and (
            not reproducible or made_reproducibly(info.labels)):
        report.build = "skipped"
        note_built(engine, report, info)
        return info
    if disk.full is not None:
        report.build, report.status = "not built", "failed"
        report.reasons.append(
            f"not built: the engine's disk filled up building {disk.full} in this run"
            + (" and gc could not make room" if disk.reclaimed is not None else "")
            + "; free space on it (`envkit gc --dry-run` shows what gc would remove; "
            "`envkit nightly --gc` runs it) and run the nightly again: it rebuilds only what is missing"
        )
        report.worked = True
        return None
    started_here = "build" in store.steps(run_id, image.name)
    store.mark_step(run_id, image.name, "build", "started", image.hash)
    restore_stages(engine, store, image, tag, files if reproducible or builder == "buildkit" else None, progress)
    while True:
        try:
            outcome = build_image(
                engine, lock, image,
                display_name(spec_path),
                ca_bundle=ca,
                verify=False,
                builder=builder,
                reproducible=reproducible,
                files=files,
                keep_os_stage=True,  # (BuildKit: its OS stage as <tag>-os, which _publish mirrors)
                progress=lambda name, event: _say(progress, name, event),
            )
            break
        except (BuildError, EngineError) as exc:
            if engine_full(exc) and disk.try_reclaim(list(tags), lambda msg: progress(f"[{image.name}] {msg}")):
                report.notes.append(f"the engine's disk filled up ({exc.message}); {disk.said()}, and the build was "
                                    "tried again")
                continue
            if engine_full(exc):
                disk.full = image.name
            report.build, report.status = "failed", "failed"
            report.reasons.append(exc.message)
            report.worked = True
            return None
    info = engine.inspect(tag)
    if info is None:
        raise BuildError(f"{tag} is not in the engine right after its build", hint="is something removing images?")
    report.layers_built = outcome.moves.to_json() if outcome.moves is not None else None
    # A build this run started (or an earlier killed attempt of it) counts as built.
    action = "built" if outcome.action == "built" or started_here else "skipped"
    store.record_build(image.name, image.hash, info.labels.get(CONTEXT_LABEL, ""), tag=tag, image_id=info.id,
                       size=info.size, seconds=outcome.seconds, action=action, builder=outcome.made_by,
                       envkit_version=__version__, run_id=run_id)
    store.mark_step(run_id, image.name, "build", "done", image.hash)
    report.build = action
    report.worked = True
    return info


def _certify(
    engine: Engine,
    store: Store,
    run_id: int,
    image: LockedImage,
    report: ImageReport,
    info: ImageInfo,
    gpus: bool,
    threshold: float,
    progress: Progress,
    layers: dict | None = None,
) -> Certificate | None:
    # the newest verdict on a runner like this one stands when it passed: with no GPU, any GPU-less verdict;
    # with GPUs, only one on the same GPU model and driver as this runner's (a certificate is keyed by both,
    # and runners sharing a store may differ), asked of the engine only when there is one to reuse. A failed
    # one is tried again (a host fault, a payload timeout), else a failure would be reported forever without
    # its reasons, and an older pass is not taken over a newer failure (a manual `envkit certify` after a
    # driver change, say)
    records = [r for r in store.certificates_for(info.id) if (r.gpu_model != "none") == gpus]
    if gpus and records:
        here = gpu_key(engine, report.tag)
        records = [r for r in records if here is not None and (r.gpu_model, r.driver) == here]
    newest = records[-1] if records else None
    if newest is not None and newest.status == ("certified" if gpus else "verified"):
        report.status = newest.status
        # certified by this run before it was killed: its work, so a resumed run is not "nothing to do"
        report.worked = report.worked or "certify" in store.steps(run_id, image.name)
        return parse_certificate(json.dumps(newest.document)).with_check(layers)  # (this run's check, in its reports)
    store.mark_step(run_id, image.name, "certify", "started", image.hash)
    progress(f"[{image.name}] {'certifying on the GPUs' if gpus else 'verifying (no GPU on this runner)'}")
    try:
        cert = certify_image(engine, report.tag, expected(image), gpus=gpus)
    except (VerificationError, EngineError) as exc:
        doc = {"schema": SCHEMA, "status": "failed", "facts": {},
               "checks": [{"name": "harness", "status": "failed", "message": exc.message}]}
        cert = certificate_from(doc, expected(image), image=report.tag, image_id=info.id, lock_hash=image.hash,
                                gpu_requested=gpus, created_at=utc_now(), envkit_version=__version__)
    cert = cert.with_check(layers)  # (the check is no payload's: it passed, or was skipped, saying why)
    metrics = perf_metrics(cert)
    if cert.status == "certified":
        report.regressions = store.regressions(cert.gpu_model, metrics, threshold, exclude_image=info.id)
    store.record_certificate(info.id, cert.gpu_model, cert.driver, status=cert.status, lock_hash=image.hash,
                             document=cert.to_json(), metrics=metrics)
    store.mark_step(run_id, image.name, "certify", "done", image.hash)
    report.status = cert.status
    report.reasons += list(cert.reasons)
    report.worked = True
    return cert


def _exit_code(reports: list[ImageReport]) -> int:
    if any(r.build in ("failed", "not built") for r in reports):
        return BUILD_FAILED
    if any(r.layers and r.layers["check"] == "failed" for r in reports):
        return LAYERS_DIFFER
    if any(r.status == "failed" for r in reports):
        return CERT_FAILED
    if any(r.regressions for r in reports):
        return REGRESSION
    if any(r.publish_error for r in reports):
        return PUBLISH_FAILED
    if not any(r.worked or r.changes for r in reports):
        return NOTHING_TO_DO
    return PASSED


def _say(progress: Progress, name: str, event: object) -> None:
    """A build's event as the nightly's log line: its text; a base bootstrap's phase only as it starts and ends."""
    if isinstance(event, Phase):
        phase_lines(lambda line: progress(f"[{name}] {line}"))(event)
        return
    progress(f"[{name}] {getattr(event, 'text', event)}"[:160])
