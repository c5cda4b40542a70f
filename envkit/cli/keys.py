"""``envkit keys``: the team's signing keys (ECDSA P-256, as cosign's): make a pair, show a key's fingerprint."""

from __future__ import annotations

from pathlib import Path

import click

from ..trust.names import PASSWORD_ENV, PRIVATE_FILE, PUBLIC_FILE, SIGNING_KEY_ENV, TRUSTED_KEYS_ENV
from .common import _ctx, emit, json_option, run


@click.group("keys")
def keys_group() -> None:
    """The team's signing keys: whoever publishes signs with the private key, whoever pulls trusts the public one."""


@keys_group.command("generate")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, metavar="DIR",
              help=f"Write DIR/{PRIVATE_FILE} (private, mode 0600; encrypted with ${PASSWORD_ENV} when set) and "
                   f"DIR/{PUBLIC_FILE} (the public key to hand to researchers and admission policies).")
@json_option
@click.pass_context
def generate_cmd(click_ctx: click.Context, out_dir: Path, json_out: bool) -> None:
    """Make a new ECDSA P-256 key pair (never overwrites one)."""
    from ..trust.keys import generate_keys

    c = _ctx(click_ctx, json_out)
    made = run(c, lambda: generate_keys(out_dir))

    def human() -> None:
        unencrypted = f"; not encrypted (${PASSWORD_ENV} unset)"
        click.echo(f"private key {made['private_key']} (keep it on the signing runner: --signing-key or "
                   f"${SIGNING_KEY_ENV}){'' if made['encrypted'] else unencrypted}")
        click.echo(f"public key  {made['public_key']} (give it to researchers: --trusted-keys or ${TRUSTED_KEYS_ENV})")
        click.echo(f"fingerprint {made['fingerprint']}")

    emit(c, made, human)


@keys_group.command("show")
@click.argument("key_file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE")
@json_option
@click.pass_context
def show_cmd(click_ctx: click.Context, key_file: Path, json_out: bool) -> None:
    """A key's fingerprint (sha256 of its DER public key): compare it with the one the platform team gives."""
    from ..trust.keys import describe_key

    c = _ctx(click_ctx, json_out)
    doc = run(c, lambda: describe_key(key_file))
    emit(c, doc, lambda: click.echo(f"{doc['path']}: {doc['kind']} {doc['algorithm']} key, fingerprint "
                                    f"{doc['fingerprint']}"))
