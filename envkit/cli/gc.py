"""`envkit gc`: reclaim a build host's disk from old envkit images (for whoever runs the build hosts)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ..support.progress import decimal_size
from .common import STORE, STORE_HELP, TEAM, _ctx, emit, json_option, run, table

if TYPE_CHECKING:
    from ..ops.gc import GcResult


_bytes = decimal_size  # decimal units, as `docker system df` prints them


@click.command("gc")
@click.option("--team", type=TEAM, default=None, metavar="TEAM",
              help="Only this team's images (their io.envkit.team label). Default: every envkit team on this host.")
@click.option("--keep", type=click.IntRange(min=1), default=2, show_default=True,
              help="Builds to keep per (team, image), newest first by the image's creation time.")
@click.option("--dry-run", is_flag=True, help="Say what would be kept and removed; remove nothing.")
@click.option(
    "--store",
    "store_url",
    type=STORE,
    default=None,
    help=STORE_HELP + " Its certificates and :certified pushes keep images.",
)
@click.option(
    "--build-cache",
    "cache_hours",
    type=click.IntRange(min=0),
    default=None,
    metavar="HOURS",
    help="Then prune BuildKit's build cache records not used in the last HOURS hours (0: every one no "
    "build is using), as `docker builder prune --filter until=HOURSh` does: never one an image still "
    "here shares, nor BuildKit's own. The cache is the engine's, not a team's: --team does not narrow it.",
)
@json_option
@click.pass_context
def gc_cmd(
    click_ctx: click.Context,
    team: str | None,
    keep: int,
    dry_run: bool,
    store_url: str | None,
    cache_hours: int | None,
    json_out: bool,
) -> None:
    """Remove envkit images this host no longer needs, keeping per (team, image) the --keep newest builds,
    the newest certified one on each GPU model (the store's certificates), the one each :certified
    reference points at, and any a container (running or stopped) uses. Then the classic builder's stage
    images (envkit's stage label) of builds that are gone, unless under an hour old. First, the stopped
    containers a killed envkit left (its container label; stopped over 10 minutes ago), and its scratch
    directories under $TMPDIR (this host's, whose process is gone). Only images with
    envkit's labels are considered: never a base image (envkit-base/*) or another tool's image; BuildKit's
    build cache only with --build-cache."""
    from ..engine.docker_engine import connect
    from ..errors import EngineError
    from ..ops.gc import collect_garbage
    from ..ops.gc_plan import unused_for

    c = _ctx(click_ctx, json_out)
    engine = run(c, connect)
    cutoff = None if cache_hours is None else unused_for(cache_hours)
    result = run(c, lambda: collect_garbage(engine.image_host(), store_url, team=team, keep=keep,
                                            dry_run=dry_run, progress=c.progress, build_cache=cutoff))

    emit(c, result.to_json(), lambda: _table(result, team, dry_run))
    if result.failed or result.failed_containers or result.failed_scratch or result.cache_error:
        sys.exit(EngineError.exit_code)


def _table(result: GcResult, team: str | None, dry_run: bool) -> None:
    rows = _rows(result, dry_run)
    if rows:
        table(rows, ["ACTION", "ITEM", "CREATED", "UNIQUE SIZE", "WHY"])  # images, containers, directories
    _say_left_behind(result, dry_run)
    _say_images(result, team, dry_run)
    _say_cache(result, dry_run)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)


def _rows(result: GcResult, dry_run: bool) -> list[list[str]]:
    """A row per scratch directory, container, build and stage image: what gc did or would do, and why."""
    failed = {d.image.id: result.removals[d.image.id].error for d in result.failed}
    rows = []
    for d in result.scratch:
        error = result.scratch_removals.get(str(d.path))
        action = "would remove" if dry_run else ("FAILED" if error else "removed")
        what = f"left by envkit process {d.pid}, which is gone" + (
            f"; mounted: {', '.join(d.mounts)}" if d.mounts else ""
        )
        rows.append(
            [action, f"directory {d.path}", "-", _bytes(d.bytes), f"not removed: {error}" if error else what]
        )
    for c in result.containers:
        error = result.container_removals.get(c.container.id)
        action = "keep" if c.keep else ("would remove" if dry_run else ("FAILED" if error else "removed"))
        rows.append([action, f"container {c.container.name} ({c.container.role}, {c.container.state})",
                     c.container.ended.strftime("%Y-%m-%d %H:%M"), "-",
                     f"not removed: {error}" if error else "; ".join(c.reasons)])
    for i in (*result.decisions, *result.stages):
        action = (
            "keep" if i.keep else ("would remove" if dry_run else ("FAILED" if i.image.id in failed else "removed"))
        )
        size = i.image.unique_size if i.image.unique_size is not None else i.image.size
        why = "; ".join(i.reasons) if i.image.id not in failed else f"not removed: {failed[i.image.id]}"
        rows.append([action, i.image.name, i.image.created.strftime("%Y-%m-%d %H:%M"), _bytes(size), why])
    return rows


def _say_left_behind(result: GcResult, dry_run: bool) -> None:
    """The scratch directories and stopped containers a killed envkit left."""
    if result.scratch:
        done = len(result.scratch) if dry_run else len(result.removed_scratch)
        click.echo(f"{'would remove' if dry_run else 'removed'} {done} scratch director(ies) a killed envkit left "
                   f"({_bytes(sum(d.bytes for d in result.scratch))})"
                   + (f"; {len(result.failed_scratch)} could not be removed" if result.failed_scratch else ""))
    if result.containers_to_remove:
        done = (len(result.containers_to_remove) if dry_run else len(result.removed_containers))
        click.echo(
            f"{'would remove' if dry_run else 'removed'} {done} stopped container(s) a killed envkit left"
            + (f"; {len(result.failed_containers)} could not be removed" if result.failed_containers else "")
        )


def _say_images(result: GcResult, team: str | None, dry_run: bool) -> None:
    scope = f"team {team}" if team else "every envkit team on this host"
    reclaimed, exact = result.reclaimed()
    amount = _bytes(reclaimed) + ("" if exact else " at most")
    total = len(result.decisions) + len(result.stages)
    counted = f"{total} image(s) ({len(result.decisions)} build(s), {len(result.stages)} stage image(s))"
    if not total:
        click.echo(f"no envkit images of {scope} here")
    elif dry_run:
        click.echo(f"dry run ({scope}): would remove {len(result.to_remove)} of {counted}, "
                   f"reclaiming {amount}; nothing was removed")
    else:
        click.echo(f"{scope}: removed {len(result.removed)} of {counted}, reclaimed {amount}"
                   + (f"; {len(result.failed)} could not be removed" if result.failed else ""))
        if result.layers:
            before, after = result.layers
            click.echo(
                f"the engine's image layers: {_bytes(before)} -> {_bytes(after)} ({_bytes(before - after)} freed)"
            )


def _say_cache(result: GcResult, dry_run: bool) -> None:
    cache = result.cache_json()
    if cache is None:
        return
    prune = result.cache_to_prune
    held = f"{len(result.cache)} record(s), {_bytes(sum(d.record.size for d in result.cache))}"
    if cache["error"]:
        click.echo(f"BuildKit's build cache ({held}): the prune failed: {cache['error']}")
    elif dry_run:
        click.echo(f"BuildKit's build cache ({held}): would prune {len(prune)} record(s) not used since "
                   f"{cache['since']}, {_bytes(cache['would_free_bytes'])}")
    else:
        click.echo(f"BuildKit's build cache ({held} before): pruned {len(cache['pruned'])} record(s) not used "
                   f"since {cache['since']}, {_bytes(cache['freed_bytes'])} freed")
