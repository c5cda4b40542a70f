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
from .common import IMAGE, REGISTRY, STORE, STORE_HELP, Ctx, _ctx, emit, json_option, run, table

if TYPE_CHECKING:
    from ..engine.docker_engine import DockerEngine
    from typing import Iterator


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
@click.option("--registry", type=REGISTRY, default=None, metavar="HOST[:PORT][/PATH]",
              help="List the images in this registry (under PATH) with their certificate artifacts, joined with "
                   "the store's rows for the same images; read over the registry's HTTP API, nothing is pulled.")
@json_option
@click.pass_context
def ls_cmd(click_ctx: click.Context, store_url: str | None, registry: str | None, json_out: bool) -> None:
    """Images envkit built, their stack and certification per GPU model."""
    from ..app.researchers import list_images, list_registry_images

    c = _ctx(click_ctx, json_out)
    if registry is None:
        rows = run(c, lambda: list_images(store_url, _engine_if_any))

        def human_store() -> None:
            table([[r["tag"], r["stack"] or "-", ", ".join(f"{g}: {s}" for g, s in r["certification"].items()) or "-",
                    r["date"]] for r in rows], ["IMAGE", "STACK", "CERTIFICATION", "DATE"])
            if not rows:
                click.echo("(no image in the history store: nightly and certify record them there, and build's "
                           "images show with `envkit show IMAGE`; --store or $ENVKIT_STORE names another store)",
                           err=True)

        emit(c, {"images": rows}, human_store)
        return
    engine = _engine_for_registry(c, needed=False)
    doc = run(c, lambda: list_registry_images(engine, registry, store_url))

    def human() -> None:
        table([[r["tag"], "yes" if r["certified_tag"] else "-",
                ", ".join(f"{g}: {s}" for g, s in r["certification"].items()) or "-", r["date"] or "-",
                "+".join(r["sources"])] for r in doc["images"]],
              ["IMAGE", ":CERTIFIED", "CERTIFICATION", "DATE", "SOURCE"])
        if doc["skipped"]:
            click.echo(f"({len(doc['skipped'])} other reference(s) skipped: base mirrors and images envkit did not "
                       f"build; --json lists them)", err=True)
        for warning in doc.get("warnings") or ():
            click.echo(f"warning: {warning}", err=True)

    emit(c, doc, human)


@click.command("show")
@click.argument("image", type=IMAGE)
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@json_option
@click.pass_context
def show_cmd(click_ctx: click.Context, image: str, store_url: str | None, json_out: bool) -> None:
    """An image's pins, lock hash and certificates.

    IMAGE in the local engine: from the engine and the store. IMAGE as a registry reference
    (host[:port]/repository:tag or ...@sha256:...) that is not local: read from the registry
    without pulling (manifest, labels, the certificate artifacts, whether :certified points at it).
    """
    from ..app.researchers import show_image
    from ..registry.remote_parse import parse_ref

    c = _ctx(click_ctx, json_out)
    remote = run(c, lambda: parse_ref(image))
    engine = _engine_for_registry(c, needed=remote is None)
    doc = run(c, lambda: show_image(engine, image, store_url))

    def human() -> None:
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
    json_out: bool,
) -> None:
    """Run COMMAND in IMAGE with the GPU, shared-memory and ulimit flags it needs.

    First the certification gate: the image's certificates (store; registry artifacts for a registry
    reference) must cover every GPU model on this host. The job's stdout and stderr stream to envkit's as
    they come; with -i, envkit's stdin is the job's. With --json: the output is collected instead, and one
    document holds the gate's verdict, the exit code and the output."""
    from ..engine.docker_engine import connect
    from ..app.researchers import run_in_image

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    output = None if json_out else _passthrough
    result, verdict = run(c, lambda: run_in_image(engine, image, list(command), gpus=gpus, shm_size=shm_size,
                                                  store_url=store_url, require_certified=require_certified,
                                                  warn=lambda text: click.echo(text, err=True), timeout=timeout,
                                                  output=output, stdin=sys.stdin.buffer if interactive else None,
                                                  tty=_terminal_size if tty else None,
                                                  around_job=_raw_terminal if tty and interactive else nullcontext))
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
