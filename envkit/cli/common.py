"""What every command module shares: the per-invocation context, error handling, output.

Human output goes to the terminal (progress on stderr); ``--json`` prints one JSON document on
stdout for pipelines. The command modules import from here, never from ``envkit.cli`` itself,
so the package has no import cycle.
"""

from __future__ import annotations

import errno
import json
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NoReturn, TypeVar

import click

from ..engine.protocol import AUTO, BUILDER_CHOICES
from ..engine.space import host_out_of_space
from ..errors import EngineError, EnvkitError, Interrupted
from ..frameworks import NAMES
from ..store.records import DEFAULT_HELP
from ..support import procs
from .flags import filled, hoist_global_flags

if TYPE_CHECKING:
    from types import FrameType

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])  # a command, decorated

SPEC = click.Path(exists=False, dir_okay=False, path_type=Path)


class Checked(click.ParamType):
    """A string parameter that ``check`` (an envkit parser raising an EnvkitError) accepts when the command line
    is read: a malformed value is a usage error (exit 2) before any work, not a failure found later (a typo in
    ``nightly --registry`` used to surface only at the push, after every build). The value passes on as ``check``
    returns it (normalised), or unchanged when it returns None."""

    def __init__(self, name: str, check: Callable[[str], str | None]) -> None:
        self.name = name
        self.check = check

    def convert(self, value: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            normal = self.check(value)
        except EnvkitError as exc:
            self.fail(f"{exc.message}; {exc.hint}" if exc.hint else exc.message, param, ctx)
        return value if normal is None else normal


def _registry(value: str) -> str:
    """HOST[:PORT][/PATH] as it is used: without the spaces and trailing slashes parse_registry forgives."""
    from ..registry.remote_parse import parse_registry

    host, prefix = parse_registry(value)
    return f"{host}/{prefix}" if prefix else host


def _image(value: str) -> None:
    from ..registry.remote_parse import check_image_ref, parse_ref

    if not value.strip():
        raise EnvkitError("an image is needed, and this one is empty",
                          hint="give a local image (name:tag, an id) or host[:port]/repository:tag")
    check_image_ref(value)  # Docker's grammar: the engine would only say "invalid reference format" (exit 6)
    parse_ref(value)  # then a registry reference, as envkit reads registries (sha256 digests)


def _store(value: str) -> None:
    from ..store.records import locate

    locate(value)  # empty, or a URL envkit cannot use: before any work


def _team(value: str) -> None:
    from ..ops.gc_plan import check_team

    check_team(value)


def _gpu(value: str) -> str:
    """A GPU model the catalog knows ('h100' -> 'H100'); an unknown one with the nearest names and the full list."""
    from ..catalog.files import load_catalog

    catalog = load_catalog()
    if catalog.gpu(value) is None:
        raise EnvkitError(f"unknown GPU {value!r}", hint=catalog.unknown_gpu_hint(value))
    known = {n.lower(): n for n in catalog.gpu_names()}
    return known.get(" ".join(value.split()).lower(), value.strip())


GPU = Checked("gpu", _gpu)  # a GPU model, as team.yaml's fleet.gpus names them
REGISTRY = Checked("registry", _registry)  # HOST[:PORT][/PATH]
TEAM = Checked("team", _team)  # a team name, as team.yaml's team:
IMAGE = Checked("image", _image)  # a local image, or a registry reference (then well formed)
STORE = Checked("store", _store)  # a history store: a path, sqlite:///..., postgresql://...


class Ctx:
    def __init__(self, json_out: bool, debug: bool, verbose: bool):
        self.json = json_out
        self.debug = debug
        self.verbose = verbose

    def progress(self, message: str) -> None:
        """Progress goes to stderr in both modes, so --json keeps stdout clean."""
        click.echo(f"envkit: {message}", err=True)


def json_option(f: F) -> F:
    return click.option("--json", "json_out", is_flag=True, help="Print one JSON document for machines.")(f)


def builder_option(f: F) -> F:
    return click.option(
        "--builder", type=click.Choice(BUILDER_CHOICES), default=AUTO, show_default=True,
        help="auto: BuildKit where it can build here, else classic; classic: the engine's API; buildkit: "
             "DOCKER_BUILDKIT=1 /usr/bin/docker build (the CA as a build secret; needs Debian's docker.io CLI).")(f)


def locked_option(f: F) -> F:
    return click.option(
        "--locked", is_flag=True,
        help="Use the lock as it is, never re-resolving or writing it: a missing or stale lock fails (exit 5). "
             "For CI building a committed lock, or a GPU runner after a CPU build job.")(f)


def refresh_framework_option(name: str) -> Callable[[F], F]:
    """The framework(s) a catalog refresh reads (``catalog refresh --framework``, ``nightly --refresh-framework``)."""
    return click.option(
        name, "frameworks", type=click.Choice(NAMES), multiple=True,
        help="Refresh only this framework's catalog rows (repeatable; default: all of "
             + ", ".join(NAMES) + ").")


STORE_HELP = ("History store: a SQLite file path, sqlite:///relative/path, sqlite:////absolute/path or "
              "postgresql://[user@]host[:port]/db (default: " + DEFAULT_HELP + "; passwords via PGPASSWORD or "
              "~/.pgpass).")


def run(ctx_obj: Ctx, fn: Callable[[], T]) -> T:
    """Run ``fn``; turn envkit errors into a message and an exit code."""
    try:
        return fn()
    except EnvkitError as exc:
        fail(ctx_obj, exc)
    except Exception as exc:  # noqa: BLE001 - two kinds are the user's to fix, not crashes; the rest re-raise
        error = _engine_gone(exc) or (host_out_of_space(exc, _command()) or _path_error(exc)
                                      if isinstance(exc, OSError) else None)
        if error is None:
            raise
        fail(ctx_obj, error)


PATH_HINTS = {
    errno.EACCES: "this user may not write there: check the owner and mode, or choose another path",
    errno.EPERM: "the file or directory refuses the change (owner, or an immutable attribute): choose another path",
    errno.EROFS: "that filesystem is read-only: choose a path on a writable one",
    errno.ENOTDIR: "a part of that path is a file, not a directory: move the file, or choose another path",
    errno.EEXIST: "a file is where a directory is needed: move it, or choose another path",
    errno.EISDIR: "a directory is where a file is needed: move it, or choose another path",
    errno.ENOENT: "that directory does not exist or cannot hold files (a virtual filesystem such as /proc or /sys): "
                  "choose another path",
    errno.ENAMETOOLONG: "a name in that path is too long for the filesystem (envkit also writes a temporary file "
                        "beside it, named after it): choose a shorter one",
    errno.ELOOP: "that path goes round a loop of symbolic links: fix the links, or choose another path",
}


def _path_error(exc: OSError) -> EnvkitError | None:
    """A file envkit could not write or read because of the path itself (permissions, a file in the way, a
    read-only filesystem): the command, the path and what to do, not a traceback. None for other errors."""
    if exc.errno not in PATH_HINTS or not exc.filename:
        return None
    return EnvkitError(f"{_command()}: cannot use {exc.filename}: {exc.strerror}", hint=PATH_HINTS[exc.errno],
                       location=None)


def _command() -> str:
    return " ".join(["envkit", *click.get_current_context().command_path.split()[1:]])  # "envkit bundle make"


def _engine_gone(exc: Exception) -> EngineError | None:
    """An error for the engine stopping while envkit talked to it (requests' or urllib3's errors, from a
    docker-py call no step of envkit expected to fail), or for docker-py's own errors; None for others."""
    if type(exc).__module__.split(".")[0] not in ("docker", "requests", "urllib3"):
        return None  # (docker-py is imported only when a command talks to the engine)
    from ..engine.docker_engine import ENGINE_GONE, ENGINE_REFUSED, GONE_HINT, reason_of

    if isinstance(exc, ENGINE_GONE):
        registry = _registry_call(exc)
        if registry is not None:  # envkit's own registry client, not the engine: the engine may not even run
            where = f"registry {registry}" if registry else "the registry"
            return EngineError(f"{_command()}: talking to {where} failed ({reason_of(exc)})",
                               hint="check the registry address and that a registry answers there "
                                    f"(`curl https://{registry or 'HOST'}/v2/`); run with --debug for where")
        return EngineError(f"{_command()}: the engine stopped answering ({reason_of(exc)})", hint=GONE_HINT)
    if isinstance(exc, ENGINE_REFUSED):
        return EngineError(f"{_command()}: the engine refused: {reason_of(exc)}",
                           hint="`docker info` and the engine's log say more; run with --debug for where")
    return None


REGISTRY_MODULES = ("envkit.registry.api", "envkit.registry.auth", "envkit.registry.tls")


def _registry_call(exc: BaseException) -> str | None:
    """When ``exc`` (a requests or urllib3 error) came from envkit's registry client rather than from docker-py
    talking to the engine: the registry's host[:port] ("" when unknown). None for the engine's errors."""
    modules, registry = [], ""
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        module = str(frame.f_globals.get("__name__", ""))
        modules.append(module)
        if module in REGISTRY_MODULES and not registry:
            holder = frame.f_locals.get("self")
            registry = str(getattr(holder, "registry", "") or frame.f_locals.get("registry") or "")
    if any(m == "docker" or m.startswith("docker.") for m in modules):
        return None
    return registry if any(m in REGISTRY_MODULES for m in modules) else None


def fail(ctx_obj: Ctx, exc: EnvkitError) -> NoReturn:
    if ctx_obj.debug:
        traceback.print_exc()
    exc.hint = filled(exc.hint)
    if ctx_obj.json:
        click.echo(json.dumps(exc.to_json(), indent=2))
    click.echo(f"error: {exc}", err=True)
    sys.exit(exc.exit_code)


def emit(ctx_obj: Ctx, doc: object, human: Callable[[], None]) -> None:
    if ctx_obj.json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
    else:
        human()


def table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


def _ctx(click_ctx: click.Context, json_out: bool) -> Ctx:
    click_ctx.obj["json"] = json_out  # for EnvkitGroup: how to report an interruption
    return Ctx(json_out, click_ctx.obj["debug"], click_ctx.obj["verbose"])


# SIGINT already raises KeyboardInterrupt; these would end the process without any clean-up.
UNWIND = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_unwind() -> Iterator[None]:
    """While a command runs, SIGTERM and SIGHUP unwind it as Ctrl-C does (``Interrupted``), so its
    ``with`` and ``finally`` blocks clean up. The first signal restores the default actions: a second
    one during that clean-up ends the process at once, as a user pressing twice expects. A signal the
    process was started ignoring (``nohup`` ignores SIGHUP) stays ignored."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return
    previous = {s: signal.getsignal(s) for s in (*UNWIND, signal.SIGINT)}
    mine = [s for s in UNWIND if previous[s] is not signal.SIG_IGN]

    def unwind(signum: int, _frame: FrameType | None) -> NoReturn:
        for s in (*mine, signal.SIGINT):
            signal.signal(s, signal.SIG_DFL)
        raise Interrupted(signum)

    for s in mine:
        signal.signal(s, unwind)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class EnvkitGroup(click.Group):
    """The ``envkit`` group: every command runs under ``signals_unwind``; an interruption ends with
    the shell's exit code (128 + the signal: 130 for Ctrl-C, 143 for SIGTERM), one line saying what
    happened and what to do, and with ``--json`` an error document, instead of click's "Aborted!".
    The group's flags (-v, --debug) are read after the subcommand too, and --json before it
    (``hoist_global_flags``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_flags(list(args), self.commands))

    def invoke(self, ctx: click.Context) -> Any:
        wants_json = "--json" in ctx.args  # what is left for the subcommand (its name is held apart by click)
        with signals_unwind():
            try:
                return super().invoke(ctx)
            except click.UsageError as exc:
                if not wants_json:
                    raise
                report_usage(exc)
            except KeyboardInterrupt:
                signum: int = signal.SIGINT
            except Interrupted as exc:
                signum = exc.signum
        # Only the number is kept: the exception's traceback would keep the unwound frames (and any
        # generator suspended in them) alive until exit. A child such a generator owns is stopped here, not when
        # the generator is collected (procs.stop_started); a second Ctrl-C stops the waiting (they have had SIGTERM).
        try:
            procs.stop_started()
        except KeyboardInterrupt:
            pass
        report_interrupted(ctx.obj or {}, Interrupted(signum))


def report_usage(exc: click.UsageError) -> NoReturn:
    """A usage error (a missing argument, an unknown option, a path that is not a file) under ``--json``: the error
    document on stdout, as every other error, and click's own text on stderr; exit 2."""
    where = exc.ctx.command_path if exc.ctx is not None else "envkit"
    doc = {"error": "UsageError", "message": exc.format_message(), "hint": f"`{where} --help` lists its arguments "
                                                                            "and options", "location": None}
    click.echo(json.dumps(doc, indent=2))
    exc.show()
    sys.exit(exc.exit_code)


def report_interrupted(obj: dict, exc: Interrupted) -> NoReturn:
    if obj.get("json"):
        click.echo(json.dumps(exc.to_json(), indent=2))
    click.echo(f"error: {exc}", err=True)
    sys.exit(exc.exit_code)


def _short(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."
