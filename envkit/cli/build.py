"""Commands for whoever builds a team's stacks: resolve, lock, explain, render, build, verify (bundles: ``bundle``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..engine.protocol import BUILDERS
from ..lock import PIP_TOPIC, named_extras
from ..resolve.binaries import CPU_TOPIC, explained
from .common import (
    IMAGE,
    SPEC,
    STORE,
    STORE_HELP,
    _ctx,
    _short,
    builder_option,
    emit,
    json_option,
    locked_option,
    run,
    table,
)
from .flags import lock_option
from .progress import BuildView

if TYPE_CHECKING:
    from typing import Iterable

    from ..images.builder import Outcome
    from ..lock import LockedImage


def _image_row(i: LockedImage) -> list[str]:
    return [i.name, f"{i.framework} {i.framework_version}", i.variant, i.cuda or "-", i.cudnn or "-",
            i.nccl or "-", i.python, i.driver_floor or "-", i.hash8]


IMAGE_HEADER = ["IMAGE", "FRAMEWORK", "VARIANT", "CUDA", "CUDNN", "NCCL", "PYTHON", "DRIVER>=", "LOCK"]

@click.command("resolve")
@click.argument("spec", type=SPEC)
@lock_option
@json_option
@click.pass_context
def resolve_cmd(click_ctx: click.Context, spec: Path, lock_path: Path | None, json_out: bool) -> None:
    """Resolve SPEC to exact pins and write its lock."""
    from ..app.resolve import resolve_spec

    c = _ctx(click_ctx, json_out)
    r = run(c, lambda: resolve_spec(spec, lock_path=lock_path, progress=c.progress))

    def human() -> None:
        table([_image_row(i) for i in r.lock.images], IMAGE_HEADER)
        for image in r.lock.images:
            _echo_extras(image)
        for name, changes in (r.moved or {}).items():
            if changes:
                click.echo(f"{name} moved: " + "; ".join(changes))
        click.echo(f"wrote {r.lock_path}")

    emit(c, {"lock": str(r.lock_path),
             "images": [i.model_dump(mode="json", exclude={"packages"}) | {"extras": named_extras(i)}
                        for i in r.lock.images],
             "moved": r.moved}, human)


def _echo_extras(image: LockedImage, indent: str = "") -> None:
    """One line per pip: package of ``image`` (version, and a held-back one's reason on its own line)."""
    extras = named_extras(image)
    if not extras:
        return
    click.echo(f"{indent}{image.name} pip: " + ", ".join(
        f"{e['name']} {e['version']}" + (" (HELD BACK)" if e["held_back"] else "") for e in extras))
    for e in extras:
        if e["held_back"]:
            click.echo(f"{indent}  {e['name']} {e['version']}: {e['reason']}")
    for d in image.decisions:  # a CPU-only accelerator library in a GPU image (resolve/linked.py)
        if d.topic.startswith(CPU_TOPIC):
            click.echo(f"{indent}  {d.reason}")


@click.command("lock")
@click.argument("spec", type=SPEC)
@click.option("--check", is_flag=True,
              help="Only check that the lock is current (exit 5 when the spec or the catalog changed since it was "
                   "written); write nothing.")
@lock_option
@json_option
@click.pass_context
def lock_cmd(click_ctx: click.Context, spec: Path, check: bool, lock_path: Path | None, json_out: bool) -> None:
    """Write SPEC's lock when it is missing or stale (as uv, poetry and npm lock); keep a current one as it is.

    With --check, only check it: exit 5 when it is stale, writing nothing (for CI)."""
    from ..app.resolve import check_lock, resolve_spec

    c = _ctx(click_ctx, json_out)
    if not check:
        r = run(c, lambda: resolve_spec(spec, lock_path=lock_path, reuse=True, progress=c.progress))
        emit(c, {"lock": str(r.lock_path), "written": not r.reused, "current": True},
             lambda: click.echo(f"{r.lock_path} is current" if r.reused else f"wrote {r.lock_path}"))
        return
    reasons = run(c, lambda: check_lock(spec, lock_path))
    emit(c, {"current": not reasons, "reasons": reasons},
         lambda: click.echo("lock is current" if not reasons else "lock is stale: " + "; ".join(reasons)))
    if reasons:
        if not c.json:
            click.echo(f"  hint: run `envkit lock {spec}` to write it again", err=True)
        sys.exit(5)


@click.command("explain")
@click.argument("spec", type=SPEC)
@click.argument("image")
@lock_option
@json_option
@click.pass_context
def explain_cmd(click_ctx: click.Context, spec: Path, image: str, lock_path: Path | None, json_out: bool) -> None:
    """Show why IMAGE of SPEC resolves as it does (or why it cannot)."""
    from ..app.resolve import explain, locked_image

    c = _ctx(click_ctx, json_out)
    p = run(c, lambda: explain(spec, image))
    locked = run(c, lambda: locked_image(spec, image, lock_path))
    ch = p.chosen

    def human() -> None:
        if ch.exact_pins:  # the wheel pins its CUDA libraries: the catalog knows them
            libs = f"CUDA {ch.cuda}, cuDNN {ch.cudnn}, NCCL {ch.nccl or '-'}"
        else:  # ranges: the catalog holds their lower bounds; the closure picks at resolve (`envkit resolve`)
            def bound(v: str) -> str:  # a catalog range is a version (its lower bound) or a specifier
                return v if v[0] in "<>=!~" else f">= {v}"

            libs = ", ".join(f"{what} {bound(v)}" for what, v in (("CUDA", ch.cuda), ("cuDNN", ch.cudnn),
                                                                    ("NCCL", ch.nccl)) if v)
            libs += " (the closure picks the versions at resolve)"
        before = " (the fleet's pick, before its pip: packages)" if p.target.pip else ""
        click.echo(
            f"{image}{before}: {ch.label}, {libs}, Python {p.python}, driver >= {p.driver_floor} ({p.require_cuda})"
        )
        for d in p.decisions:
            click.echo(f"- {d.topic}: {d.choice}\n    because {d.reason}")
            for rej in d.rejected:
                click.echo(f"    rejected {rej}")
        if locked is not None:
            click.echo(f"{image} as locked (the lock is current), with its pip: packages: {locked.framework} "
                       f"{locked.framework_version} ({locked.variant})")
            for d in explained(locked):
                click.echo(f"- {d.topic}: {d.choice}\n    because {d.reason}")
        elif p.target.pip:
            click.echo(f"- pip: {', '.join(p.target.pip)}\n    chosen at resolve, in one solve with the framework "
                       "(which they may hold back); `envkit resolve` locks them and this command then shows why")

    emit(
        c,
        {
            "image": image,
            "framework": ch.framework,
            "version": ch.version,
            "variant": ch.variant,
            "cuda": ch.cuda,
            "cuda_pinned": "exact" if ch.exact_pins else "lower bound",
            "python": p.python,
            "driver_floor": p.driver_floor,
            "require_cuda": p.require_cuda,
            "index": ch.index,
            "decisions": [d.model_dump() for d in p.decisions],
            "locked": None
            if locked is None
            else {
                "framework": locked.framework,
                "version": locked.framework_version,
                "variant": locked.variant,
                "decisions": [d.model_dump() for d in explained(locked) if not d.topic.startswith(PIP_TOPIC)],
                "extras": named_extras(locked),
            },
        },
        human,
    )


@click.command("render")
@click.argument("spec", type=SPEC)
@click.option("--out", "out_root", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where dockerfiles/ and compose/ are written.")
@click.option("--image", "images", multiple=True, help="Only this image (repeatable).")
@click.option("--builder", type=click.Choice(BUILDERS), default="buildkit", show_default=True,
              help="The builder the contexts are for: buildkit (what `envkit build` builds wherever BuildKit can "
                   "build, as its --builder auto picks) or classic (the engine's API, `build --builder classic`). "
                   "`envkit build` writes the contexts it builds.")
@lock_option
@locked_option
@json_option
@click.pass_context
def render_cmd(click_ctx: click.Context, spec: Path, out_root: Path, images: tuple[str, ...], builder: str,
               lock_path: Path | None, locked: bool, json_out: bool) -> None:
    """Write build contexts (dockerfiles/<image>/) and compose/<team>.yaml from SPEC's lock.

    A missing or stale lock (the spec or the catalog changed) is re-resolved and written first, and said so;
    with --locked it fails instead."""
    from ..app.build import render_spec

    c = _ctx(click_ctx, json_out)
    resolved, rendered = run(c, lambda: render_spec(spec, out_root, only=list(images) or None, locked=locked,
                                                    lock_path=lock_path, progress=c.progress,
                                                    buildkit=builder == "buildkit"))
    doc = {"lock": str(resolved.lock_path), "lock_reused": resolved.reused, "builder": builder,
           "contexts": {k: str(v) for k, v in rendered.contexts.items()}, "compose": str(rendered.compose)}
    written = [*([] if resolved.reused else [f"{resolved.lock_path} (re-resolved)"]),
               *rendered.contexts.values(), rendered.compose]
    emit(c, doc, lambda: click.echo("\n".join(f"wrote {p}" for p in written)))


@click.command("build")
@click.argument("spec", type=SPEC)
@click.option("--image", "images", multiple=True, help="Only this image (repeatable).")
@click.option(
    "--out", "out_root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True
)
@click.option("--no-verify", is_flag=True, help="Build only; skip the in-image verification.")
@click.option("--store", "store_url", type=STORE, default=None,
              help="Record the builds (and their verification) in this history store, for `envkit ls`. " + STORE_HELP)
@click.option("--skip-space-check", is_flag=True,
              help="Build even when the engine's disk has less free than the lock's images need (estimated from the "
                   "lock's wheel sizes; refused otherwise, exit 17, before anything is written).")
@builder_option
@click.option("--reproducible", is_flag=True,
              help="The builder makes the OS stage; envkit installs each layer group with uv in a container of it "
                   "and writes the environment layers itself, so the same lock gives the same layer digests "
                   "(docs/images.md, \"Reproducible environment layers\"). Needs a local engine.")
@click.option("--no-cache", is_flag=True,
              help="Build every image again, even one whose lock and context match an image on the engine (kept "
                   "otherwise), running every step again (the builder's cache unused, the OS stage built again "
                   "rather than taken from the engine; with --reproducible no image's layers reused either). --json "
                   "says so: \"no_cache\": true, and \"rebuilt\": true on an image "
                   "that would have been kept.")
@click.option("--record", "record_layers", is_flag=True,
              help="With --reproducible: write each image's environment layer digests beside the lock "
                   "(<lock stem>.layers.json), which `envkit verify --lock` then compares.")
@lock_option
@locked_option
@json_option
@click.pass_context
def build_cmd(click_ctx: click.Context, spec: Path, images: tuple[str, ...], out_root: Path, no_verify: bool,
              store_url: str | None, skip_space_check: bool, builder: str, reproducible: bool, no_cache: bool,
              record_layers: bool, lock_path: Path | None, locked: bool, json_out: bool) -> None:
    """Resolve, render, build and verify SPEC's images.

    The lock is reused while it matches the spec and the catalog; a missing or stale one is re-resolved and
    written first, and said so; with --locked it fails instead."""
    if record_layers and not reproducible:
        raise click.UsageError("--record writes the layer digests of a reproducible build: add --reproducible")
    from ..app.build import build_spec
    from ..engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    with BuildView(c) as view:
        resolved, outcomes = run(c, lambda: build_spec(spec, out_root, engine, only=list(images) or None,
                                                       verify=not no_verify, builder=builder, locked=locked,
                                                       progress=view, store_url=store_url, lock_path=lock_path,
                                                       space_check=not skip_space_check, reproducible=reproducible,
                                                       no_cache=no_cache, record_layers=record_layers))
    doc = {"team": resolved.lock.team, "lock": str(resolved.lock_path), "lock_reused": resolved.reused,
           "builder": next((o.builder for o in outcomes if o.builder), builder), "reproducible": reproducible,
           "no_cache": no_cache, "images": [o.to_json() for o in outcomes]}

    def human() -> None:
        if not resolved.reused:
            click.echo(f"wrote {resolved.lock_path} (re-resolved)")
        _outcomes_table(outcomes)
        if all(o.action == "skipped" for o in outcomes):
            click.echo("nothing to rebuild: every image matches its lock")

    emit(c, doc, human)
    if any(o.status == "failed" for o in outcomes):
        sys.exit(8)


def _outcomes_table(outcomes: Iterable[Outcome]) -> None:
    rows = [[o.name, o.tag, o.action, f"{o.size / 2**30:.2f} GiB", f"{o.seconds:.0f}s", o.status] for o in outcomes]
    table(rows, ["IMAGE", "TAG", "ACTION", "SIZE", "TIME", "STATUS"])
    for o in outcomes:
        if o.moves is not None:
            click.echo(f"  {o.name}: {o.moves.words()}")
        if o.layers:  # --reproducible
            click.echo(f"  {o.name} layers: " + ", ".join(f"{g} {d[:19]}" + (" (reused)" if g in o.reused else "")
                                                           for g, d in o.layers.items()))
        for m in (o.verification.mismatches if o.verification else []):
            click.echo(f"  {o.name}: {m}", err=True)


@click.command("verify")
@click.argument("image", type=IMAGE)
@click.option("--lock", "lock_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also require the image to match this lock.")
@json_option
@click.pass_context
def verify_cmd(click_ctx: click.Context, image: str, lock_path: Path | None, json_out: bool) -> None:
    """Check inside IMAGE that its versions match its pins (no GPU needed)."""
    from ..app.certify import verify_image
    from ..engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    v = run(c, lambda: verify_image(engine, image, lock_path=lock_path))

    def human() -> None:
        table([[ch["name"], ch["status"], _short(ch.get("value")), ch.get("message", "")[:70]] for ch in v.checks],
              ["CHECK", "STATUS", "VALUE", "MESSAGE"])
        click.echo(f"{image}: {v.status}")

    emit(c, v.to_json(), human)
    if v.status == "failed":
        sys.exit(8)
