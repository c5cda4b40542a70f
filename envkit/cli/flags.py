"""The flags every command reads alike (docs/cli.md, "Flags"): ``--lock``, old spellings kept for one release, the
group's flags after the subcommand; and hints whose commands name the spec given rather than a placeholder."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from ..trust.names import PASSWORD_ENV, SIGNING_KEY_ENV, TRUSTED_KEYS_ENV

F = TypeVar("F", bound=Callable[..., Any])


Decorator = Callable[[F], F]


def lock_option(fn: F) -> F:
    """``--lock FILE``: the lock file (default: SPEC with .lock), one meaning on every command that takes one
    (resolve, lock, explain, render, build write or read SPEC's; verify and certify hold an image to it)."""
    return click.option("--lock", "lock_path", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                        help="The lock file (default: SPEC with .lock).")(fn)


def signing_key_option(what: str, how: str) -> Decorator:
    """``--signing-key FILE``: the private key that signs ``what`` (``how``: what it writes), one spelling and one
    help on every command that signs (``nightly``, ``certify --fleet``, ``bundle make``). No value: ``None``, and
    ``trust.keys.load_signing_key`` falls back to ``$ENVKIT_SIGNING_KEY`` (the fallback's one owner)."""
    return click.option("--signing-key", "signing_key", default=None, metavar="FILE",
                        help=f"Sign {what} with this private key (default: ${SIGNING_KEY_ENV}; encrypted: "
                             f"${PASSWORD_ENV}): {how}. `envkit keys generate` makes a key pair.")


def trusted_keys_option(what: str, otherwise: str) -> Decorator:
    """``--trusted-keys FILE[,FILE...]``: the public keys whose signatures count for ``what``; ``otherwise``: what
    becomes of a document none of them signed. One spelling and one help on every command that verifies (``ls``,
    ``show``, ``pull``, ``run``, ``bundle build``). No value: ``None``, and ``trust.keys.load_trusted_keys`` falls
    back to ``$ENVKIT_TRUSTED_KEYS``."""
    return click.option("--trusted-keys", "trusted_keys", default=None, metavar="FILE[,FILE...]",
                        help=f"The public keys whose signatures count for {what} (comma-separated .pub files or "
                             f"directories of them; default: ${TRUSTED_KEYS_ENV}). {otherwise}")


RENAMED = "envkit.renamed"  # ctx.meta key: values given under an old spelling, by parameter name


def renamed_option(old: str, new: str, dest: str, type: click.ParamType | None = None) -> Decorator:
    """An old spelling of ``new`` kept working for one release: hidden from --help, it says on stderr that it is
    deprecated and hands its value to ``new`` (whose option takes ``callback=from_renamed(default)``)."""
    def remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            click.echo(f"envkit: {old} is deprecated here and will go in the next release: use {new} "
                       f"(one meaning per flag across commands; docs/cli.md, \"Flags\")", err=True)
            ctx.meta.setdefault(RENAMED, {})[dest] = value
        return value

    return click.option(old, f"renamed_{dest}", type=type, default=None, hidden=True, expose_value=False,
                        callback=remember, is_eager=True)


Callback = Callable[[click.Context, click.Parameter, Any], Any]


def from_renamed(default: Any = None, *, required: bool = False) -> Callback:
    """The callback of an option that has an old spelling (``renamed_option``): its value, else the old spelling's,
    else ``default``; ``required``: neither given is a usage error."""
    def pick(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            value = ctx.meta.get(RENAMED, {}).get(str(param.name), default)
        if value is None and required:
            raise click.MissingParameter(ctx=ctx, param=param)
        return value

    return pick


GLOBAL_FLAGS = ("-v", "--verbose", "--debug")  # the group's own flags, also accepted after the subcommand
PASSTHROUGH = ("run",)  # commands whose arguments after the image are the job's: never taken from them


def hoist_global_flags(args: list[str], commands: Mapping[str, object]) -> list[str]:
    """``envkit build SPEC -v`` as ``envkit -v build SPEC``, and ``envkit --json ls`` as ``envkit ls --json``: the
    group's flags after the subcommand move before it, and ``--json`` before it moves after it (before any ``--``).
    Nothing is taken from ``envkit run IMAGE ...``, whose arguments are the job's."""
    at = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if at is None or args[at] not in commands:
        return args
    head, name, tail = args[:at], args[at], args[at + 1:]
    wants_json = "--json" in head
    head = [a for a in head if a != "--json"]
    if name in PASSTHROUGH:
        return [*head, name, *(["--json"] if wants_json else []), *tail]
    end = tail.index("--") if "--" in tail else len(tail)
    moved = [a for a in tail[:end] if a in GLOBAL_FLAGS]
    rest = [a for a in tail[:end] if a not in GLOBAL_FLAGS]
    return [*head, *moved, name, *rest, *(["--json"] if wants_json else []), *tail[end:]]


SPEC_PLACEHOLDER = re.compile(r"(`envkit [^`]*?)\bSPEC\b")


def filled(text: str | None) -> str | None:
    """A hint's commands with the spec this command was given (else ./team.yaml's name, the convention) in place of
    the literal ``SPEC`` placeholder, so it can be copied as it is."""
    if not text or "SPEC" not in text:
        return text
    ctx = click.get_current_context(silent=True)
    given = ctx.params.get("spec") if ctx is not None else None
    spec = str(given) if given else "team.yaml"
    while SPEC_PLACEHOLDER.search(text):
        text = SPEC_PLACEHOLDER.sub(lambda m: m.group(1) + spec, text)
    return text
