"""The command line: parse, call one typed function, format its result.

This package is the only part of envkit that prints or exits. ``main`` is the click group;
the commands live in modules by audience and are registered here:

* ``build``: resolve, lock, explain, render, build, verify (whoever builds the stacks)
* ``bundle``: bundle make, bundle build (offline bundles, signed and verified with the team's keys)
* ``certify``: certify, nightly (the certifying runners)
* ``researchers``: ls, show, pull, run (what was built and certified; pulling and running an image)
* ``admin``: doctor, schema, catalog (hosts, the spec's schema, the compatibility catalog)
* ``gc``: gc (a build host's disk: old envkit images)
* ``registry``: registry prune (retention in the team registry)
* ``keys``: keys generate, keys show (the team's signing keys)
* ``layers``: layers diff (two images' environment layers, down to the first differing file)

The shared helpers (``Ctx``, ``run``, ``emit``, ``table``, the option decorators) are in
``common`` and re-exported here. Every command imports its heavy modules inside the function.
"""

from __future__ import annotations

import click

from .. import __version__
from . import admin, build, bundle, certify, export, gc, keys, layers, registry, researchers
from .common import BUILDER_CHOICES, SPEC, STORE_HELP, Ctx, EnvkitGroup, builder_option, emit, json_option, run, table

__all__ = ["main", "BUILDER_CHOICES", "SPEC", "STORE_HELP", "Ctx", "builder_option", "emit", "json_option", "run",
           "table"]


@click.group(cls=EnvkitGroup)
@click.version_option(__version__, prog_name="envkit")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option("-v", "--verbose", is_flag=True, help="Show every build log line.")
@click.pass_context
def main(ctx: click.Context, debug: bool, verbose: bool) -> None:
    """Resolve, render, build and verify GPU software stacks."""
    ctx.obj = {"debug": debug, "verbose": verbose}


for _command in (
    build.resolve_cmd,
    build.lock_cmd,
    build.explain_cmd,
    build.render_cmd,
    build.build_cmd,
    bundle.bundle_group,
    build.verify_cmd,
    export.export_group,
    layers.layers_group,
    admin.doctor_cmd,
    gc.gc_cmd,
    certify.certify_cmd,
    admin.catalog_group,
    certify.nightly_cmd,
    researchers.ls_cmd,
    researchers.show_cmd,
    researchers.pull_cmd,
    researchers.run_cmd,
    admin.schema_cmd,
    registry.registry_group,
    keys.keys_group,
):
    main.add_command(_command)
del _command
