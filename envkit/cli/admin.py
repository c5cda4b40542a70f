"""Commands for whoever runs envkit's hosts and data: doctor, the team.yaml schema, the catalog."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import click

from ..frameworks import ARCH_LISTED, NAMES
from ..ops.findings import Finding
from .common import SPEC, STORE, STORE_HELP, _ctx, emit, json_option, refresh_framework_option, run, table


@click.command("doctor")
@click.option("--store", "store_url", type=STORE, default=None, help=STORE_HELP)
@click.option("--spec", "spec_path", type=SPEC, default=None,
              help="Check this team.yaml's package index (build.index_url), the PyTorch variant indexes its images "
                   "need (build.variant_index_url's mirror, else PyTorch's own) and its CA bundle (build.ca_bundle), "
                   "as resolve and build use them (default: ./team.yaml when there is one; else PyPI and "
                   "$ENVKIT_CA_BUNDLE, else $PIP_CERT).")
@click.option("--offline", is_flag=True, envvar="ENVKIT_OFFLINE",
              help="Ask no package index (the index check reports skip); also $ENVKIT_OFFLINE=1.")
@json_option
@click.pass_context
def doctor_cmd(
    click_ctx: click.Context, store_url: str | None, spec_path: Path | None, offline: bool, json_out: bool
) -> None:
    """Is this host ready? Engine, NVIDIA runtime, GPUs and driver, debootstrap, CA bundle, whether the
    package index answers through it, BuildKit, the catalog in use and the history store (read, never created).

    Every check runs. Exit 0 when none fails; else the first failing check's code: 6 the engine or this host
    (engine, GPUs, disk, ...), 2 the CA bundle or the catalog, 3 the package index, 9 the history store."""
    from ..engine.docker_engine import connect
    from ..ops.doctor import diagnose
    from ..ops.findings import exit_code

    c = _ctx(click_ctx, json_out)
    found_here = spec_path is None and DEFAULT_SPEC.is_file()
    if found_here:
        spec_path = DEFAULT_SPEC
    findings = run(c, lambda: diagnose(connect, store_url, spec_path=spec_path, offline=offline))
    code = exit_code(findings)

    def human() -> None:
        if spec_path is not None:
            here = " (found in this directory; --spec names another)" if found_here else ""
            click.echo(f"spec: {spec_path}{here}")
        for line in findings_lines(findings, min(DOCTOR_WIDTH, shutil.get_terminal_size((DOCTOR_WIDTH, 24)).columns)):
            click.echo(line)

    emit(c, {"findings": [f.to_json() for f in findings], "exit_code": code,
             "spec": str(spec_path) if spec_path is not None else None}, human)
    if code:
        sys.exit(code)


DEFAULT_SPEC = Path("team.yaml")  # doctor reads it when it is in the working directory
DOCTOR_WIDTH = 100  # doctor's lines fit a 100-column terminal (or a narrower one)


def findings_lines(findings: list[Finding], width: int = DOCTOR_WIDTH) -> list[str]:
    """One block per check: name, status and value, then the hint, each wrapped to ``width`` columns."""
    name_w = max([len("CHECK"), *(len(f.name) for f in findings)])
    lead = name_w + 2 + 8
    body = max(20, width - lead)
    lines = [f"{'CHECK':{name_w}}  {'STATUS':8}VALUE"]
    for f in findings:
        value = textwrap.wrap(str(f.value), body, break_on_hyphens=False) or [""]
        lines.append(f"{f.name:{name_w}}  {f.status:8}{value[0]}".rstrip())
        lines += [" " * lead + v for v in value[1:]]
        hint = textwrap.wrap(f"hint: {f.hint}", body, break_on_hyphens=False) if f.hint else []
        lines += [" " * lead + h for h in hint]
    return [line if len(line) <= width else line[:width - 3] + "..." for line in lines]


@click.group("catalog")
def catalog_group() -> None:
    """The compatibility catalog."""


@catalog_group.command("refresh")
@click.option("--apply", "apply_", is_flag=True, help="Write the proposed rows into the catalog.")
@refresh_framework_option("--framework")
@json_option
@click.pass_context
def catalog_refresh_cmd(click_ctx: click.Context, apply_: bool, frameworks: tuple[str, ...], json_out: bool) -> None:
    """Read new PyTorch, JAX and TensorFlow releases from the package index and propose catalog
    rows (a reviewable diff; --json lists them per framework)."""
    from ..app.catalog import refresh_catalog

    c = _ctx(click_ctx, json_out)
    summary = run(c, lambda: refresh_catalog(apply=apply_, frameworks=frameworks, progress=c.progress))

    def human() -> None:
        for note in summary["notes"] + summary["warnings"]:
            click.echo(f"note: {note}", err=True)
        for skip in summary["skipped"]:
            click.echo(f"skipped: {skip['framework']} {skip['version']}, excluded on purpose ({skip['location']}): "
                       f"{skip['reason']} (source: {'; '.join(skip['sources'])})", err=True)
        click.echo(summary["diff"] or "the catalog is up to date with the index")
        if summary["changed"] and not apply_:
            click.echo("review the diff, then run `envkit catalog refresh --apply`", err=True)

    emit(c, summary, human)


@catalog_group.command("exclude")
@click.argument("framework", type=click.Choice(NAMES))
@click.argument("version")
@click.option("--reason", required=True, help="Why the release is left out (a bug, a regression, a policy).")
@click.option("--source", required=True,
              help="Where the reason comes from: a key of sources.yaml, or a URL/citation (added to sources.yaml "
                   "as excluded_<framework>_<version>).")
@json_option
@click.pass_context
def catalog_exclude_cmd(
    click_ctx: click.Context, framework: str, version: str, reason: str, source: str, json_out: bool
) -> None:
    """Leave FRAMEWORK VERSION out on purpose: `catalog refresh` stops proposing it and the resolver never
    picks it. Written into the catalog in use ($ENVKIT_CATALOG, else the packaged one) like `refresh --apply`."""
    from datetime import date

    from ..catalog.files import CATALOG_ENV, team_dir
    from ..catalog.refresh.exclude import exclude_release

    c = _ctx(click_ctx, json_out)
    done = run(c, lambda: exclude_release(framework, version, reason=reason, source=source,
                                          today=date.today().isoformat()))

    def human() -> None:
        click.echo(done.diff(), nl=False)
        click.echo(f"excluded {framework} {version} in {done.data_dir}: refresh will not propose it and the "
                   "resolver will not pick it; locks resolved before are stale (`envkit lock --check`)", err=True)
        if done.listed:
            click.echo(f"note: the catalog also lists {framework} {version} as a release; the exclusion wins",
                       err=True)
        else:  # ahead of a refresh, or a typo: say which, since either is written without complaint
            click.echo(f"note: the catalog lists no {framework} {version} yet: the exclusion keeps a refresh from "
                       f"proposing it; if you meant a listed release, remove this row from "
                       f"{done.data_dir / done.results[-1].filename} and exclude that one", err=True)
        if team_dir() is None:
            click.echo(f"note: this is the catalog packaged with envkit; a team keeps its own copy "
                       f"(`envkit catalog export DIR`, then {CATALOG_ENV}=DIR)", err=True)

    emit(c, done.to_json(), human)


@catalog_group.command("check-arches")
@click.option("--apply", "apply_", is_flag=True, help="Write the wheels' arch lists into the catalog.")
@click.option("--framework", "frameworks", type=click.Choice(ARCH_LISTED), multiple=True,
              help=f"Check only this framework (repeatable; default: {' and '.join(ARCH_LISTED)}).")
@json_option
@click.pass_context
def catalog_check_arches_cmd(
    click_ctx: click.Context, apply_: bool, frameworks: tuple[str, ...], json_out: bool
) -> None:
    """Compare the catalog's compiled arch lists with the wheels on the package index (the default
    torch variant of each series, each TensorFlow release) and propose corrections (a reviewable diff)."""
    from ..app.catalog import check_catalog_arches

    c = _ctx(click_ctx, json_out)
    summary = run(c, lambda: check_catalog_arches(apply=apply_, frameworks=frameworks, progress=c.progress))

    def human() -> None:
        table(
            [
                [
                    r["framework"],
                    r["version"],
                    r["variant"],
                    r["catalog"],  # torch: TORCH_CUDA_ARCH_LIST; tf: flags
                    r.get("read") or " ".join(r.get("flags") or []) or "-",
                    r["status"],
                ]
                for r in summary["rows"]
            ],
            ["FRAMEWORK", "VERSION", "VARIANT", "CATALOG", "WHEEL", "STATUS"],
        )
        for note in summary["notes"] + summary["warnings"]:
            click.echo(f"note: {note}", err=True)
        click.echo(summary["diff"] or "the catalog's arch lists agree with every wheel read")
        if summary["changed"] and not apply_:
            click.echo("review the diff, then run `envkit catalog check-arches --apply`", err=True)

    emit(c, summary, human)


@catalog_group.command("export")
@click.argument("dest", type=click.Path(path_type=Path))
@json_option
@click.pass_context
def catalog_export_cmd(click_ctx: click.Context, dest: Path, json_out: bool) -> None:
    """Copy the catalog into DEST, for a team to keep, review and refresh (then set ENVKIT_CATALOG=DEST)."""
    from ..catalog.files import CATALOG_ENV, export_catalog

    c = _ctx(click_ctx, json_out)
    path = run(c, lambda: export_catalog(dest))
    emit(c, {"catalog": str(path), "env": {CATALOG_ENV: str(path.resolve())}},
         lambda: click.echo(f"wrote {path}; use it with: export {CATALOG_ENV}={path.resolve()}"))


@click.command("schema")
@json_option
def schema_cmd(json_out: bool) -> None:
    """Print the JSON Schema of team.yaml (always JSON; --json is accepted as every command accepts it)."""
    from ..spec import json_schema

    click.echo(json.dumps(json_schema(), indent=2, sort_keys=True))
