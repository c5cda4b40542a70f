"""Commands for researchers: what was built and certified (locally or in the registry), run an image."""

from __future__ import annotations

import json
import os
import sys
import termios
import tty as tty_mode
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

import click

from ..engine.protocol import RUN_SHM_SIZE, RUN_TIMEOUT
from ..errors import EnvkitError
from .common import GPU, IMAGE, REGISTRY, STORE, STORE_HELP, Ctx, _ctx, emit, json_option, run, table
from .flags import filled, trusted_keys_option
from .progress import LayerView

trusted_certificates = trusted_keys_option(
    "a registry certificate", "One that does not verify with one of them, for this very digest, is shown with why and "
                              "never counts.")

if TYPE_CHECKING:
    from typing import Iterator

    from ..engine.docker_engine import DockerEngine


def _engine_for_registry(c: Ctx, needed: bool) -> DockerEngine | None:
    """The engine (its insecure-registries setting decides http vs https), or None when reading a
    registry needs no engine and none runs here."""
    from ..engine.docker_engine import connect

    if needed:
        return run(c, connect)
    try:
        return connect()
    except EnvkitError:
        c.progress(
            "no container engine here: reading the registry directly "
            "(https; the engine's insecure fallbacks only for 127.0.0.0/8)"
        )
        return None


def _engine_if_any() -> DockerEngine | None:
    """The engine when one answers, else None (quietly: what it adds is optional)."""
    from ..engine.docker_engine import connect

    try:
        return connect()
    except EnvkitError:
        return None


@click.command("ls")
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@click.option("--registry", type=REGISTRY, default=None, metavar="HOST[:PORT][/PATH]", envvar="ENVKIT_REGISTRY",
              help="Also list the envkit images in this registry (under PATH) with their certificate artifacts, "
                   "joined with the store's rows for the same images; read over the registry's HTTP API, nothing "
                   "is pulled. Default: $ENVKIT_REGISTRY.")
@click.option("--gpu", type=GPU, default=None, metavar="MODEL",
              help="Say where each image stands on this GPU model (H100, A100, ...): certified, verified only "
                   "(a CPU-only verification), failed or not certified.")
@click.option("--certified", "certified_only", is_flag=True,
              help="Only images certified on a GPU (on --gpu MODEL when given).")
@trusted_certificates
@json_option
@click.pass_context
def ls_cmd(click_ctx: click.Context, store_url: str | None, registry: str | None, gpu: str | None,
           certified_only: bool, trusted_keys: str | None, json_out: bool) -> None:
    """The team's images: tag, framework, CUDA and where each stands per GPU model.

    From the history store (what build, certify and nightly recorded; by default in this user's data directory,
    the same from every working directory) and, with --registry or $ENVKIT_REGISTRY, the team registry."""
    from ..app.researchers import list_team_images

    c = _ctx(click_ctx, json_out)
    _store_note(c, store_url)
    engine = _engine_for_registry(c, needed=False) if registry is not None else None
    doc = run(c, lambda: list_team_images(store_url, _engine_if_any, registry=registry, client=engine, gpu=gpu,
                                          certified=certified_only, trusted_keys=trusted_keys))

    def human() -> None:
        table([[r["tag"] + (" (:certified)" if r.get("certified_tag") else ""), r["framework"] or "-",
                r["cuda"] or "-", r["status"]] for r in doc["images"]],
              ["IMAGE", "FRAMEWORK", "CUDA", f"ON {gpu}" if gpu else "STATUS PER GPU MODEL"])
        if not doc["images"]:
            click.echo(_nothing_listed(doc, gpu, certified_only), err=True)
        if doc.get("skipped"):
            click.echo(f"({len(doc['skipped'])} other reference(s) skipped: base mirrors and images envkit did not "
                       f"build; --json lists them)", err=True)
        for warning in doc.get("warnings") or ():
            click.echo(f"warning: {warning}", err=True)
        uncounted = sum(len(r.get("uncounted_certificates") or []) for r in doc["images"])
        if uncounted:
            click.echo(f"({uncounted} registry certificate(s) do not count: unsigned, or not verified with a trusted "
                       f"key for that image; --json says why)", err=True)

    emit(c, doc, human)


def _nothing_listed(doc: dict, gpu: str | None, certified_only: bool) -> str:
    if certified_only:
        return (f"(no image certified on {gpu or 'a GPU'}: `envkit ls` without --certified lists the others; "
                f"`envkit certify IMAGE` on a GPU host certifies one)")
    where = f"registry {doc['registry']} or the history store" if doc.get("registry") else "the history store"
    return (f"(no image in {where}: `envkit build team.yaml`, certify and nightly record them; --store or "
            f"$ENVKIT_STORE names another store, --registry or $ENVKIT_REGISTRY the team registry)")


def _store_note(c: Ctx, store_url: str | None) -> None:
    """Say once when the store used is the one in the working directory envkit used before (``locate``'s note)."""
    from ..store.records import locate

    note = run(c, lambda: locate(store_url)).note
    if note:
        c.progress(note)


@click.command("show")
@click.argument("image", type=IMAGE)
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@click.option("--gpu", "gpus", type=GPU, multiple=True, metavar="MODEL",
              help="Also say where it stands on this GPU model, certified or not (repeatable; default: the fleet's "
                   "models when ./team.yaml is here).")
@click.option("--all", "show_all", is_flag=True, help="Then the labels, the registry's view and every certificate.")
@trusted_certificates
@json_option
@click.pass_context
def show_cmd(click_ctx: click.Context, image: str, store_url: str | None, gpus: tuple[str, ...], show_all: bool,
             trusted_keys: str | None, json_out: bool) -> None:
    """Does IMAGE run on my GPU? Framework, CUDA, driver floor, where it stands per GPU model, how to run it.

    IMAGE in the local engine: from the engine and the store. IMAGE as a registry reference
    (host[:port]/repository:tag or ...@sha256:...) that is not local: read from the registry
    without pulling (manifest, labels, the certificate artifacts, whether :certified points at it).
    A repository without a tag (vision/torch25, host:5000/vision/torch25) means its newest tag.
    """
    from ..app.pull import fleet_models, newest_ref, summarize
    from ..app.researchers import show_image
    from ..registry.remote_parse import parse_ref

    c = _ctx(click_ctx, json_out)
    remote = run(c, lambda: parse_ref(image))
    engine = _engine_for_registry(c, needed=remote is None)
    ref = run(c, lambda: newest_ref(engine, image))
    if not gpus:  # the team's fleet, when ./team.yaml is here
        gpus, unread = fleet_models()
        if unread:
            c.progress(unread)
    doc = run(c, lambda: summarize(show_image(engine, ref, store_url, trusted_keys=trusted_keys), gpus))
    emit(c, doc, lambda: _show_human(doc, show_all))


def _show_human(doc: dict, show_all: bool) -> None:
    where = "here" if doc["source"] == "local" else f"in registry {doc['registry']['registry']}, not pulled"
    click.echo(f"{doc['image']} ({where})")
    floor = f"needs driver >= {doc['driver_floor']}" if doc.get("driver_floor") not in (None, "none") else ""
    cuda = f"CUDA {doc['cuda']}" if doc.get("cuda") not in (None, "none") else "no CUDA (CPU only)"
    framework = doc.get("framework") or "framework unknown (no envkit pin labels)"
    click.echo("  " + ", ".join(filter(None, [framework, cuda, floor])))
    if (doc.get("registry") or {}).get("certified_tag"):
        click.echo("  the team's :certified tag points at this image")
    rows = [[s["gpu_model"] and short(s["gpu_model"]) or "CPU only", s["status"], s["created_at"][:10],
             s["driver"] or "-",
             f"bf16 {s['bf16_tflops']:g} TFLOP/s" if s["bf16_tflops"] is not None else "-", s["source"]]
            for s in doc["standing"]]
    listed = {short(r[0]).lower() for r in rows}
    rows += [[short(g["gpu_model"]), g["state"], "-", "-", "-", "-"] for g in doc["gpus"]
             if short(g["gpu_model"]).lower() not in listed]
    if rows:
        table([[f"  {r[0]}", *r[1:]] for r in rows], ["  GPU", "STATUS", "WHEN", "DRIVER", "MEASURED", "FROM"])
    for u in doc.get("uncounted_certificates") or []:
        click.echo(f"  does not count: {u.get('status') or '?'} on {u.get('gpu_model') or '?'} ({u['source']}): "
                   f"{u['why']}")
    click.echo("get and run it:" if len(doc["commands"]) > 1 else "run it:")
    for line in doc["commands"]:
        click.echo(f"  {line}")
    if doc["next"]:
        click.echo(f"next: {doc['next'].replace('IMAGE', doc['image'])}")
    if show_all:
        _show_all(doc)
    else:
        click.echo("(--all: labels, the registry's view and every certificate; --json: all of it)")


def short(model: str) -> str:
    from ..app.standing import short_model

    return short_model(model)


def _show_all(doc: dict) -> None:
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
        model = "no GPU" if cert["gpu_model"] in ("", "none") else cert["gpu_model"]
        driver = f" driver {cert['driver']}" if cert["driver"] not in ("", "none") else ""
        click.echo(f"certificate: {cert['status']} on {model}{driver} ({cert['created_at']}, "
                   f"{cert.get('source', 'store')})")
        for reason in cert["reasons"]:
            click.echo(f"  reason: {reason}")
    if not doc["certificates"]:
        click.echo("certificate: none")


@click.command("pull")
@click.argument("image", type=IMAGE)
@click.option("--require-certified", is_flag=True, envvar="ENVKIT_REQUIRE_CERTIFIED",
              help="Refuse (exit 8, nothing pulled) an image not certified for this host's GPUs (without GPUs: "
                   "with no certificate that passed) instead of pulling it with a warning. Also "
                   "$ENVKIT_REQUIRE_CERTIFIED=1, as for run.")
@click.option("--gpus/--no-gpus", default=None,
              help="Judge it for a run with (or without) GPUs, as `envkit run` would. Default: when the engine has "
                   "the NVIDIA runtime.")
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@trusted_certificates
@json_option
@click.pass_context
def pull_cmd(click_ctx: click.Context, image: str, require_certified: bool, gpus: bool | None, store_url: str | None,
             trusted_keys: str | None, json_out: bool) -> None:
    """Pull IMAGE from the team registry by its digest, after the certification gate of `envkit run`.

    IMAGE is host[:port]/team/image[:tag]; without a tag, its newest. The image's certificates (the registry's
    artifacts and the store's) must cover this host's GPU models, or it is pulled with a warning (refused with
    --require-certified). The tag is set on the pulled copy, so `envkit run IMAGE` runs exactly it."""
    from ..app.pull import pull_image
    from ..engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    with LayerView(c, f"pull {image}") as view:
        pulled = run(c, lambda: pull_image(engine, image, store_url=store_url, require_certified=require_certified,
                                           gpus=gpus, warn=lambda text: click.echo(filled(text), err=True),
                                           progress=view, transfer=view.transfer, trusted_keys=trusted_keys))

    def human() -> None:
        click.echo(f"pulled {pulled.pinned}\n  as {pulled.ref} ({pulled.info.size / 2**30:.2f} GiB)")
        if pulled.layers is not None:
            click.echo(f"  layers: {pulled.layers.words()}")
        click.echo(f"  gate: {pulled.verdict.message}")
        click.echo(f"run it: envkit run {pulled.ref} -- COMMAND")

    emit(c, pulled.to_json(), human)


@click.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("image", type=IMAGE)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--gpus/--no-gpus", default=None, help="Default: when the engine has the NVIDIA runtime.")
@click.option("--shm-size", default=RUN_SHM_SIZE, show_default=True)
@click.option("--require-certified", is_flag=True, envvar="ENVKIT_REQUIRE_CERTIFIED",
              help="Refuse (exit 8) an image not certified for this host's GPUs (a CPU run: not verified) "
                   "instead of running it with a warning. Also $ENVKIT_REQUIRE_CERTIFIED=1.")
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@click.option("--timeout", type=click.IntRange(min=1), default=RUN_TIMEOUT, show_default=True, metavar="SECONDS",
              help="Stop the job after this many seconds (exit 124, saying so).")
@click.option("-i", "--interactive", is_flag=True,
              help="Pass envkit's stdin to the job until it ends (as `docker run -i`); without it the job's stdin "
                   "is closed.")
@click.option("-t", "--tty", is_flag=True,
              help="Give the job a pseudo-terminal of this terminal's size, following it when the window is "
                   "resized (as `docker run -t`; its stdout and stderr are then one stream). With -i on a terminal, "
                   "envkit's terminal is raw while the job runs, so keys such as Ctrl-C go to the job: "
                   "`envkit run -it IMAGE -- bash`.")
@trusted_certificates
@json_option
@click.pass_context
def run_cmd(
    click_ctx: click.Context,
    image: str,
    command: tuple[str, ...],
    gpus: bool | None,
    shm_size: str,
    require_certified: bool,
    store_url: str | None,
    timeout: int,
    interactive: bool,
    tty: bool,
    trusted_keys: str | None,
    json_out: bool,
) -> None:
    """Run COMMAND in IMAGE with the GPU, shared-memory and ulimit flags it needs.

    First the certification gate: the image's certificates (store; registry artifacts for a registry
    reference) must cover every GPU model on this host. The job's stdout and stderr stream to envkit's as
    they come; with -i, envkit's stdin is the job's. With --json: the output is collected instead, and one
    document holds the gate's verdict, the exit code and the output."""
    from ..app.researchers import run_in_image
    from ..engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    output = None if json_out else _passthrough
    result, verdict = run(c, lambda: run_in_image(engine, image, list(command), gpus=gpus, shm_size=shm_size,
                                                  store_url=store_url, require_certified=require_certified,
                                                  warn=lambda text: click.echo(filled(text), err=True), timeout=timeout,
                                                  output=output, stdin=sys.stdin.buffer if interactive else None,
                                                  tty=_terminal_size if tty else None,
                                                  around_job=_raw_terminal if tty and interactive else nullcontext,
                                                  trusted_keys=trusted_keys))
    stopped = f"envkit: the job ran past --timeout {timeout}s and was stopped (exit 124)"
    if json_out:
        click.echo(json.dumps({"image": image, "gate": verdict.to_json(), "exit_code": result.exit_code,
                               "timed_out": result.timed_out, "stdout": result.stdout, "stderr": result.stderr},
                              indent=2))
    if result.timed_out:
        click.echo(stopped, err=True)
    sys.exit(result.exit_code)


def _terminal_size() -> tuple[int, int]:
    """(rows, columns) of the terminal on envkit's stdout, stdin or stderr, the first that is one (as the kernel
    knows it, not $LINES/$COLUMNS, which a parent may have left stale); 24x80 when none is."""
    for stream in (sys.stdout, sys.stdin, sys.stderr):
        try:
            size = os.get_terminal_size(stream.fileno())
        except (AttributeError, OSError, ValueError):
            continue
        if size.lines and size.columns:
            return size.lines, size.columns
    return 24, 80


@contextmanager
def _raw_terminal() -> Iterator[None]:
    """envkit's stdin terminal in raw mode while the job runs (its pseudo-terminal does the echo and line editing,
    and Ctrl-C reaches the job as a byte), restored however the job ends; nothing when stdin is no terminal."""
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty_mode.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _passthrough(data: bytes, is_stderr: bool) -> None:
    """The job's bytes to envkit's own stdout or stderr, at once."""
    stream = sys.stderr if is_stderr else sys.stdout
    stream.flush()
    stream.buffer.write(data)
    stream.buffer.flush()
