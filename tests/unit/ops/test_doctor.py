"""envkit doctor's store, catalog and disk findings: where things are, without creating anything."""

import sqlite3

import pytest

from envkit.ops.doctor import catalog_finding, store_finding
from envkit.store.migrations import SCHEMA_VERSION
from envkit.store.history import Store
from envkit.store.records import STORE_ENV


def test_a_missing_sqlite_store_is_fine_and_not_created(tmp_path, monkeypatch):
    monkeypatch.delenv(STORE_ENV, raising=False)
    path = tmp_path / "h.sqlite"
    f = store_finding(str(path))
    assert f.status == "ok" and "created on first use" in f.value
    assert not path.exists()


def test_sqlite_store_versions(tmp_path):
    path = tmp_path / "h.sqlite"
    with Store.open(path):
        pass
    assert store_finding(f"sqlite:///{path}").value.endswith("up to date")
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    f = store_finding(str(path))
    assert f.status == "fail" and "newer than this envkit" in f.value
    (tmp_path / "junk.sqlite").write_bytes(b"not a database" * 100)
    assert store_finding(str(tmp_path / "junk.sqlite")).status == "fail"


def test_postgres_store_is_read_not_migrated(postgres_url):
    f = store_finding(postgres_url)
    assert f.status == "ok" and "PostgreSQL" in f.value and f"schema 0, migrated to {SCHEMA_VERSION}" in f.value
    with Store.open(postgres_url):
        pass
    assert store_finding(postgres_url).value.endswith("up to date")


def test_unreachable_postgres_and_env_default(monkeypatch):
    f = store_finding("postgresql://envkit:pw@127.0.0.1:1/envkit")
    assert f.status == "fail" and "cannot connect" in f.value and ":pw@" not in f.value
    monkeypatch.setenv(STORE_ENV, "postgresql://envkit@127.0.0.1:1/envkit")
    assert store_finding(None).status == "fail"


def test_catalog_finding_names_the_team_copy(tmp_path, monkeypatch):
    from envkit.catalog.files import CATALOG_ENV, export_catalog

    assert "packaged" in catalog_finding().value
    monkeypatch.setenv(CATALOG_ENV, str(export_catalog(tmp_path / "cat")))
    f = catalog_finding()
    assert f.status == "ok" and f"${CATALOG_ENV}" in f.value
    monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "missing"))
    assert catalog_finding().status == "fail"


# --- disk ---------------------------------------------------------------------------------------

class _Disk:
    def __init__(self, root, images=40 << 30, cache=7 << 30):
        self.usage = {"root": str(root), "images_bytes": images, "build_cache_bytes": cache}

    def disk_usage(self):
        return self.usage


@pytest.mark.parametrize("free_gib, status", [(50, "ok"), (20, "warn"), (5, "fail")])
def test_disk_space_where_the_engine_keeps_images(tmp_path, monkeypatch, free_gib, status):
    import os
    from types import SimpleNamespace

    from envkit.ops.doctor import disk_finding

    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_bavail=free_gib << 18, f_frsize=4096))
    f = disk_finding(_Disk(tmp_path))
    assert f.status == status and f.value.startswith(f"{free_gib:.1f} GiB free on {tmp_path}")
    assert "images 40.0 GiB, BuildKit cache 7.0 GiB" in f.value
    if status != "ok":
        assert "envkit gc --dry-run" in f.hint and "envkit gc --build-cache 24" in f.hint


def test_a_remote_engines_disk_is_not_measured_here(tmp_path):
    from envkit.ops.doctor import disk_finding

    f = disk_finding(_Disk(tmp_path / "elsewhere"))
    assert f.status == "skip" and "not on this host" in f.value


# --- containers a killed envkit left ------------------------------------------------------------

def test_stopped_containers_a_killed_envkit_left_are_a_warning_naming_gc():
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from envkit.ops.doctor import containers_finding
    from envkit.engine.inventory import LeftContainer

    def host(*roles):
        when = datetime(2026, 12, 3, tzinfo=timezone.utc)
        left = [LeftContainer(f"c{i}", f"n{i}", r, "exited", "t/i:1", "sha256:i", when) for i, r in enumerate(roles)]
        return SimpleNamespace(leftover_containers=lambda team: left)

    assert containers_finding(host()).status == "ok"
    f = containers_finding(host("certify", "fetch-debs", "certify"))
    assert (f.status, f.value) == ("warn", "3 stopped container(s) left by a killed envkit (2 certify, 1 fetch-debs)")
    assert f.hint.startswith("`envkit gc` removes them once stopped 10 min")

    def refuse(team):
        raise OSError("socket closed")

    assert containers_finding(SimpleNamespace(leftover_containers=refuse)).status == "warn"


# --- scratch directories a killed envkit left ---------------------------------------------------

def test_scratch_directories_a_killed_envkit_left_are_a_warning_naming_gc(tmp_path):
    import socket
    import subprocess
    import sys

    from envkit.ops.doctor import scratch_finding

    assert scratch_finding(tmp_path).status == "ok"
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    for kind, size in (("ctx-train", 1_500_000), ("ctx-jax", 0), ("secrets", 100)):
        path = tmp_path / f"envkit-{kind}-{socket.gethostname()}-{proc.pid}-abc"
        path.mkdir()
        (path / "f").write_bytes(b"0" * size)
    f = scratch_finding(tmp_path)
    assert (f.status, f.value) == ("warn", f"3 scratch director(ies) left by a killed envkit (2 ctx, 1 secrets; "
                                           f"1.5 MB) in {tmp_path}")
    assert f.hint.startswith("`envkit gc` removes them")

