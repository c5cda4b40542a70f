"""Commands for offline bundles: bundle make (signed with the team key when given one), bundle build (the bundle's
signature verified first when keys are trusted)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..trust.names import TRUSTED_KEYS_ENV
from .build import _outcomes_table
from .common import REGISTRY, SPEC, _ctx, builder_option, emit, json_option, run
from .flags import from_renamed, renamed_option, signing_key_option, trusted_keys_option

if TYPE_CHECKING:
    from ..engine.protocol import BuildEvent



@click.group("bundle")
def bundle_group() -> None:
    """Offline bundles: everything one image's rebuild needs, built later with no network."""


@bundle_group.command("make")
@click.argument("spec", type=SPEC)
@click.option("--bundle", "out_dir", type=click.Path(path_type=Path), default=None,
              callback=from_renamed(required=True),
              metavar="DIR", help="The bundle directory (made beside it, renamed into place when complete; an "
                                  "existing bundle there is replaced). Required.")
@renamed_option("--out", "--bundle", "out_dir", type=click.Path(path_type=Path))
@click.option("--image", "image", default=None, help="The image to bundle (needed when SPEC has several).")
@signing_key_option("the bundle", "a signed in-toto statement about its manifest, which hashes every file, written "
                                  "as attestations/bundle.intoto.json")
@click.option("--registry", type=REGISTRY, default=None, metavar="HOST[:PORT][/PATH]",
              help="The team registry: the bundle carries the image's signatures and attestations from there "
                   "(certificates, SBOM, provenance: its sha256-<hex>.sig and .att, when the lock's tag there is of "
                   "this lock), which `bundle build` verifies offline with the trusted keys.")
@json_option
@click.pass_context
def bundle_make_cmd(click_ctx: click.Context, spec: Path, out_dir: Path, image: str | None, signing_key: str | None,
                    registry: str | None, json_out: bool) -> None:
    """Write one image's offline bundle into --bundle DIR (needs the network).

    Resolves SPEC (or reuses its lock), then writes the lock, hash-checked wheels, the base image
    archive, the Debian packages and a manifest. Build it later with `envkit bundle build DIR`.
    """
    from ..app.build import bundle_spec
    from ..engine.docker_engine import connect
    from ..images.bundle_manifest import LOCK_FILE
    from ..trust.keys import load_signing_key

    c = _ctx(click_ctx, json_out)
    key = run(c, lambda: load_signing_key(signing_key))  # a bad key fails before anything is fetched
    engine = run(c, connect)
    b = run(c, lambda: bundle_spec(spec, out_dir, engine, image=image, signing_key=key, registry=registry,
                                   progress=c.progress))
    doc = b.to_json()
    checked = (f"; `envkit verify {doc['tag']} --lock {b.path / LOCK_FILE}` then compares them with the lock's layer "
               "record, which the bundle carries" if doc["layer_record"] else "")
    signed = (f"signed by {b.signed_by[:16]}: `bundle build --trusted-keys` verifies it" if b.signed_by
              else "unsigned (--signing-key signs it)")
    emit(c, doc, lambda: click.echo(
        f"wrote {b.path}: {doc['image']} ({doc['tag']}), {doc['wheels']} wheel(s), base {doc['base']['ref']}, "
        f"{b.size / 2**30:.2f} GiB, {signed}\nbuild it with no network: envkit bundle build {b.path}\n"
        f"  (--reproducible: envkit writes the environment layers, the lock's own digests{checked})"))


@bundle_group.command("build")
@click.argument("bundle_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--no-verify", is_flag=True, help="Build only; skip the in-image verification.")
@click.option("--no-cache", is_flag=True, help="Run every step again (shows the build needs no network).")
@builder_option
@click.option("--reproducible", is_flag=True,
              help="As `envkit build --reproducible`, from the bundle's files and with no network: the builder makes "
                   "the OS stage, envkit installs the bundle's wheels with its uv and writes the environment layers, "
                   "the same digests as an online reproducible build of the lock (a devel image's devel steps built on "
                   "them from the bundle). Needs a local engine.")
@trusted_keys_option("the bundle", "Only a bundle signed by one of them is built: unsigned, signed by another key, "
                                   "or changed after signing is refused (exit 8). With none, the signature is not "
                                   "checked (said so).")
@json_option
@click.pass_context
def bundle_build_cmd(click_ctx: click.Context, bundle_dir: Path, no_verify: bool, no_cache: bool, builder: str,
                     reproducible: bool, trusted_keys: str | None, json_out: bool) -> None:
    """Build the image of the bundle in DIR with no network.

    The bundle's signature is verified first (with --trusted-keys), then every file is checked against the
    manifest; the base is loaded from the bundle.
    """
    from ..engine.docker_engine import connect
    from ..images.bundle import build_from_bundle
    from ..registry.carry import check_bundle_carried
    from ..trust.bundle import check_bundle_signature
    from ..trust.keys import load_trusted_keys

    c = _ctx(click_ctx, json_out)
    keys = run(c, lambda: load_trusted_keys(trusted_keys))
    signature = run(c, lambda: check_bundle_signature(bundle_dir, keys))
    if signature["checked"]:
        c.progress(f"{bundle_dir}: signed by trusted key {signature['signed_by'][:16]} (manifest "
                   f"{signature['manifest'][:19]})")
    else:
        c.progress(f"{bundle_dir}: the bundle's signature was not checked (no trusted key given: --trusted-keys or "
                   f"${TRUSTED_KEYS_ENV}); building it as it is")
    carried = run(c, lambda: check_bundle_carried(bundle_dir, keys))
    for doc in carried["documents"]:
        said = f"does not count: {doc['why']}" if doc.get("why") else "not checked"
        if doc.get("signed_by"):
            said = f"signed by trusted key {doc['signed_by'][:16]}"
        c.progress(f"  carried {doc.get('kind', 'document')} {doc.get('predicate_type') or doc['file']}: {said}")

    def progress(said: BuildEvent | str) -> None:
        if isinstance(said, str):  # envkit's own lines
            c.progress(said)
        elif said.kind == "step":
            c.progress(f"step {said.step}/{said.total}: {said.text}"[:120])
        elif c.verbose:  # the builder's log
            click.echo(f"  {said.text}", err=True)

    engine = run(c, connect)
    c.progress(f"building from {bundle_dir} with the {builder} builder, no network inside the build"
               + (" (reproducible layers: envkit installs the environment)" if reproducible else ""))
    outcome = run(c, lambda: build_from_bundle(engine, bundle_dir, builder=builder, verify=not no_verify,
                                               no_cache=no_cache, reproducible=reproducible, progress=progress,
                                               signed_manifest=signature.get("manifest")))
    emit(c, {"bundle": str(bundle_dir), "signature": signature, "carried": carried,
             "builder": outcome.builder or builder,
             "reproducible": reproducible, "images": [outcome.to_json()]},
         lambda: _outcomes_table([outcome]))
    if outcome.status == "failed":
        sys.exit(8)
