"""``envkit keys``: the team's signing keys (ECDSA P-256, as cosign's): make a pair, show a key's fingerprint."""

from __future__ import annotations

from pathlib import Path

import click

from .common import _ctx, emit, json_option, run


@click.group("keys")
def keys_group() -> None:
    """The team's signing keys: whoever publishes signs with the private key, whoever pulls trusts the public one."""


@keys_group.command("generate")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, metavar="DIR",
              help="Write DIR/envkit.key (private, mode 0600; encrypted with $ENVKIT_KEY_PASSWORD when set) and "
                   "DIR/envkit.pub (the public key to hand to researchers and admission policies).")
@json_option
@click.pass_context
def generate_cmd(click_ctx: click.Context, out_dir: Path, json_out: bool) -> None:
    """Make a new ECDSA P-256 key pair (never overwrites one)."""
    from ..trust.keys import generate_keys

    c = _ctx(click_ctx, json_out)
    made = run(c, lambda: generate_keys(out_dir))

    def human() -> None:
        click.echo(f"private key {made['private_key']} (keep it on the signing runner: --signing-key or "
                   f"$ENVKIT_SIGNING_KEY){'' if made['encrypted'] else '; not encrypted ($ENVKIT_KEY_PASSWORD unset)'}")
        click.echo(f"public key  {made['public_key']} (give it to researchers: --trusted-keys or "
                   f"$ENVKIT_TRUSTED_KEYS)")
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
