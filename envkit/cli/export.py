"""`envkit export`: a built image in the form another runtime reads (a SIF file for Apptainer sites)."""

from __future__ import annotations

from pathlib import Path

import click

from .common import IMAGE, _ctx, emit, json_option, run, table


@click.group("export")
def export_group() -> None:
    """A built image in the form another runtime reads."""


@export_group.command("sif")
@click.argument("image", type=IMAGE)
@click.option("--sif", "out", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="The SIF file to write (written beside it, renamed into place when complete; an existing file "
                   "is replaced). Default: <name>_<tag>.sif here.")
@json_option
@click.pass_context
def export_sif_cmd(click_ctx: click.Context, image: str, out: Path | None, json_out: bool) -> None:
    """Write IMAGE (a local image of the engine) as a SIF file (--sif FILE) for Apptainer sites.

    Assembled with Debian's skopeo, umoci, squashfs-tools and siftool (`apt-get install skopeo umoci
    squashfs-tools siftool`; a missing one is exit 6): the root file system as a squashfs partition, the
    image's labels (lock hash, pins) as JSON and in /.singularity.d/labels.json, and a definition file.
    Run it with `apptainer exec --nv FILE CMD`. Apptainer itself is not installed on envkit's test hosts (no
    Debian package), so the tests read the SIF back but never run it. An image not in the engine is exit 6.
    """
    from ..app.export import export_image_sif
    from ..engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    r = run(c, lambda: export_image_sif(engine, image, out, progress=c.progress))

    def human() -> None:
        table([[o["id"], o["type"], o["position"]] for o in r.objects], ["ID", "TYPE", "POSITION"])
        click.echo(f"wrote {r.path}: {image} ({r.image_id[:19]}), {r.size / 2**20:.1f} MiB\n"
                   f"run it where Apptainer is: apptainer exec --nv {r.path} CMD")

    emit(c, r.to_json(), human)
