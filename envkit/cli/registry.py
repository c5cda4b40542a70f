"""Commands that look after the team registry itself: ``envkit registry prune``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .common import REGISTRY, _ctx, emit, json_option, run, table

if TYPE_CHECKING:
    from ..registry.retention import PruneResult

DEFAULT_KEEP = 5  # envkit.registry.retention.DEFAULT_KEEP (not imported here: the CLI starts without requests)


@click.group("registry")
def registry_group() -> None:
    """Look after the team registry (retention)."""


@registry_group.command("prune")
@click.argument("where", type=REGISTRY, metavar="REGISTRY[/PATH]")
@click.option("--keep", type=click.IntRange(min=0), default=DEFAULT_KEEP, show_default=True,
              help="Per repository, keep this many newest envkit images (by the time each was built).")
@click.option("--older-than", "older_than", type=click.IntRange(min=0), default=None, metavar="DAYS",
              help="Also keep every image built less than DAYS days ago (default: only --keep counts).")
@click.option("--dry-run", is_flag=True, help="Say what would be kept and deleted, and delete nothing.")
@json_option
@click.pass_context
def prune_cmd(
    click_ctx: click.Context, where: str, keep: int, older_than: int | None, dry_run: bool, json_out: bool
) -> None:
    """Delete old stack images, and their certificate artifacts, from REGISTRY (under PATH).

    Per repository it keeps what :certified points at, the --keep newest envkit images, those
    newer than --older-than, and every tag of a kept image; base mirrors and images envkit did
    not build are never touched. Deleting needs the registry's `storage.delete.enabled: true`;
    disk is freed only by the registry's own garbage collector (`registry garbage-collect`),
    which envkit cannot run.
    """
    from ..registry.retention import prune_registry
    from .researchers import _engine_for_registry

    c = _ctx(click_ctx, json_out)
    engine = _engine_for_registry(c, needed=False)
    result = run(c, lambda: prune_registry(engine, where, keep=keep, older_than_days=older_than, dry_run=dry_run,
                                           progress=None if json_out else c.progress))
    emit(c, result.to_json(), lambda: _human(result))
    for warning in result.warnings:  # on stderr in both modes (and in the JSON document as "warnings")
        click.echo(f"warning: {warning}", err=True)


def _human(result: PruneResult) -> None:
    verb = "would delete" if result.dry_run else "delete"
    rows = []
    for plan in result.repositories:
        for d in plan.images:
            tags = ", ".join(d.tags) or "-"
            action = (d.done or verb) if d.delete else "keep"
            rows.append([action, f"{result.registry}/{plan.repository}", tags, (d.created or "-")[:19],
                         "; ".join(d.reasons)])
        for a in plan.artifacts:
            if a.delete:
                rows.append([a.done or verb, f"{result.registry}/{plan.repository}", a.tag, "-", a.reason])
    if rows:
        table(rows, ["ACTION", "REPOSITORY", "TAGS", "BUILT", "WHY"])
    else:
        click.echo(f"no envkit images in {result.registry}{'/' + result.prefix if result.prefix else ''}")
    n = result.counts()
    what = "would be deleted" if result.dry_run else "deleted"
    click.echo(f"{n['images_deleted']} image(s) and {n['artifacts_deleted']} certificate artifact(s) {what}; "
               f"{n['images_kept']} image(s) kept")
    if result.skipped:
        click.echo(f"({len(result.skipped)} base mirror repository(ies) not touched; --json lists them)")
    from ..registry.retention import GC_NOTE

    click.echo(f"note: {GC_NOTE}")
