"""``envkit certify --fleet SPEC``: certify every image of the spec's lock on every fleet GPU model through the
team's scheduler (``dispatch:``), record one certificate per (image, model) and move each image's promoted tag
only when the whole fleet passed (``dispatch.require``)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..certify.certificate import Certificate, perf_metrics, slug, utc_now
from ..certify.report import FILES, write_reports
from ..dispatch.jobs import FleetJob, mount_name
from ..dispatch.runner import Routed, Scheduler, run_jobs
from ..dispatch.slurm import SlurmCli
from ..dispatch.verdict import Gate, fleet_certificate, gate
from ..engine.protocol import Engine
from ..errors import DispatchError, EnvkitError, LockError, SpecError
from ..frameworks import expected
from ..lock import Lock, LockedImage, load_lock
from ..payload.contents import payload_sha256
from ..payload.harness import write_mount
from ..registry.artifacts import attach_certificate
from ..registry.publish import promote
from ..registry.remote_parse import CERTIFIED_TAG
from ..registry.signing import sign_published
from ..render.files import image_tag
from ..spec import Spec, load_spec
from ..spec_dispatch import Dispatch, KubernetesTarget, SlurmTarget
from ..store.history import Store
from ..support.atomic import check_writable
from ..support.progress import Progress, transfer_lines
from ..trust.keys import SigningKey
from .image_attestations import Documents, lock_documents
from .resolve import lock_path_for

FLEET_FILE = "fleet.json"
FLEET_SCHEMA = "envkit.fleet/1"


@dataclass
class FleetImage:
    name: str
    tag: str
    image_id: str
    certificates: list[Certificate]
    gate: Gate
    promoted: list[str] = field(default_factory=list)  # the promoted tags moved to this image
    publish_error: str | None = None

    def to_json(self) -> dict:
        rows = [{"model": c.dispatch.fleet_model if c.dispatch else c.gpu_model, "status": c.status,
                 "gpu": c.gpu_model, "driver": c.driver, "reasons": list(c.reasons),
                 "dispatch": c.dispatch.model_dump(mode="json") if c.dispatch else None} for c in self.certificates]
        return {"image": self.name, "tag": self.tag, "image_id": self.image_id, "gate": self.gate.to_json(),
                "models": rows, "promoted": self.promoted, "publish_error": self.publish_error}


@dataclass
class FleetResult:
    images: list[FleetImage]
    reports: dict[str, str]
    seconds: float

    @property
    def passed(self) -> bool:
        return all(i.gate.promote and not i.publish_error for i in self.images)

    def to_json(self) -> dict:
        return {"schema": FLEET_SCHEMA, "passed": self.passed, "seconds": round(self.seconds, 1),
                "images": [i.to_json() for i in self.images], "reports": self.reports}


def shared_dir(spec: Spec, dispatch: Dispatch) -> Path:
    """``dispatch.shared_dir``, relative to the spec: where the payload goes and the jobs' reports come back."""
    if not dispatch.shared_dir:
        raise SpecError("dispatch.shared_dir is not set: the jobs need a directory this host and every node see",
                        location=spec.locate("dispatch"),
                        hint="give dispatch.shared_dir: a path on the cluster's shared file system (NFS, Lustre, "
                             "GPFS) mounted at the same path on this host and on the nodes")
    path = Path(dispatch.shared_dir)
    return path if path.is_absolute() or spec.path is None else (spec.path.parent / path).resolve()


def _jobs(spec: Spec, dispatch: Dispatch, shared: Path, team: str, name: str, ref: str, image_id: str,
          timeout: int, mount_id: str) -> list[FleetJob]:
    jobs = []
    for model in dict.fromkeys(spec.fleet.gpus):
        target = dispatch.target(model)
        if target is None:
            continue  # the gate names it: no target, nothing certified it
        jobs.append(FleetJob(team, name, ref, image_id, model, target, shared, timeout, mount_id))
    return jobs


def _write_mount(mount: Path, expect: dict) -> None:
    """The payload and its expectations at ``mount`` (named by their digest: left as it is when there, since a job
    of an earlier run may be reading it), written beside it and renamed into place whole."""
    if mount.is_dir():
        return
    mount.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{mount.name}-", dir=mount.parent))
    try:
        write_mount(staging, expect)
        staging.rename(mount)
    except OSError:
        if not mount.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _registry_ref(engine: Engine, registry: str, team: str, name: str, tag: str, progress: Progress) -> str:
    """Push the stack tag (only) so that nodes pull it; the reference they pull."""
    repo = f"{registry.rstrip('/')}/{team}/{name}"
    stack_tag = tag.split(":", 1)[1]
    progress(f"[{name}] pushing {repo}:{stack_tag} for the nodes to pull")
    result = promote(engine, repo, stack_tag, certified=False, image=tag, progress=lambda _: None,
                     transfer=transfer_lines(progress, f"[{name}] pushed"))
    return result.stack.ref


@dataclass
class _Planned:
    image: LockedImage
    tag: str
    image_id: str
    jobs: list[FleetJob]


def _plan(spec_path: Path, spec: Spec, dispatch: Dispatch, engine: Engine, lock: Lock, images: list[LockedImage],
          registry: str | None, timeout: int, progress: Progress) -> list[_Planned]:
    """Per image of ``lock`` (built, in the engine; pushed first with a registry), its jobs, with the payload written
    where they read it."""
    shared = shared_dir(spec, dispatch)
    runtimes = {_target_runtime(dispatch.target(m)) for m in spec.fleet.gpus if dispatch.target(m) is not None}
    planned = []
    for image in images:
        tag = image_tag(lock.team, image)
        info = engine.inspect(tag)
        if info is None:
            raise EnvkitError(f"no image {tag} in the engine", hint=f"build it first: `envkit build {spec_path}`")
        if not registry and runtimes - {"docker"}:
            raise DispatchError(f"{', '.join(sorted(runtimes - {'docker'}))} nodes pull the image from a registry, "
                                f"and {tag} is only in this host's engine", hint="give --registry HOST[/PATH]")
        ref = _registry_ref(engine, registry, lock.team, image.name, tag, progress) if registry else tag
        jobs = _jobs(spec, dispatch, shared, lock.team, image.name, ref, info.id, timeout,
                     mount_name(payload_sha256(), expected(image)))
        if jobs:
            _write_mount(jobs[0].mount_dir, expected(image))
        planned.append(_Planned(image, tag, info.id, jobs))
    return planned


def require_dispatch(spec_path: Path, spec: Spec) -> Dispatch:
    """The spec's ``dispatch:`` section, or the error naming the file that lacks it."""
    if spec.dispatch is None:
        raise SpecError(f"{spec_path} has no dispatch: section", hint="add one mapping each fleet GPU model to a "
                        "Slurm or Kubernetes target (docs/fleet.md)")
    return spec.dispatch


def dispatch_fleet(spec_path: Path, spec: Spec, engine: Engine, store: Store, lock: Lock,
                   images: list[LockedImage], *, registry: str | None = None, timeout: int = 600,
                   poll_s: float = 2.0, scheduler: Scheduler | None = None,
                   progress: Progress = lambda _: None, checks: dict[str, dict] | None = None) -> list[FleetImage]:
    """One job per (image of ``images``, fleet model) through ``dispatch:``, run to their end (re-attaching to the
    jobs an earlier run left in ``shared_dir``); one certificate per job recorded in ``store``, and each image's
    gate. Nothing is promoted here (``publish``): ``certify --fleet`` and ``nightly --dispatch`` both call it.
    ``checks``: a check the host made of an image (by name), joined to each of its certificates
    (``nightly --reproducible``'s ``layers``)."""
    dispatch = require_dispatch(spec_path, spec)
    planned = _plan(spec_path, spec, dispatch, engine, lock, images, registry, timeout, progress)
    jobs = [job for p in planned for job in p.jobs]
    progress(f"dispatching {len(jobs)} job(s): {len(planned)} image(s) x {len(spec.fleet.gpus)} GPU model(s), "
             f"at most {dispatch.max_parallel} at once")
    outcomes = {o.job.key: o for o in run_jobs(
        jobs, scheduler or _schedulers(jobs, planned), max_parallel=dispatch.max_parallel,
        pending_limit=dispatch.pending_limit, retries=dispatch.retries, poll_s=poll_s, progress=progress)}
    fleet = list(dict.fromkeys(spec.fleet.gpus))
    results: list[FleetImage] = []
    for p in planned:
        certs = [fleet_certificate(outcomes[j.key], expected(p.image), lock_hash=p.image.hash,
                                   scheduler="kubernetes" if isinstance(j.target, KubernetesTarget) else "slurm",
                                   runtime=_target_runtime(j.target), created_at=utc_now(),
                                   envkit_version=__version__).with_check((checks or {}).get(p.image.name))
                 for j in p.jobs]
        for cert in certs:
            store.record_certificate(p.image_id, cert.record_model, cert.driver, status=cert.status,
                                     lock_hash=p.image.hash, document=cert.to_json(), metrics=perf_metrics(cert))
        results.append(FleetImage(p.image.name, p.tag, p.image_id, certs, gate(p.tag, fleet, certs, dispatch.require)))
    return results


def write_fleet_reports(result: FleetResult, out_dir: Path) -> None:
    """The certificates' reports and ``fleet.json`` in ``out_dir``, named in ``result.reports``."""
    doc = json.dumps(result.to_json(), indent=2, sort_keys=True).encode() + b"\n"
    paths = write_reports([c for i in result.images for c in i.certificates], out_dir,
                          also={"fleet": (FLEET_FILE, doc)})
    result.reports = {k: str(v) for k, v in paths.items()}


def certify_fleet(spec_path: Path, engine: Engine, *, store_url: str | None, out_dir: Path,
                  registry: str | None = None, timeout: int = 600, poll_s: float = 2.0,
                  scheduler: Scheduler | None = None, progress: Progress = lambda _: None,
                  signing_key: SigningKey | None = None) -> FleetResult:
    """Certify every image of the lock on every fleet model through ``dispatch:``; see the module. ``signing_key``:
    the pushed images are signed and their certificates attached as signed attestations."""
    started = time.monotonic()
    spec = load_spec(spec_path)
    require_dispatch(spec_path, spec)
    for name in [*FILES.values(), FLEET_FILE]:
        check_writable(out_dir / name)
    lock_path = lock_path_for(spec_path)
    if not lock_path.exists():
        raise LockError(f"no lock {lock_path}", hint=f"resolve and build first: `envkit build {spec_path}`")
    lock = load_lock(lock_path)
    with Store.open(store_url) as store:
        images = dispatch_fleet(spec_path, spec, engine, store, lock, list(lock.images), registry=registry,
                                timeout=timeout, poll_s=poll_s, scheduler=scheduler, progress=progress)
        for image in images:
            publish(engine, image, lock.team, registry, progress, signing_key,
                    lock_documents(engine, store, lock, image.name, image.tag, str(spec_path)))
    result = FleetResult(images, {}, time.monotonic() - started)
    write_fleet_reports(result, out_dir)
    return result


def _target_runtime(target: SlurmTarget | KubernetesTarget | None) -> str:
    return (target.runtime or "docker") if isinstance(target, SlurmTarget) else "kubernetes"


def _schedulers(jobs: list[FleetJob], planned: list[_Planned]) -> Scheduler:
    """Slurm's clients, and a Kubernetes API client where a target is on Kubernetes (the ``kubernetes`` package
    is imported only then)."""
    slurm = SlurmCli(__version__) if any(isinstance(j.target, SlurmTarget) for j in jobs) else None
    kube = None
    if any(isinstance(j.target, KubernetesTarget) for j in jobs):
        try:
            from ..dispatch.kube_api import KubeJobs, connect
        except ImportError:
            raise DispatchError("a dispatch target is on Kubernetes, and the kubernetes client is not installed",
                                hint="pip install 'envkit[kubernetes]'") from None
        kube = KubeJobs(connect(), {p.image_id: expected(p.image) for p in planned})
    return Routed(slurm, kube)


def publish(engine: Engine, result: FleetImage, team: str, registry: str | None, progress: Progress,
            signing_key: SigningKey | None = None, documents: Callable[[str], Documents] | None = None) -> None:
    """Move the promoted tag to the image when its gate passed: ``<team>/<image>:certified`` in this engine, and
    with a registry its ``:certified`` (the certificates attached as artifacts there either way). ``documents``:
    given the pushed digest, the SBOM and provenance signed beside the certificates (``app.image_attestations``)."""
    if result.gate.promote:
        local = f"{team}/{result.name}:{CERTIFIED_TAG}"
        engine.tag(result.image_id, local)
        result.promoted.append(local)
        progress(f"[{result.name}] promoted: {local} -> {result.image_id[:19]}")
    else:
        progress(f"[{result.name}] not promoted: " + "; ".join(result.gate.reasons))
    if not registry:
        return
    repo = f"{registry.rstrip('/')}/{team}/{result.name}"
    stack_tag = result.tag.split(":", 1)[1]
    try:
        moved = promote(engine, repo, stack_tag, certified=result.gate.promote, image=result.tag,
                        progress=lambda _: None)
        for cert in result.certificates:
            attach_certificate(engine, repo, stack_tag, cert.to_bytes(), gpu_slug=slug(cert.record_model),
                               status=cert.status)
        if signing_key is not None:  # its signature; each certificate, its SBOM and provenance as signed attestations
            sign_published(engine, repo, moved.stack.digest, signing_key, result.certificates,
                           documents(moved.stack.digest) if documents is not None else None)
        if moved.certified:
            result.promoted.append(moved.certified.ref)
    except EnvkitError as exc:
        result.publish_error = exc.message
