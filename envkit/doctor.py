"""`envkit doctor`: is this host ready to build and certify?"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok | warn | fail | skip
    value: str
    hint: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def diagnose(connect, store_url: str | None = None) -> list[Finding]:
    """``connect`` returns an engine or raises EngineError; ``store_url`` as ``--store`` takes it."""
    from .errors import EnvkitError

    findings: list[Finding] = []
    engine = None
    try:
        engine = connect()
        v = engine.version()
        findings.append(Finding("engine", "ok", f"{v['engine']} {v['version']} (API {v['api']}, {v['os']}/{v['arch']})"))
        has_nvidia = engine.nvidia_runtime()
        findings.append(Finding("nvidia_runtime", "ok" if has_nvidia else "warn",
                                "registered" if has_nvidia else "not registered",
                                "" if has_nvidia else "install the NVIDIA Container Toolkit to certify on GPUs "
                                "(nvidia-ctk runtime configure --runtime=docker); builds and verification work without it"))
    except EnvkitError as exc:
        findings.append(Finding("engine", "fail", exc.message, exc.hint or ""))
    smi = shutil.which("nvidia-smi")
    if smi:
        proc = subprocess.run([smi, "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
                              capture_output=True, text=True)
        gpus = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
        findings.append(Finding("gpus", "ok" if proc.returncode == 0 and gpus else "fail",
                                "; ".join(gpus) or proc.stderr.strip()[:200]))
    else:
        findings.append(Finding("gpus", "skip", "no nvidia-smi on this host (no NVIDIA driver)",
                                "images can be built and verified here; certification needs a GPU host"))
    deb = shutil.which("debootstrap") or (os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap")
    findings.append(Finding("debootstrap", "ok" if deb else "warn", deb or "not installed",
                            "" if deb else "apt-get install debootstrap, to make `bootstrap:` bases"))
    ca = os.environ.get("ENVKIT_CA_BUNDLE") or os.environ.get("PIP_CERT")
    findings.append(Finding("ca_bundle", "ok", ca if ca and os.path.isfile(ca) else "none (direct TLS)"))
    if engine is not None:
        findings.append(buildkit_finding(engine))
    findings.append(catalog_finding())
    findings.append(store_finding(store_url))
    return findings


def buildkit_finding(engine) -> Finding:
    from .engine.buildkit import BuildKitBuilder

    builder = BuildKitBuilder(engine)
    problem = builder.unavailable()
    if problem is None:
        return Finding("buildkit", "ok", f"{builder.cli} (--builder buildkit)")
    return Finding("buildkit", "warn", problem[0], problem[1])


def catalog_finding() -> Finding:
    from .catalog import CATALOG_ENV, data_dir, load_catalog, team_dir
    from .errors import EnvkitError

    where = data_dir()
    origin = f"${CATALOG_ENV}" if team_dir() is not None else "packaged"
    try:
        digest = load_catalog(where).digest
    except EnvkitError as exc:
        return Finding("catalog", "fail", exc.message, exc.hint or "")
    return Finding("catalog", "ok", f"{where} ({origin}, {digest[:19]})")


def store_finding(store_url: str | None) -> Finding:
    """Where the history store is and whether it answers, without creating or migrating it."""
    import sqlite3

    from .errors import EnvkitError
    from .store import SCHEMA_VERSION, locate
    from .store.backends import PostgresBackend

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
    path = target.path
    if not path.exists():
        return Finding("store", "ok", f"{path} (SQLite; created on first use)")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        return Finding("store", "fail", f"{path} is not readable as a history database: {exc}",
                       "move it aside; envkit creates a fresh one on the next run")
    return _schema_finding(f"{path} (SQLite)", version, SCHEMA_VERSION)


def _schema_finding(where: str, version: int, known: int) -> Finding:
    if version > known:
        return Finding("store", "fail", f"{where}: schema version {version}, newer than this envkit ({known})",
                       "upgrade envkit to the version that wrote it")
    note = "up to date" if version == known else f"schema {version}, migrated to {known} on next use"
    return Finding("store", "ok", f"{where}, {note}")
