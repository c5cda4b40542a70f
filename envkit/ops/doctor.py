"""`envkit doctor`: is this host ready to build and certify, and does the package index answer
through the CA bundle and proxy that resolve and build will use?"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..catalog.files import CATALOG_ENV, data_dir, load_catalog, perf_path, team_dir
from ..catalog.perf import load_perf
from ..certify.gate import host_gpus
from ..engine.buildkit import BuildKitBuilder
from ..engine.space import DISK_FAIL, DISK_WARN, free_bytes, reclaim_hint
from ..errors import EnvkitError
from ..index.urls import DEFAULT_INDEX
from ..spec import load_spec
from ..store.backends import NOT_A_STORE_HINT, PostgresBackend, directory_error
from ..store.migrations import SCHEMA_VERSION
from ..store.records import default_path, locate
from ..support import scratch
from .doctor_index import MIRROR_HINT, framework_indexes, index_finding, trust_for
from .findings import Finding
from .gc_plan import CONTAINER_GRACE

if TYPE_CHECKING:
    from ..engine.docker_engine import DockerEngine
    from ..engine.inventory import ImageHost
    from ..engine.protocol import Engine
# the variables a CA bundle comes from when the spec names none, in order: doctor names one that points
# nowhere (the choice itself skips it quietly)


def diagnose(connect: Callable[[], DockerEngine], store_url: str | None = None, *, spec_path: Path | None = None,
             offline: bool = False) -> list[Finding]:
    """``connect`` returns an engine or raises EngineError; ``store_url`` as ``--store`` takes it;
    ``spec_path``: check that spec's index and CA bundle; ``offline``: ask no index."""
    spec = load_spec(spec_path) if spec_path is not None else None

    findings: list[Finding] = []
    engine = None
    try:
        engine = connect()
        v = engine.version()
        findings.append(
            Finding("engine", "ok", f"{v['engine']} {v['version']} (API {v['api']}, {v['os']}/{v['arch']})")
        )
        has_nvidia = engine.nvidia_runtime()
        findings.append(
            Finding(
                "nvidia_runtime",
                "ok" if has_nvidia else "warn",
                "registered" if has_nvidia else "not registered",
                ""
                if has_nvidia
                else "install the NVIDIA Container Toolkit to certify on GPUs "
                "(nvidia-ctk runtime configure --runtime=docker); builds and verification work without it",
            )
        )
    except EnvkitError as exc:
        findings.append(Finding("engine", "fail", exc.message, exc.hint or ""))
    gpus, why = host_gpus()
    if why is None:
        findings.append(Finding("gpus", "ok", "; ".join(f"{g.name}, {g.driver}, {g.cc}" for g in gpus)))
    elif shutil.which("nvidia-smi"):
        findings.append(Finding("gpus", "fail", why))
    else:
        findings.append(Finding("gpus", "skip", why,
                                "images can be built and verified here; certification needs a GPU host"))
    deb = shutil.which("debootstrap") or (os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap")
    findings.append(Finding("debootstrap", "ok" if deb else "warn", deb or "not installed",
                            "" if deb else "apt-get install debootstrap, to make `bootstrap:` bases"))
    trust = trust_for(spec)
    findings.append(trust.finding)
    index_url = (spec.build.index_url if spec else None) or DEFAULT_INDEX
    if offline:
        findings.append(Finding("index", "skip", f"{index_url} not asked (--offline)"))
    elif not trust.usable:
        findings.append(Finding("index", "skip", f"{index_url} not asked: resolve stops at the CA bundle",
                                "fix ca_bundle first"))
    else:
        findings.append(index_finding(index_url, trust.bundle))
        for url, images in (framework_indexes(spec) if spec is not None else {}).items():
            found = index_finding(url, trust.bundle, project="torch")  # a variant index holds its framework
            hint = found.hint
            if found.status == "fail" and spec is not None and not spec.build.variant_index_url \
                    and "login" not in found.value:
                hint = (f"{hint}; " if hint else "") + MIRROR_HINT
            findings.append(Finding("framework_index", found.status, f"{found.value} (for {', '.join(images)})", hint))
    if engine is not None:
        findings.append(disk_finding(engine))
        findings.append(buildkit_finding(engine))
        findings.append(containers_finding(engine.image_host()))
    findings.append(scratch_finding())
    findings.append(catalog_finding())
    findings.append(store_finding(store_url))
    return findings


def disk_finding(engine: Engine) -> Finding:
    """Free space where the engine keeps images (a full disk fails builds midway), and what to reclaim."""
    try:
        usage = engine.disk_usage()
    except Exception as exc:  # noqa: BLE001 - an engine that cannot say is a warning, not a crash
        return Finding("disk", "warn", f"the engine did not report its disk usage: {exc}")
    gib = 1 << 30
    held = f"images {usage['images_bytes'] / gib:.1f} GiB, BuildKit cache {usage['build_cache_bytes'] / gib:.1f} GiB"
    root = usage.get("root")
    free = free_bytes(root)
    if free is None:
        return Finding("disk", "skip", f"{held}; free space not measured (the engine's {root or 'data root'} is not on "
                                       "this host)")
    value = f"{free / gib:.1f} GiB free on {root} ({held})"
    if free >= DISK_WARN:
        return Finding("disk", "ok", value)
    hint = reclaim_hint(usage)
    return Finding("disk", "fail" if free < DISK_FAIL else "warn",
                   value + (": too little for a CUDA framework build (about 6 GB and as much again to build it)"
                            if free < DISK_FAIL else ": a few CUDA framework builds will fill it"), hint)


def containers_finding(host: ImageHost) -> Finding:
    """The stopped containers a killed envkit left (``host``: gc's view of the engine): each keeps its
    multi-GB image from `envkit gc` until it is removed."""
    try:
        left = host.leftover_containers(None)
    except Exception as exc:  # noqa: BLE001 - an engine that cannot say is a warning, not a crash
        return Finding("containers", "warn", f"the engine did not list envkit's containers: {exc}")
    if not left:
        return Finding("containers", "ok", "no stopped container left by a killed envkit")
    roles = ", ".join(f"{n} {role}" for role, n in sorted(Counter(c.role for c in left).items()))
    return Finding("containers", "warn", f"{len(left)} stopped container(s) left by a killed envkit ({roles})",
                   f"`envkit gc` removes them once stopped {CONTAINER_GRACE.total_seconds() / 60:g} min, and then "
                   "judges the images they kept")


def scratch_finding(root: Path | None=None) -> Finding:
    """The scratch directories a killed envkit left under the temporary directory (``support/scratch.py``): build
    contexts and rootfs trees of hundreds of MB, and the build secrets' netrc, a credential on disk."""
    left = scratch.leftovers(root)
    if not left:
        return Finding("scratch", "ok", "no scratch directory left by a killed envkit")
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(d.kind.split("-")[0] for d in left).items()))
    mounted = sum(1 for d in left if d.mounts)
    return Finding(
        "scratch",
        "warn",
        f"{len(left)} scratch director(ies) left by a killed envkit ({kinds}; "
        f"{sum(d.bytes for d in left) / 1e6:.1f} MB"
        + (f"; {mounted} with a mount still in it" if mounted else "")
        + f") in {left[0].path.parent}",
        "`envkit gc` removes them"
        + (" (it unmounts first what a killed debootstrap left mounted: run it as root)" if mounted else ""),
    )


def buildkit_finding(engine: Engine) -> Finding:
    builder = BuildKitBuilder(engine)
    problem = builder.unavailable()
    if problem is None:
        return Finding("buildkit", "ok", f"{builder.cli} (--builder buildkit)")
    return Finding("buildkit", "warn", problem[0], problem[1])


def catalog_finding() -> Finding:
    where = data_dir()
    origin = f"${CATALOG_ENV}" if team_dir() is not None else "packaged"

    try:
        digest = load_catalog(where).digest
        models = sum(len(f.models) for f in load_perf().floors)  # certify judges these: a broken file fails it
    except EnvkitError as exc:
        return Finding("catalog", "fail", exc.message, exc.hint or "")
    return Finding("catalog", "ok", f"{where} ({origin}, {digest[:19]}); performance floors for {models} GPU "
                                    f"model(s) from {perf_path()}")


def store_finding(store_url: str | None) -> Finding:
    """Where the history store is and whether it answers, without creating or migrating it."""
    import sqlite3


    try:
        target = locate(store_url)
    except EnvkitError as exc:
        return Finding("store", "fail", exc.message, exc.hint or "")
    if target.url is not None:
        try:
            backend = PostgresBackend.open(target.url)
        except EnvkitError as exc:
            return Finding("store", "fail", exc.message, exc.hint or "")
        try:
            server = backend.query("SHOW server_version")[0]["server_version"]
            exists = backend.query("SELECT to_regclass('schema_version') IS NOT NULL AS e")[0]["e"]
            version = backend.schema_version() if exists else 0
        finally:
            backend.close()
        return _schema_finding(f"{target} (PostgreSQL {server})", version, SCHEMA_VERSION)
    path = target.path or default_path()
    if path.is_dir():
        error = directory_error(path)
        return Finding("store", "fail", error.message, error.hint or "")
    if not path.exists():
        return Finding("store", "ok", f"{path} (SQLite; created on first use)")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        return Finding("store", "fail", f"{path} is not readable as a history database: {exc}",
                       NOT_A_STORE_HINT)
    return _schema_finding(f"{path} (SQLite)", version, SCHEMA_VERSION)


def _schema_finding(where: str, version: int, known: int) -> Finding:
    if version > known:
        return Finding("store", "fail", f"{where}: schema version {version}, newer than this envkit ({known})",
                       "upgrade envkit to the version that wrote it")
    note = (
        "up to date"
        if version == known
        else f"schema {version}, migrated to {known} by the next command that uses it (doctor never changes it)"
    )
    return Finding("store", "ok", f"{where}, {note}")
