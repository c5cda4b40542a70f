"""The command line: parse, call one typed function, format its result.

This is the only module that prints or exits. Human output goes to the terminal (progress
on stderr); ``--json`` prints one JSON document on stdout for pipelines.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import click

from . import __version__
from .engine import BuildEvent
from .errors import EnvkitError

SPEC = click.Path(exists=False, dir_okay=False, path_type=Path)
BUILDERS = ("classic", "buildkit")  # envkit.render.BUILDERS (not imported here: the CLI starts without jinja2)


class Ctx:
    def __init__(self, json_out: bool, debug: bool, verbose: bool):
        self.json = json_out
        self.debug = debug
        self.verbose = verbose

    def progress(self, message: str) -> None:
        """Progress goes to stderr in both modes, so --json keeps stdout clean."""
        click.echo(f"envkit: {message}", err=True)


def json_option(f):
    return click.option("--json", "json_out", is_flag=True, help="Print one JSON document for machines.")(f)


def builder_option(f):
    return click.option(
        "--builder", type=click.Choice(BUILDERS), default="classic", show_default=True,
        help="classic: the engine's API; buildkit: DOCKER_BUILDKIT=1 /usr/bin/docker build "
             "(pip cache mounts, the CA as a build secret; needs Debian's docker.io CLI).")(f)


STORE_HELP = ("History store: a SQLite path, sqlite:///path or postgresql://[user@]host[:port]/db "
              "(default: $ENVKIT_STORE, else .envkit/history.sqlite; passwords via PGPASSWORD or ~/.pgpass).")


def run(ctx_obj: Ctx, fn):
    """Run ``fn``; turn envkit errors into a message and an exit code."""
    try:
        return fn()
    except EnvkitError as exc:
        if ctx_obj.debug:
            traceback.print_exc()
        if ctx_obj.json:
            click.echo(json.dumps(exc.to_json(), indent=2))
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)


def emit(ctx_obj: Ctx, doc, human) -> None:
    if ctx_obj.json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        human()


def table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


@click.group()
@click.version_option(__version__, prog_name="envkit")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option("-v", "--verbose", is_flag=True, help="Show every build log line.")
@click.pass_context
def main(ctx, debug, verbose):
    """Resolve, render, build and verify GPU software stacks."""
    ctx.obj = {"debug": debug, "verbose": verbose}


def _ctx(click_ctx, json_out) -> Ctx:
    return Ctx(json_out, click_ctx.obj["debug"], click_ctx.obj["verbose"])


def _image_row(i) -> list[str]:
    return [i.name, f"{i.framework} {i.framework_version}", i.variant, i.cuda or "-", i.cudnn or "-",
            i.nccl or "-", i.python, i.driver_floor or "-", i.hash8]


IMAGE_HEADER = ["IMAGE", "FRAMEWORK", "VARIANT", "CUDA", "CUDNN", "NCCL", "PYTHON", "DRIVER>=", "LOCK"]


@main.command("resolve")
@click.argument("spec", type=SPEC)
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path), help="Lock file (default: SPEC with .lock).")
@json_option
@click.pass_context
def resolve_cmd(click_ctx, spec, lock_path, json_out):
    """Resolve SPEC to exact pins and write its lock."""
    from .pipeline import resolve_spec

    c = _ctx(click_ctx, json_out)
    r = run(c, lambda: resolve_spec(spec, lock_path=lock_path, progress=c.progress))
    emit(c, {"lock": str(r.lock_path), "images": [i.model_dump(mode="json", exclude={"packages"}) for i in r.lock.images]},
         lambda: (table([_image_row(i) for i in r.lock.images], IMAGE_HEADER), click.echo(f"wrote {r.lock_path}")))


@main.command("lock")
@click.argument("spec", type=SPEC)
@click.option("--check", is_flag=True, required=True, help="Fail when the spec or catalog drifted from the lock.")
@click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def lock_cmd(click_ctx, spec, check, lock_path, json_out):
    """Check that SPEC's lock is current."""
    from .pipeline import check_lock

    c = _ctx(click_ctx, json_out)
    reasons = run(c, lambda: check_lock(spec, lock_path))
    emit(c, {"current": not reasons, "reasons": reasons},
         lambda: click.echo("lock is current" if not reasons else "lock is stale: " + "; ".join(reasons)))
    if reasons:
        if not c.json:
            click.echo(f"  hint: run `envkit resolve {spec}`", err=True)
        sys.exit(5)


@main.command("explain")
@click.argument("spec", type=SPEC)
@click.argument("image")
@json_option
@click.pass_context
def explain_cmd(click_ctx, spec, image, json_out):
    """Show why IMAGE of SPEC resolves as it does (or why it cannot)."""
    from .pipeline import explain

    c = _ctx(click_ctx, json_out)
    p = run(c, lambda: explain(spec, image))
    ch = p.chosen

    def human():
        click.echo(f"{image}: {ch.label}, CUDA {ch.cuda}, cuDNN {ch.cudnn}, NCCL {ch.nccl or '-'}, "
                   f"Python {p.python}, driver >= {p.driver_floor} ({p.require_cuda})")
        for d in p.decisions:
            click.echo(f"- {d.topic}: {d.choice}\n    because {d.reason}")
            for rej in d.rejected:
                click.echo(f"    rejected {rej}")

    emit(c, {"image": image, "framework": ch.framework, "version": ch.version, "variant": ch.variant,
             "cuda": ch.cuda, "python": p.python, "driver_floor": p.driver_floor, "require_cuda": p.require_cuda,
             "index": ch.index, "decisions": [d.model_dump() for d in p.decisions]}, human)


@main.command("render")
@click.argument("spec", type=SPEC)
@click.option("--out", "out_root", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where dockerfiles/ and compose/ are written.")
@click.option("--image", "images", multiple=True, help="Only this image (repeatable).")
@json_option
@click.pass_context
def render_cmd(click_ctx, spec, out_root, images, json_out):
    """Write build contexts (dockerfiles/<image>/) and compose/<team>.yaml."""
    from .pipeline import render_spec

    c = _ctx(click_ctx, json_out)
    _, rendered = run(c, lambda: render_spec(spec, out_root, only=list(images) or None, progress=c.progress))
    doc = {"contexts": {k: str(v) for k, v in rendered.contexts.items()}, "compose": str(rendered.compose)}
    emit(c, doc, lambda: [click.echo(f"wrote {p}") for p in [*rendered.contexts.values(), rendered.compose]])


@main.command("build")
@click.argument("spec", type=SPEC)
@click.option("--image", "images", multiple=True, help="Only this image (repeatable).")
@click.option("--out", "out_root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True)
@click.option("--no-verify", is_flag=True, help="Build only; skip the in-image verification.")
@builder_option
@json_option
@click.pass_context
def build_cmd(click_ctx, spec, images, out_root, no_verify, builder, json_out):
    """Resolve, render, build and verify SPEC's images."""
    from .engine.docker_engine import connect
    from .pipeline import build_spec

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    resolved, outcomes = run(c, lambda: build_spec(spec, out_root, engine, only=list(images) or None,
                                                   verify=not no_verify, builder=builder,
                                                   progress=_build_progress(c)))
    doc = {"team": resolved.lock.team, "lock": str(resolved.lock_path), "lock_reused": resolved.reused,
           "builder": builder, "images": [o.to_json() for o in outcomes]}

    def human():
        _outcomes_table(outcomes)
        if all(o.action == "skipped" for o in outcomes):
            click.echo("nothing to rebuild: every image matches its lock")

    emit(c, doc, human)
    if any(o.status == "failed" for o in outcomes):
        sys.exit(8)


def _build_progress(c: Ctx):
    """Build steps on stderr; every build log line too with -v."""

    def progress(name: str, event):
        if isinstance(event, BuildEvent):
            if event.kind == "step":
                c.progress(f"[{name}] step {event.step}/{event.total}: {event.text[:100]}")
            elif event.kind == "log" and c.verbose:
                click.echo(f"[{name}]   {event.text}", err=True)
        else:
            c.progress(f"[{name}] {event}" if name != "*" else str(event))

    return progress


def _outcomes_table(outcomes) -> None:
    rows = [[o.name, o.tag, o.action, f"{o.size / 2**30:.2f} GiB", f"{o.seconds:.0f}s", o.status] for o in outcomes]
    table(rows, ["IMAGE", "TAG", "ACTION", "SIZE", "TIME", "STATUS"])
    for o in outcomes:
        for m in (o.verification.mismatches if o.verification else []):
            click.echo(f"  {o.name}: {m}", err=True)


@main.group("bundle")
def bundle_group():
    """Offline bundles: everything one image's rebuild needs, built later with no network."""


@bundle_group.command("make")
@click.argument("spec", type=SPEC)
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="The bundle directory (made beside it, renamed into place when complete; an existing "
                   "bundle there is replaced).")
@click.option("--image", "image", default=None, help="The image to bundle (needed when SPEC has several).")
@json_option
@click.pass_context
def bundle_make_cmd(click_ctx, spec, out_dir, image, json_out):
    """Write one image's offline bundle into --out (needs the network).

    Resolves SPEC (or reuses its lock), then writes the lock, hash-checked wheels, the base image
    archive, the Debian packages and a manifest. Build it later with `envkit bundle build DIR`.
    """
    from .engine.docker_engine import connect
    from .pipeline import bundle_spec

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    b = run(c, lambda: bundle_spec(spec, out_dir, engine, image=image, progress=c.progress))
    doc = b.to_json()
    emit(c, doc, lambda: click.echo(
        f"wrote {b.path}: {doc['image']} ({doc['tag']}), {doc['wheels']} wheel(s), base {doc['base']['ref']}, "
        f"{b.size / 2**30:.2f} GiB\nbuild it with no network: envkit bundle build {b.path}"))


@bundle_group.command("build")
@click.argument("bundle_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--no-verify", is_flag=True, help="Build only; skip the in-image verification.")
@click.option("--no-cache", is_flag=True, help="Run every step again (shows the build needs no network).")
@builder_option
@json_option
@click.pass_context
def bundle_build_cmd(click_ctx, bundle_dir, no_verify, no_cache, builder, json_out):
    """Build the image of the bundle in DIR with no network.

    Every file is checked against the manifest first; the base is loaded from the bundle.
    """
    from .bundle import build_from_bundle
    from .engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)

    def progress(text: str) -> None:
        if text.startswith("step "):
            c.progress(text[:120])
        elif c.verbose:
            click.echo(f"  {text}", err=True)

    engine = run(c, connect)
    c.progress(f"building from {bundle_dir} with the {builder} builder, no network inside the build")
    outcome = run(c, lambda: build_from_bundle(engine, bundle_dir, builder=builder, verify=not no_verify,
                                               no_cache=no_cache, progress=progress))
    emit(c, {"bundle": str(bundle_dir), "builder": builder, "images": [outcome.to_json()]},
         lambda: _outcomes_table([outcome]))
    if outcome.status == "failed":
        sys.exit(8)


@main.command("verify")
@click.argument("image")
@click.option("--lock", "lock_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also require the image to match this lock.")
@json_option
@click.pass_context
def verify_cmd(click_ctx, image, lock_path, json_out):
    """Check inside IMAGE that its versions match its pins (no GPU needed)."""
    from .engine.docker_engine import connect
    from .pipeline import verify_image

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    v = run(c, lambda: verify_image(engine, image, lock_path=lock_path))

    def human():
        table([[ch["name"], ch["status"], _short(ch.get("value")), ch.get("message", "")[:70]] for ch in v.checks],
              ["CHECK", "STATUS", "VALUE", "MESSAGE"])
        click.echo(f"{image}: {v.status}")

    emit(c, v.to_json(), human)
    if v.status == "failed":
        sys.exit(8)


def _short(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


@main.command("doctor")
@click.option("--store", "store_url", default=None, help=STORE_HELP)
@json_option
@click.pass_context
def doctor_cmd(click_ctx, store_url, json_out):
    """Is this host ready? Engine, NVIDIA runtime, GPUs and driver, debootstrap, CA bundle,
    BuildKit, the catalog in use and the history store (read, never created)."""
    from .doctor import diagnose
    from .engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)
    findings = run(c, lambda: diagnose(connect, store_url))
    emit(c, {"findings": [f.to_json() for f in findings]},
         lambda: table([[f.name, f.status, f.value, f.hint] for f in findings], ["CHECK", "STATUS", "VALUE", "HINT"]))
    if any(f.status == "fail" for f in findings):
        sys.exit(6)


@main.command("certify")
@click.argument("image")
@click.option("--lock", "lock_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Expect what this lock says (default: the image's own pin labels).")
@click.option("--gpus/--no-gpus", default=None, help="Certify on the GPUs (default: when the engine has the NVIDIA runtime).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True, help="Where the certificate and reports are written.")
@click.option("--store", "store_url", default=None, help=STORE_HELP)
@click.option("--timeout", default=600, show_default=True, help="Hard limit for the in-image run, seconds.")
@json_option
@click.pass_context
def certify_cmd(click_ctx, image, lock_path, gpus, out_dir, store_url, timeout, json_out):
    """Certify IMAGE: on a GPU, `certified`; without one, `verified` with GPU checks skipped."""
    from .engine.docker_engine import connect
    from .pipeline import certify

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    cert, paths = run(c, lambda: certify(engine, image, lock_path=lock_path, gpus=gpus, out_dir=out_dir,
                                         store_url=store_url, timeout=timeout))

    def human():
        table([[ch.name, ch.status, _short(ch.value), (ch.message or "")[:70]] for ch in cert.checks],
              ["CHECK", "STATUS", "VALUE", "MESSAGE"])
        for reason in cert.reasons:
            click.echo(f"  reason: {reason}", err=True)
        click.echo(f"{image}: {cert.status} on {cert.gpu_model} (driver {cert.driver}); reports in {out_dir}")

    emit(c, {"certificate": cert.to_json(), "reports": {k: str(v) for k, v in paths.items()}}, human)
    if cert.status == "failed":
        sys.exit(8)


@main.group("catalog")
def catalog_group():
    """The compatibility catalog."""


@catalog_group.command("refresh")
@click.option("--apply", "apply_", is_flag=True, help="Write the proposed rows into the catalog.")
@json_option
@click.pass_context
def catalog_refresh_cmd(click_ctx, apply_, json_out):
    """Read new PyTorch releases from the package index and propose catalog rows (a reviewable diff)."""
    from .pipeline import refresh_catalog

    c = _ctx(click_ctx, json_out)
    summary = run(c, lambda: refresh_catalog(apply=apply_, progress=c.progress))

    def human():
        for note in summary["notes"] + summary["warnings"]:
            click.echo(f"note: {note}", err=True)
        click.echo(summary["diff"] or "the catalog is up to date with the index")
        if summary["changed"] and not apply_:
            click.echo("review the diff, then run `envkit catalog refresh --apply`", err=True)

    emit(c, summary, human)


@catalog_group.command("export")
@click.argument("dest", type=click.Path(path_type=Path))
@json_option
@click.pass_context
def catalog_export_cmd(click_ctx, dest, json_out):
    """Copy the catalog into DEST, for a team to keep, review and refresh (then set ENVKIT_CATALOG=DEST)."""
    from .catalog import CATALOG_ENV, export_catalog

    c = _ctx(click_ctx, json_out)
    path = run(c, lambda: export_catalog(dest))
    emit(c, {"catalog": str(path), "env": {CATALOG_ENV: str(path.resolve())}},
         lambda: click.echo(f"wrote {path}; use it with: export {CATALOG_ENV}={path.resolve()}"))


@main.command("nightly")
@click.argument("spec", type=SPEC)
@click.option("--registry", default=None, help="Team registry to push to (host[:port][/path]).")
@click.option("--locked", is_flag=True, help="Use the lock as it is (e.g. on a GPU runner after a CPU build job).")
@click.option("--gpus/--no-gpus", default=None, help="Certify on GPUs (default: when the engine has the NVIDIA runtime).")
@click.option("--threshold", default=0.10, show_default=True, help="Regression: a probe dropping more than this fraction.")
@click.option("--store", "store_url", default=None, help=STORE_HELP)
@click.option("--reports", "reports_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("reports"),
              show_default=True)
@click.option("--out", "out_root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True)
@builder_option
@click.option("--refresh-catalog", is_flag=True,
              help="First read new torch releases from the index: applied to $ENVKIT_CATALOG (a team copy), "
                   "else proposed as a diff beside the reports.")
@json_option
@click.pass_context
def nightly_cmd(click_ctx, spec, registry, locked, gpus, threshold, store_url, reports_dir, out_root, builder,
                refresh_catalog, json_out):
    """Re-resolve, rebuild what changed, certify, promote and remember.

    Exit codes: 0 passed, 10 nothing to do, 11 build failure, 12 certification failure,
    13 regression, 14 publish failure, 15 another nightly of this team is running against the
    same store; 2-9 are input, index, resolution, lock, engine and store errors.
    """
    from .engine.docker_engine import connect
    from .nightly import run_nightly
    from .store import Store

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    store = run(c, lambda: Store.open(store_url))
    with store:
        result = run(c, lambda: run_nightly(spec, engine, store, out_root=out_root, reports_dir=reports_dir,
                                            registry=registry, locked=locked, gpus=gpus, threshold=threshold,
                                            builder=builder, refresh_catalog=refresh_catalog,
                                            progress=c.progress))

    def human():
        rows = [[r.name, r.tag, r.build, r.status, ", ".join(r.pushed) or "-", "; ".join(r.changes)[:50] or "-"]
                for r in result.images]
        table(rows, ["IMAGE", "TAG", "BUILD", "STATUS", "PUSHED", "CHANGES"])
        for r in result.images:
            for line in r.reasons + r.regressions + ([r.publish_error] if r.publish_error else []):
                click.echo(f"  {r.name}: {line}", err=True)
        from .nightly import EXIT_NAMES

        if result.catalog and result.catalog["changed"]:
            done = "applied to " + result.catalog["file"] if result.catalog["applied"] else "proposed, not applied"
            click.echo(f"catalog refresh: {done}; diff in {result.catalog['diff']}", err=True)
        click.echo(f"nightly run {result.run_id}: {EXIT_NAMES[result.exit_code]} in {result.seconds:.1f}s")

    emit(c, result.to_json(), human)
    sys.exit(result.exit_code)


def _engine_for_registry(c: Ctx, needed: bool):
    """The engine (its insecure-registries setting decides http vs https), or None when reading a
    registry needs no engine and none runs here."""
    from .engine.docker_engine import connect

    if needed:
        return run(c, connect)
    try:
        return connect()
    except EnvkitError:
        c.progress("no container engine here: reading the registry directly (plain http only to 127.0.0.0/8)")
        return None


@main.command("ls")
@click.option("--store", "store_url", default=None, help=STORE_HELP)
@click.option("--registry", default=None, metavar="HOST[:PORT][/PATH]",
              help="List the images in this registry (under PATH) with their certificate artifacts, joined with "
                   "the store's rows for the same images; read over the registry's HTTP API, nothing is pulled.")
@json_option
@click.pass_context
def ls_cmd(click_ctx, store_url, registry, json_out):
    """Images envkit built, their stack and certification per GPU model."""
    from .pipeline import list_images, list_registry_images

    c = _ctx(click_ctx, json_out)
    if registry is None:
        rows = run(c, lambda: list_images(store_url))
        emit(c, {"images": rows}, lambda: table(
            [[r["tag"], r["stack"], ", ".join(f"{g}: {s}" for g, s in r["certification"].items()) or "-", r["date"]]
             for r in rows], ["IMAGE", "STACK", "CERTIFICATION", "DATE"]))
        return
    engine = _engine_for_registry(c, needed=False)
    doc = run(c, lambda: list_registry_images(engine, registry, store_url))

    def human():
        table([[r["tag"], "yes" if r["certified_tag"] else "-",
                ", ".join(f"{g}: {s}" for g, s in r["certification"].items()) or "-", r["date"] or "-",
                "+".join(r["sources"])] for r in doc["images"]],
              ["IMAGE", ":CERTIFIED", "CERTIFICATION", "DATE", "SOURCE"])
        if doc["skipped"]:
            click.echo(f"({len(doc['skipped'])} other reference(s) skipped: base mirrors and images envkit did not "
                       f"build; --json lists them)", err=True)

    emit(c, doc, human)


@main.command("show")
@click.argument("image")
@click.option("--store", "store_url", default=None, help=STORE_HELP)
@json_option
@click.pass_context
def show_cmd(click_ctx, image, store_url, json_out):
    """An image's pins, lock hash and certificates.

    IMAGE in the local engine: from the engine and the store. IMAGE as a registry reference
    (host[:port]/repository:tag or ...@sha256:...) that is not local: read from the registry
    without pulling (manifest, labels, the certificate artifacts, whether :certified points at it).
    """
    from .pipeline import show_image
    from .remote import parse_ref

    c = _ctx(click_ctx, json_out)
    remote = run(c, lambda: parse_ref(image))
    engine = _engine_for_registry(c, needed=remote is None)
    doc = run(c, lambda: show_image(engine, image, store_url))

    def human():
        reg = doc.get("registry") or {}
        if reg.get("digest"):
            click.echo(f"{'registry':32} {reg['pinned']}")
            click.echo(f"{'compressed size':32} {reg['compressed_size'] / 2**20:.1f} MiB in {reg['layers']} layer(s)")
            click.echo(f"{'tags':32} {', '.join(reg['tags']) or '-'}")
            where = "this image" if reg["certified_tag"] else (reg["certified_digest"] or "nothing (no such tag)")
            click.echo(f"{':certified points at':32} {where}")
        elif reg.get("error"):
            click.echo(f"warning: the registry view failed: {reg['error']}", err=True)
        for k, v in doc["labels"].items():
            click.echo(f"{k:32} {v}")
        for cert in doc["certificates"]:
            click.echo(f"certificate: {cert['status']} on {cert['gpu_model']} driver {cert['driver']} "
                       f"({cert['created_at']}, {cert.get('source', 'store')})")
            for reason in cert["reasons"]:
                click.echo(f"  reason: {reason}")
        if not doc["certificates"]:
            click.echo("certificate: none")

    emit(c, doc, human)


@main.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("image")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--gpus/--no-gpus", default=None, help="Default: when the engine has the NVIDIA runtime.")
@click.option("--shm-size", default="16g", show_default=True)
@click.pass_context
def run_cmd(click_ctx, image, command, gpus, shm_size):
    """Run COMMAND in IMAGE with the GPU, shared-memory and ulimit flags it needs."""
    from .engine.docker_engine import connect
    from .pipeline import run_in_image

    c = _ctx(click_ctx, False)
    engine = run(c, connect)
    result = run(c, lambda: run_in_image(engine, image, list(command), gpus=gpus, shm_size=shm_size))
    click.echo(result.stdout, nl=False)
    click.echo(result.stderr, nl=False, err=True)
    sys.exit(result.exit_code)


@main.command("schema")
def schema_cmd():
    """Print the JSON Schema of team.yaml."""
    from .spec import json_schema

    click.echo(json.dumps(json_schema(), indent=2, sort_keys=True))


if __name__ == "__main__":  # pragma: no cover
    main()
