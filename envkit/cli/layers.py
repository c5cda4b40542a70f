"""`envkit layers diff`: where two images' environment layers part, down to the first differing file."""

from __future__ import annotations

import sys

import click

from .common import IMAGE, _ctx, emit, json_option, run, table

DIFFERENT = 18  # the environment layers differ (as `nightly --reproducible`'s layers against the lock's record)


@click.group("layers")
def layers_group() -> None:
    """Compare images' layers (two builds of one lock should give the same environment layers)."""


@layers_group.command("diff")
@click.argument("image_a", type=IMAGE)
@click.argument("image_b", type=IMAGE)
@click.option("--engine-b", "engine_b", metavar="URL", default=None,
              help="The engine IMAGE_B is on (unix://..., tcp://HOST:2376, ssh://USER@HOST). Default: IMAGE_A's "
                   "(DOCKER_HOST, else the local socket).")
@json_option
@click.pass_context
def layers_diff_cmd(click_ctx: click.Context, image_a: str, image_b: str, engine_b: str | None,
                    json_out: bool) -> None:
    """Compare the environment layers of IMAGE_A and IMAGE_B, and name the first differing file.

    Two images `build --reproducible` made are compared by their layer groups (cuda, framework, extra, then the
    payload), read from their labels; other images layer by layer from the lowest. For the first layer that
    differs, both images are saved as streams (only that layer is kept, in a scratch directory) and its tars
    compared member by member: the first differing file's path and which of its type, size, mode, uid/gid,
    owner, mtime, link target, PAX headers (xattrs) or content differs, or that it is in one image only; and how
    many members differ. Exit 0 when the layers are the same, 18 when they differ, 6 when an image is not in its
    engine or the engine cannot be reached.
    """
    from ..app.layers import diff_images, explain
    from ..engine.docker_engine import connect

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    other = run(c, lambda: connect(engine_b)) if engine_b else engine
    result = run(c, lambda: diff_images(engine, image_a, other, image_b))

    def human() -> None:
        table([[r.name, r.a[:19], r.b[:19], "same" if r.same else "DIFFERENT"] for r in result.rows],
              ["LAYER", "A", "B", ""])
        click.echo(explain(result))

    emit(c, result.to_json(), human)
    if not result.same:
        sys.exit(DIFFERENT)
