"""Commands for the certifying runners: certify one image, the nightly run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from ..errors import RunInProgressError
from ..payload.harness import MIN_TIMEOUT_S, RESERVE_S
from .common import (
    IMAGE,
    REGISTRY,
    SPEC,
    STORE,
    STORE_HELP,
    Ctx,
    _ctx,
    _short,
    builder_option,
    emit,
    json_option,
    locked_option,
    refresh_framework_option,
    run,
    table,
)
from .flags import from_renamed, renamed_option, signing_key_option

if TYPE_CHECKING:
    from ..app.nightly import NightlyResult
    from ..engine.docker_engine import DockerEngine


signing_pushed = signing_key_option(
    "what is pushed", "each image in cosign's layout (sha256-<hex>.sig); each certificate, its SBOM and provenance as "
                      "signed in-toto attestations (sha256-<hex>.att)")


@click.command("certify")
@click.argument("image", type=IMAGE, required=False)
@click.option("--fleet", "fleet_spec", type=SPEC, default=None,
              help="Certify every image of SPEC's lock on every fleet GPU model through the scheduler its dispatch: "
                   "section names (Slurm), and move each image's :certified tag only when the fleet passed.")
@click.option("--registry", type=REGISTRY, default=None,
              help="With --fleet: push the images there for the nodes to pull, attach the certificates and move "
                   "its :certified tag too.")
@click.option("--poll", "poll_s", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="With --fleet: seconds between two reads of the jobs' states.")
@click.option("--lock", "lock_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Expect what this lock says (default: the image's own pin labels).")
@click.option(
    "--gpus/--no-gpus", default=None, help="Certify on the GPUs (default: when the engine has the NVIDIA runtime)."
)
@click.option("--reports", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              callback=from_renamed(Path("reports")), metavar="DIR",
              help="Where the certificate and reports are written (default: reports).")
@renamed_option("--out", "--reports", "out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@click.option("--timeout", type=click.IntRange(min=MIN_TIMEOUT_S), default=600, show_default=True,
              help=f"Hard limit for the in-image run, seconds (at least {MIN_TIMEOUT_S}: the payload stops "
                   f"{RESERVE_S} s before it, to report what it found).")
@signing_pushed
@json_option
@click.pass_context
def certify_cmd(
    click_ctx: click.Context,
    image: str | None,
    fleet_spec: Path | None,
    registry: str | None,
    poll_s: float,
    lock_path: Path | None,
    gpus: bool | None,
    out_dir: Path,
    store_url: str | None,
    timeout: int,
    signing_key: str | None,
    json_out: bool,
) -> None:
    """Certify IMAGE: on a GPU, `certified`; without one, `verified` with GPU checks skipped.

    With --fleet SPEC instead of IMAGE: one job per (image, fleet GPU model) through the team's scheduler, one
    certificate per model, and the promoted tag moved only when every model passed (exit 8 when one did not).
    """
    from ..app.certify import certify
    from ..engine.docker_engine import connect

    if (image is None) == (fleet_spec is None):
        raise click.UsageError("give IMAGE, or --fleet SPEC (one of them)")
    if fleet_spec is None and (registry or signing_key):
        raise click.UsageError("--registry and --signing-key go with --fleet")
    if fleet_spec is not None and (lock_path or gpus is not None):
        raise click.UsageError("--lock and --gpus are for one IMAGE: --fleet reads SPEC's lock, and each node "
                               "says whether it has a GPU")
    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    if fleet_spec is not None:
        _certify_fleet(c, engine, fleet_spec, registry, poll_s, out_dir, store_url, timeout, signing_key)
        return
    assert image is not None
    cert, paths = run(c, lambda: certify(engine, image, lock_path=lock_path, gpus=gpus, out_dir=out_dir,
                                         store_url=store_url, timeout=timeout))

    def human() -> None:
        table([[ch.name, ch.status, _short(ch.value), (ch.message or "")[:70]] for ch in cert.checks],
              ["CHECK", "STATUS", "VALUE", "MESSAGE"])
        for reason in cert.reasons:
            click.echo(f"  reason: {reason}", err=True)
        where = (f"on {cert.gpu_model} (driver {cert.driver})" if cert.gpu_count else
                 "without a GPU (GPU checks skipped)")
        click.echo(f"{image}: {cert.status} {where}; reports in {out_dir}")

    emit(c, {"certificate": cert.to_json(), "reports": {k: str(v) for k, v in paths.items()}}, human)
    if cert.status == "failed":
        sys.exit(8)


def _certify_fleet(c: Ctx, engine: DockerEngine, spec: Path, registry: str | None, poll_s: float, out_dir: Path,
                   store_url: str | None, timeout: int, signing_key: str | None) -> None:
    from ..app.fleet import certify_fleet
    from ..trust.keys import load_signing_key

    key = run(c, lambda: load_signing_key(signing_key))  # a bad key fails before any job
    result = run(c, lambda: certify_fleet(spec, engine, store_url=store_url, out_dir=out_dir, registry=registry,
                                          timeout=timeout, poll_s=poll_s, progress=c.progress, signing_key=key))

    def human() -> None:
        rows = []
        for image in result.images:
            for cert in image.certificates:
                d = cert.dispatch
                rows.append([image.name, d.fleet_model if d else cert.gpu_model, cert.status,
                             (d.node or "-") if d else "-", (d.state or "-") if d else "-",
                             _secs(d.queue_s) if d else "-", _secs(d.run_s) if d else "-",
                             "yes" if d and d.gpu_seen else "no GPU"])
        table(rows, ["IMAGE", "MODEL", "STATUS", "NODE", "STATE", "QUEUED", "RAN", "GPU"])
        for image in result.images:
            errors = [image.publish_error] if image.publish_error else []
            for line in [*image.gate.reasons, *image.gate.notes, *errors]:
                click.echo(f"  {image.name}: {line}", err=True)
            moved = ", ".join(image.promoted) if image.promoted else "not promoted"
            click.echo(f"{image.name}: {moved}")
        click.echo(f"fleet certification {'passed' if result.passed else 'failed'} in {result.seconds:.1f}s; "
                   f"reports in {out_dir}")

    emit(c, result.to_json(), human)
    if not result.passed:
        sys.exit(8)


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}s"


@click.command("nightly")
@click.argument("spec", type=SPEC)
@click.option("--registry", type=REGISTRY, default=None, help="Team registry to push to (host[:port][/path]).")
@locked_option
@click.option(
    "--gpus/--no-gpus", default=None, help="Certify on GPUs (default: when the engine has the NVIDIA runtime)."
)
@click.option(
    "--threshold", default=0.10, show_default=True, help="Regression: a probe dropping more than this fraction."
)
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@click.option("--reports", "reports_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True)
@click.option("--out", "out_root", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, metavar="DIR",
              help="Where dockerfiles/ and compose/ are written (as for render and build).")
@builder_option
@click.option("--refresh-catalog", is_flag=True,
              help="First read new PyTorch, JAX and TensorFlow releases from the index: applied to "
                   "$ENVKIT_CATALOG (a team copy), else proposed as a diff beside the reports.")
@refresh_framework_option("--refresh-framework")
@click.option("--gc", "gc", is_flag=True,
              help="Then reclaim this runner's disk as `envkit gc --team TEAM --keep N` does, never removing the "
                   "builds of the lock just run; also once during the run when a build fills the engine's disk, "
                   "and then try that build again (with BuildKit, pruning too the build cache records "
                   "this run has not used).")
@click.option(
    "--keep",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="With --gc: builds to keep per image, newest first.",
)
@click.option("--build-cache", "cache_hours", type=click.IntRange(min=0), default=None, metavar="HOURS",
              help="With --gc: the gc after the run also prunes BuildKit's build cache records not used in the last "
                   "HOURS hours, as `envkit gc --build-cache HOURS` does (engine-wide). Without it that gc leaves "
                   "the cache for the next rebuild, and only a disk-full reclaim prunes it.")
@click.option("--dispatch", "dispatch", is_flag=True,
              help="Certify the images on every fleet GPU model through the scheduler SPEC's dispatch: section names "
                   "(as `certify --fleet` does) instead of on this runner, and promote only where the fleet passed.")
@click.option("--reproducible", is_flag=True,
              help="Build as `envkit build --reproducible` does, and check each image's environment layers against "
                   "the lock's record (<lock stem>.layers.json): an image whose layers differ fails (exit 18); a "
                   "run that re-resolves writes the record of the lock it writes. Needs a local engine.")
@signing_pushed
@json_option
@click.pass_context
def nightly_cmd(
    click_ctx: click.Context,
    spec: Path,
    registry: str | None,
    locked: bool,
    gpus: bool | None,
    threshold: float,
    store_url: str | None,
    reports_dir: Path,
    out_root: Path,
    builder: str,
    refresh_catalog: bool,
    frameworks: tuple[str, ...],
    gc: bool,
    keep: int,
    cache_hours: int | None,
    dispatch: bool,
    reproducible: bool,
    signing_key: str | None,
    json_out: bool,
) -> None:
    """Re-resolve, rebuild what changed, certify, promote and remember.

    Exit codes: 0 passed, 10 nothing to do, 11 build failure, 12 certification failure (with --dispatch: a
    fleet gate that did not pass), 13 regression, 14 publish failure, 15 another nightly of this team is running
    against the same store, 16 (--dispatch) the scheduler refused a job or could not be asked (the run stays
    unfinished: the next one re-attaches to what was submitted), 18 (--reproducible) an image's environment layers
    differ from the lock's record; 2-9 are input, index, resolution, lock, engine and store errors.
    """
    from ..app.nightly import run_nightly
    from ..app.nightly_fleet import FleetStep
    from ..app.nightly_gc import NightlyGc
    from ..engine.docker_engine import connect
    from ..store.history import Store

    _check_nightly_options(click_ctx, locked=locked, refresh_catalog=refresh_catalog, frameworks=frameworks, gc=gc,
                           cache_hours=cache_hours)
    if dispatch and gpus is not None:
        raise click.UsageError("--gpus is for certifying on this runner: with --dispatch each node says whether it "
                               "has a GPU")
    from ..trust.keys import load_signing_key

    c = _ctx(click_ctx, json_out)
    key = run(c, lambda: load_signing_key(signing_key))  # a bad key fails before any build
    engine = run(c, connect)
    store = run(c, lambda: Store.open(store_url))
    # with --gc, also when a build fills the engine's disk: then the build is tried once more (app/nightly_gc.py)
    sweeper = NightlyGc(engine, spec, store_url, keep, cache_hours, builder, c.progress) if gc else None
    with store:
        try:
            result = run(c, lambda: run_nightly(spec, engine, store, out_root=out_root, reports_dir=reports_dir,
                                                registry=registry, locked=locked, gpus=gpus, threshold=threshold,
                                                builder=builder, refresh_catalog=refresh_catalog,
                                                refresh_frameworks=frameworks,
                                                reclaim=sweeper.reclaim if sweeper else None,
                                                dispatch=FleetStep() if dispatch else None,
                                                reproducible=reproducible, progress=c.progress,
                                                signing_key=key))
        except SystemExit as exc:  # the run failed (exit 2-9, its error already printed): --gc keeps the disk in
            # check still, keeping the builds of the lock on disk; never while another nightly of the team runs (15)
            if sweeper is not None and exc.code != RunInProgressError.exit_code:
                sweeper.after_failure()
            raise
    doc = result.to_json()
    if sweeper is not None:
        doc["gc"] = sweeper.after(result)
    emit(c, doc, lambda: _nightly_table(result))
    sys.exit(result.exit_code)


def _check_nightly_options(click_ctx: click.Context, *, locked: bool, refresh_catalog: bool,
                           frameworks: tuple[str, ...], gc: bool, cache_hours: int | None) -> None:
    """Refuse the options that say nothing without another one (or contradict one)."""
    if locked and refresh_catalog:
        raise click.UsageError("--refresh-catalog re-resolves the spec, so it cannot be combined with --locked: "
                               "refresh on the CPU build job; the GPU job certifies its lock with --locked")
    if frameworks and not refresh_catalog:
        raise click.UsageError("--refresh-framework chooses what --refresh-catalog reads; give --refresh-catalog too")
    if click_ctx.get_parameter_source("keep") is not ParameterSource.DEFAULT and not gc:
        raise click.UsageError("--keep says what --gc keeps; give --gc too")
    if cache_hours is not None and not gc:
        raise click.UsageError("--build-cache says what the gc after the run prunes; give --gc too")


def _nightly_table(result: NightlyResult) -> None:
    from ..app.nightly import EXIT_NAMES

    rows = [[r.name, r.tag, r.build, r.status, ", ".join(r.pushed) or "-", "; ".join(r.changes)[:50] or "-"]
            for r in result.images]
    table(rows, ["IMAGE", "TAG", "BUILD", "STATUS", "PUSHED", "CHANGES"])
    if result.fleet:  # --dispatch: a row per (image, fleet GPU model)
        table([[i["image"], m["model"], m["status"], (m["dispatch"] or {}).get("node") or "-",
                (m["dispatch"] or {}).get("state") or "-"] for i in result.fleet["images"] for m in i["models"]],
              ["IMAGE", "MODEL", "STATUS", "NODE", "STATE"])
    for r in result.images:
        for line in r.notes + r.reasons + r.regressions + ([r.publish_error] if r.publish_error else []):
            click.echo(f"  {r.name}: {line}", err=True)
        for moved in (r.layers_built, r.layers_pushed):
            if moved:
                click.echo(f"  {r.name}: {moved['summary']}", err=True)
        if r.layers and r.layers["check"] != "failed":  # --reproducible (a failure is among the reasons)
            click.echo(f"  {r.name}: layers {r.layers['check']}: {r.layers['message']}", err=True)
    if result.catalog and result.catalog["changed"]:
        done = ("applied to " + ", ".join(result.catalog["files"]) if result.catalog["applied"]
                else "proposed, not applied")
        click.echo(f"catalog refresh: {done}; diff in {result.catalog['diff']}", err=True)
    click.echo(f"nightly run {result.run_id}: {EXIT_NAMES[result.exit_code]} in {result.seconds:.1f}s")
