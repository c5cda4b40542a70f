"""The history store on both backends (a SQLite file; a real PostgreSQL server started for the
session, see tests/pgserver.py): migrations, upserts, regressions, snapshots, run locks, and
surviving SIGKILL."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from envkit.errors import EnvkitError, RunInProgressError, StoreError
from envkit.store.records import LEGACY_PATH, STORE_ENV, default_path
from envkit.store.migrations import MIGRATIONS, SCHEMA_VERSION, migrate
from envkit.store.backends import PostgresBackend
from envkit.store.history import Store

ROOT = Path(__file__).resolve().parents[3]


class Clock:
    """A deterministic clock: each call is one second after the last."""

    def __init__(self, start=datetime(2026, 1, 1, 2, 0, tzinfo=timezone.utc)):
        self.now = start

    def __call__(self):
        self.now += timedelta(seconds=1)
        return self.now


BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path):
    """Where a fresh store lives: a SQLite file, or an empty PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "h.sqlite")
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(store_url):
    with Store.open(store_url, clock=Clock()) as s:
        yield s


def tables(path) -> set[str]:
    with sqlite3.connect(path) as db:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# --- opening and migrations -------------------------------------------------------------------

def test_open_empty_applies_every_migration(tmp_path):
    path = tmp_path / "sub" / "h.sqlite"
    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    assert {"runs", "builds", "certificates", "metrics", "pushes", "steps", "mirrors", "schema_version"} <= tables(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        names = [r[0] for r in db.execute("SELECT name FROM schema_version ORDER BY version")]
    assert names == [name for name, _ in MIGRATIONS]


def test_sqlite_url_and_default_path(tmp_path, monkeypatch):
    with Store.open(f"sqlite:///{tmp_path}/u.sqlite") as s:  # sqlite:////abs/path
        s.start_run("d")
    assert (tmp_path / "u.sqlite").exists()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(STORE_ENV, raising=False)
    with Store.open("sqlite:///rel.sqlite"):
        pass
    assert (tmp_path / "rel.sqlite").exists()
    with Store.open():
        pass
    assert default_path().exists() and not (tmp_path / LEGACY_PATH).exists()


@pytest.mark.parametrize("url", ["postgresql://envkit:s3cret@127.0.0.1:1/envkit",
                                 "postgresql+psycopg://envkit:s3cret@127.0.0.1:1/envkit"])
def test_an_unreachable_database_is_a_clear_error_without_the_password(url):
    with pytest.raises(StoreError, match=r"cannot connect to the history database "
                                         r"postgresql(\+psycopg)?://envkit:\*\*\*@127.0.0.1:1/envkit") as err:
        Store.open(url)
    assert "s3cret" not in str(err.value)
    assert "PGPASSWORD" in err.value.hint and err.value.exit_code == 9


def test_postgres_without_the_driver_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    with pytest.raises(StoreError, match="needs the PostgreSQL driver, psycopg") as err:
        Store.open("postgresql://db.example/envkit")
    assert "envkit[postgres]" in err.value.hint


def test_unknown_scheme_and_the_environment_default(tmp_path, monkeypatch):
    with pytest.raises(StoreError, match="unknown history store URL scheme 'mysql'") as err:
        Store.open("mysql://u:pw@db/envkit")
    assert "pw" not in str(err.value).replace("postgresql", "")
    monkeypatch.setenv(STORE_ENV, str(tmp_path / "from-env.sqlite"))
    with Store.open() as s:
        assert s.where == str(tmp_path / "from-env.sqlite")


def test_not_a_database_is_a_clear_error(tmp_path):
    junk = tmp_path / "h.sqlite"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(EnvkitError, match="not an envkit history database"):
        Store.open(junk)


def test_migrating_a_version_1_database_keeps_its_rows(tmp_path):
    path = tmp_path / "v1.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    migrate(db, MIGRATIONS[:1])  # a file written by an envkit that knew only 001
    db.execute("INSERT INTO runs (started_at, spec_digest) VALUES ('2025-12-31T00:00:00.000000Z', 'spec1')")
    db.execute("""INSERT INTO builds (name, lock_hash, context_hash, tag, image_id, action, created_at)
                  VALUES ('torch25', 'L', 'C', 'vision/torch25:x', 'sha256:aa', 'built', 'then')""")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    db.close()
    assert "pushes" not in tables(path)

    with Store.open(path) as s:
        assert s.schema_version == SCHEMA_VERSION
        old = s.find_build("torch25", "L", "C")
        assert old.image_id == "sha256:aa" and (old.builder, old.envkit_version) == ("", "")  # not recorded then
        s.record_push("sha256:aa", "reg/vision/torch25:x", "sha256:dd", "stack")  # new table works
        assert [p.digest for p in s.pushes_for("sha256:aa")] == ["sha256:dd"]


def test_runner_applies_missing_migrations_in_order(tmp_path):
    calls = []

    def step(n):
        def run(db, dialect):
            calls.append(n)
            db.execute(f"CREATE TABLE t{n} (x)")
        return run

    ms = [(f"00{n}", step(n)) for n in (1, 2, 3)]
    db = sqlite3.connect(tmp_path / "m.sqlite", isolation_level=None)
    assert migrate(db, ms[:1]) == ["001"]
    assert migrate(db, ms) == ["002", "003"]
    assert calls == [1, 2, 3]
    assert migrate(db, ms) == []  # up to date: nothing runs
    assert calls == [1, 2, 3]
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3


def test_a_failing_migration_leaves_the_old_version(tmp_path):
    def bad(db, dialect):
        db.execute("CREATE TABLE half (x)")
        raise RuntimeError("boom")

    db = sqlite3.connect(tmp_path / "m.sqlite", isolation_level=None)
    migrate(db, MIGRATIONS[:1])
    with pytest.raises(RuntimeError):
        migrate(db, [*MIGRATIONS[:1], ("002_bad", bad)])
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'half'").fetchall()


def test_a_future_version_is_refused(tmp_path):
    path = tmp_path / "future.sqlite"
    with Store.open(path):
        pass
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(EnvkitError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this envkit") as err:
        Store.open(path)
    assert "upgrade envkit" in err.value.hint


# --- builds -----------------------------------------------------------------------------------

def test_build_upsert_is_one_row_and_keeps_built(store):
    run1 = store.start_run("spec")
    store.record_build("torch25", "L", "C", tag="t:1", image_id="sha256:a", size=10, seconds=100.0,
                       action="built", run_id=run1)
    run2 = store.start_run("spec")
    store.record_build("torch25", "L", "C", tag="t:1", image_id="sha256:a", size=10, seconds=0.1,
                       action="skipped", run_id=run2)
    b = store.find_build("torch25", "L", "C")
    assert (b.action, b.seconds, b.run_id, b.image_id) == ("built", 100.0, run2, "sha256:a")
    assert len(store.snapshot()["builds"]) == 1
    assert store.find_build("torch25", "L", "other") is None
    with pytest.raises(EnvkitError, match="build action"):
        store.record_build("x", "L", "C", tag="t", image_id="i", action="maybe")


# --- certificates, metrics, regressions --------------------------------------------------------

def test_certificate_upsert_is_idempotent(store):
    key = ("sha256:a", "H100", "550.54.15")
    for _ in range(3):
        store.record_certificate(*key, status="certified", lock_hash="L", document={"checks": [1, 2]},
                                 metrics={"bf16_matmul_tflops": 700.0, "nccl_busbw_gbps": 300.0})
    certs = store.certificates_for("sha256:a")
    assert len(certs) == 1
    assert certs[0].metrics == {"bf16_matmul_tflops": 700.0, "nccl_busbw_gbps": 300.0}
    # a re-certification replaces the status, document and metrics of that one key
    store.record_certificate(*key, status="failed", lock_hash="L", document={"why": "slow"},
                             metrics={"bf16_matmul_tflops": 10.0})
    (cert,) = store.certificates_for("sha256:a")
    assert (cert.status, cert.document, cert.metrics) == ("failed", {"why": "slow"}, {"bf16_matmul_tflops": 10.0})
    # another driver is another certificate
    store.record_certificate("sha256:a", "H100", "560.28.03", status="certified", lock_hash="L", document={})
    assert len(store.certificates_for("sha256:a")) == 2
    assert store.backend.query("SELECT count(*) AS n FROM metrics")[0]["n"] == 1


def test_last_certified_metric_and_regressions(store):
    store.record_certificate("sha256:old", "H100", "550", status="certified", lock_hash="L1", document={},
                             metrics={"bf16_matmul_tflops": 700.0, "h2d_gbps": 50.0})
    cutoff = store.clock.now + timedelta(microseconds=1)
    store.record_certificate("sha256:bad", "H100", "550", status="failed", lock_hash="L2", document={},
                             metrics={"bf16_matmul_tflops": 1.0})  # failed runs are not the baseline
    store.record_certificate("sha256:a100", "A100", "550", status="certified", lock_hash="L1", document={},
                             metrics={"bf16_matmul_tflops": 250.0})  # another GPU model
    assert store.last_certified_metric("H100", "bf16_matmul_tflops") == 700.0
    assert store.last_certified_metric("A100", "bf16_matmul_tflops") == 250.0
    assert store.last_certified_metric("H100", "nope") is None
    assert store.last_certified_metric("L4", "bf16_matmul_tflops") is None

    new = {"bf16_matmul_tflops": 600.0, "h2d_gbps": 49.0, "brand_new_metric": 1.0}
    regs = store.regressions("H100", new, 0.10)
    assert len(regs) == 1 and regs[0].startswith("bf16_matmul_tflops: ")
    assert "14.3%" in regs[0] and "700" in regs[0]
    assert store.regressions("H100", new, 0.20) == []
    assert store.regressions("A100", {"bf16_matmul_tflops": 250.0}, 0.0) == []

    # the new image certifies; compared with what came before it, not with itself
    store.record_certificate("sha256:new", "H100", "550", status="certified", lock_hash="L3", document={},
                             metrics=new)
    assert store.last_certified_metric("H100", "bf16_matmul_tflops") == 600.0
    assert store.last_certified_metric("H100", "bf16_matmul_tflops", exclude_image="sha256:new") == 700.0
    assert store.last_certified_metric("H100", "bf16_matmul_tflops", before=cutoff) == 700.0
    assert store.regressions("H100", new, 0.1, exclude_image="sha256:new")[0].startswith("bf16_matmul_tflops")
    with pytest.raises(EnvkitError, match="threshold"):
        store.regressions("H100", new, 10)


# --- pushes, runs and steps -------------------------------------------------------------------------

def test_pushes_are_unique_per_ref_and_digest(store):
    store.record_push("sha256:a", "reg/t:1", "sha256:d1", "stack")
    store.record_push("sha256:a", "reg/t:1", "sha256:d1", "stack")
    store.record_push("sha256:a", "reg/t:certified", "sha256:d1", "certified")
    assert [(p.ref, p.tag_kind) for p in store.pushes_for("sha256:a")] == [
        ("reg/t:1", "stack"), ("reg/t:certified", "certified")]
    assert store.pushes_for("sha256:other") == []
    with pytest.raises(EnvkitError, match="tag kind"):
        store.record_push("sha256:a", "reg/t:1", "sha256:d1", "latest")


def test_runs_and_resumable_steps(store):
    run = store.start_run("spec-digest")
    assert store.unfinished_run("spec-digest") == run
    store.mark_step(run, "torch25", "build", "started", "L")
    assert store.done_steps("torch25", "L") == set()
    store.mark_step(run, "torch25", "build", "done", "L")
    store.mark_step(run, "torch25", "verify", "started", "L")
    assert store.done_steps("torch25", "L") == {"build"}
    assert store.done_steps("torch25", "L", run_id=run) == {"build"}
    assert store.done_steps("torch25", "other-lock") == set()
    store.finish_run(run, "passed", 0)
    assert store.unfinished_run("spec-digest") is None
    run2 = store.start_run("spec-digest")
    assert store.done_steps("torch25", "L", run_id=run2) == set()
    with pytest.raises(EnvkitError):
        store.finish_run(9999, "passed", 0)
    with pytest.raises(EnvkitError, match="step state"):
        store.mark_step(run2, "torch25", "build", "half")


# --- snapshots ----------------------------------------------------------------------------------

def fill(s: Store, order):
    run = s.start_run("spec")
    for i in order:
        s.mark_step(run, f"img{i}", "build", "started", f"L{i}")
        s.record_build(f"img{i}", f"L{i}", f"C{i}", tag=f"t:{i}", image_id=f"sha256:{i}", size=i, seconds=i * 0.37,
                       action="built", run_id=run)
        s.mark_step(run, f"img{i}", "build", "done", f"L{i}")
        s.record_certificate(f"sha256:{i}", "H100", "550", status="certified", lock_hash=f"L{i}",
                             document={"i": i, "nested": {"b": 1, "a": 2}}, metrics={"m": float(i), "n": 1.0})
        s.record_push(f"sha256:{i}", f"reg/img{i}:t", f"sha256:d{i}", "stack")
    s.finish_run(run, "passed", 0)


def test_snapshot_is_deterministic(tmp_path, store_url):
    # the same facts in another order, on another backend, give the same snapshot
    with Store.open(tmp_path / "a.sqlite") as a, Store.open(store_url, clock=Clock()) as b:
        fill(a, [1, 2, 3])
        fill(b, [3, 1, 2])
        snap = a.snapshot()
        assert snap == b.snapshot()
        assert json.dumps(snap, sort_keys=True) == json.dumps(b.snapshot(), sort_keys=True)
        assert snap["schema_version"] == SCHEMA_VERSION
        assert len(snap["builds"]) == len(snap["certificates"]) == len(snap["pushes"]) == 3
        assert "created_at" not in json.dumps(snap) and "seconds" not in snap["builds"][0]
        b.record_push("sha256:1", "reg/img1:certified", "sha256:d1", "certified")
        assert a.snapshot() != b.snapshot()


# --- durability -----------------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import sys
    from envkit.store.history import Store
    s = Store.open(sys.argv[1])
    run = s.start_run("spec")
    for i in range(100000):
        s.record_build(f"img{i}", f"L{i}", f"C{i}", tag=f"vision/img{i}:{i}", image_id=f"sha256:{i:064x}",
                       size=i * 1000, seconds=float(i), action="built", run_id=run)
        s.record_certificate(f"sha256:{i:064x}", "H100", "550.54.15", status="certified", lock_hash=f"L{i}",
                             document={"image": i, "pad": "x" * 2000},
                             metrics={f"metric{k}": float(i * 10 + k) for k in range(8)})
        s.mark_step(run, f"img{i}", "certify", "done", f"L{i}")
        print(i, flush=True)
""")


@pytest.mark.parametrize("kill_after", [2, 40])
def test_sigkill_mid_write_leaves_a_whole_store(store_url, kill_after):
    path = store_url
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    try:
        last = -1
        for line in proc.stdout:  # each line is printed after its transactions committed
            last = int(line)
            if last >= kill_after:
                break
        assert last >= kill_after, "the writer died before writing"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    if "://" not in path:
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with Store.open(path) as s:
        snap = s.snapshot()
        builds = {b["name"]: b for b in snap["builds"]}
        assert len(builds) >= last + 1  # nothing committed was lost
        for b in builds.values():
            i = int(b["name"][3:])
            assert b == {"name": f"img{i}", "lock_hash": f"L{i}", "context_hash": f"C{i}",
                         "tag": f"vision/img{i}:{i}", "image_id": f"sha256:{i:064x}", "size": i * 1000,
                         "action": "built"}
        for c in snap["certificates"]:  # every certificate has all its metrics, never some
            i = c["document"]["image"]
            assert c["metrics"] == {f"metric{k}": float(i * 10 + k) for k in range(8)}
            assert c["document"]["pad"] == "x" * 2000
        assert len(snap["certificates"]) >= last + 1
        assert {st["image"] for st in snap["steps"]} >= {f"img{i}" for i in range(last + 1)}
        # and it is writable again
        s.record_build("after", "L", "C", tag="t", image_id="i")
        assert s.find_build("after", "L", "C") is not None


# --- PostgreSQL: migrations under concurrency, version checks --------------------------------------

def test_postgres_migrates_a_version_1_database_and_keeps_its_rows(postgres_url):
    old = PostgresBackend.open(postgres_url)
    old.migrate(MIGRATIONS[:1], Clock())  # a database written by an envkit that knew only 001
    with old.transaction() as db:
        db.execute("""INSERT INTO builds (name, lock_hash, context_hash, tag, image_id, action, created_at)
                      VALUES ('torch25', 'L', 'C', 'vision/torch25:x', 'sha256:aa', 'built', 'then')""")
    assert old.schema_version() == 1
    old.close()
    with Store.open(postgres_url) as s:
        assert s.schema_version == SCHEMA_VERSION
        assert [r["name"] for r in s.backend.query("SELECT name FROM schema_version ORDER BY version")] == [
            name for name, _ in MIGRATIONS]
        assert s.find_build("torch25", "L", "C").image_id == "sha256:aa"
        s.record_push("sha256:aa", "reg/vision/torch25:x", "sha256:dd", "stack")


def test_postgres_future_version_is_refused(postgres_url):
    with Store.open(postgres_url) as s:
        with s.backend.transaction() as db:
            db.execute("INSERT INTO schema_version (version, name, applied_at) VALUES (?, 'future', 'later')",
                       (SCHEMA_VERSION + 1,))
    with pytest.raises(StoreError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this envkit"):
        Store.open(postgres_url)


def test_postgres_failing_migration_rolls_back(postgres_url):
    def bad(db, dialect):
        db.execute("CREATE TABLE half (x INTEGER)")
        raise RuntimeError("boom")

    backend = PostgresBackend.open(postgres_url)
    try:
        backend.migrate(MIGRATIONS[:1], Clock())
        with pytest.raises(RuntimeError):
            backend.migrate([*MIGRATIONS[:1], ("002_bad", bad)], Clock())
        assert backend.schema_version() == 1
        assert backend.query("SELECT to_regclass('half') AS t")[0]["t"] is None
    finally:
        backend.close()


OPENER = textwrap.dedent("""
    import sys
    from envkit.store.history import Store
    with Store.open(sys.argv[1]) as s:
        print(s.schema_version)
""")


def test_postgres_concurrent_first_opens_migrate_once(postgres_url):
    """Eight CI runners opening a new shared database at once: one migrates, all succeed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, postgres_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(8)]
    results = [(p.wait(timeout=60), p.stdout.read().strip(), p.stderr.read()) for p in procs]
    assert all(rc == 0 and out == str(SCHEMA_VERSION) for rc, out, _ in results), results
    with Store.open(postgres_url) as s:
        rows = s.backend.query("SELECT version FROM schema_version ORDER BY version")
        assert [r["version"] for r in rows] == list(range(1, SCHEMA_VERSION + 1))


def test_large_values_keep_their_precision(store):
    """Image sizes above 2**31 and metrics with 15 significant digits survive both backends."""
    store.record_build("big", "L", "C", tag="t", image_id="sha256:big", size=5_695_427_318, seconds=368.123456789)
    store.record_certificate("sha256:big", "H200", "570", status="certified", lock_hash="L", document={},
                             metrics={"bf16_matmul_tflops": 712.345678901234})
    assert store.find_build("big", "L", "C").size == 5_695_427_318
    assert store.find_build("big", "L", "C").seconds == 368.123456789
    assert store.certificates_for("sha256:big")[0].metrics == {"bf16_matmul_tflops": 712.345678901234}


def test_images_lists_built_and_certified(store):
    store.record_build("a", "L1", "C", tag="vision/a:1", image_id="sha256:a1")
    store.record_build("a", "L2", "C", tag="vision/a:2", image_id="sha256:a2")
    store.record_certificate("sha256:ext", "H100", "550", status="verified", lock_hash="L", document={"image": "ext:1"})
    got = {image_id: tag for image_id, tag, _ in store.images()}
    assert got == {"sha256:a1": "vision/a:1", "sha256:a2": "vision/a:2", "sha256:ext": "ext:1"}


# --- run locks ---------------------------------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    from envkit.store.history import Store
    s = Store.open(sys.argv[1])
    with s.run_lock("nightly:vision", "the nightly run of vision"):
        print("locked", flush=True)
        time.sleep(120)
""")


def test_run_lock_is_exclusive_and_dies_with_a_killed_holder(store_url):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, store_url], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with Store.open(store_url) as s:
            with pytest.raises(RunInProgressError, match="the nightly run of vision is already running") as err:
                with s.run_lock("nightly:vision", "the nightly run of vision"):
                    pass
            assert f"envkit pid {proc.pid}" in str(err.value)
            assert "resumes" in err.value.hint and err.value.exit_code == 15
            with s.run_lock("nightly:other-team", "another team's run"):  # other keys are free
                pass
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            deadline = time.monotonic() + 30  # the server notices the closed connection
            while True:
                try:
                    with s.run_lock("nightly:vision", "the nightly run of vision"):
                        break
                except RunInProgressError:
                    assert time.monotonic() < deadline, "a killed holder kept the lock"
                    time.sleep(0.1)
            with s.run_lock("nightly:vision", "again"):  # released on exit, reusable
                pass
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_locate_names_a_store_without_opening_it(tmp_path, monkeypatch):
    from envkit.store.records import locate

    monkeypatch.delenv(STORE_ENV, raising=False)
    assert locate().path == default_path() and not locate().named
    assert locate(f"sqlite:///{tmp_path}/a.sqlite").path == tmp_path / "a.sqlite"  # sqlite:////abs
    assert locate("sqlite:///rel.sqlite").path == Path("rel.sqlite")
    pg = locate("postgresql+psycopg://u:pw@db/envkit")
    assert pg.url and pg.named and str(pg) == "postgresql+psycopg://u:***@db/envkit"
    monkeypatch.setenv(STORE_ENV, "postgres://db/envkit")
    assert locate().url == "postgres://db/envkit"
    with pytest.raises(StoreError, match="bad SQLite URL"):
        locate("sqlite://relative")
    assert not list(tmp_path.iterdir())  # nothing was created


def test_the_default_store_does_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    """The default is in this user's data directory ($XDG_DATA_HOME/envkit), the same from any directory; a store
    left in the old place (./.envkit/history.sqlite) stays readable while the new one does not exist, with a note
    saying how to move it."""
    from envkit.store.records import locate

    monkeypatch.delenv(STORE_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    where_a = locate().path
    monkeypatch.chdir(tmp_path / "b")
    assert locate().path == where_a == tmp_path / "data" / "envkit" / "history.sqlite"
    assert locate().note == ""
    old = tmp_path / "b" / LEGACY_PATH
    old.parent.mkdir()
    Store.open(old).close()
    legacy = locate()
    assert legacy.path == LEGACY_PATH and not legacy.named and "mv .envkit/history.sqlite" in legacy.note
    assert Store.open_existing() is not None  # readable as before
    Store.open(where_a).close()  # once the new default exists, it wins
    assert locate().path == where_a


def test_a_build_keeps_its_builder_and_envkit_version_when_a_later_run_skips_it(tmp_path):
    """The builder (Outcome.made_by) and the building envkit's version are kept with a built row: a later skip
    keeps them, a rebuild replaces them; a row only ever skipped has neither (its provenance says "unknown")."""
    with Store.open(tmp_path / "h.sqlite") as s:
        s.record_build("torch25", "L", "C", tag="t", image_id="sha256:aa", action="skipped", builder="buildkit",
                       envkit_version="0.9")
        first = s.find_build("torch25", "L", "C")
        assert (first.builder, first.envkit_version) == ("", "")
        s.record_build("torch25", "L", "C", tag="t", image_id="sha256:aa", builder="reproducible",
                       envkit_version="1.0")
        s.record_build("torch25", "L", "C", tag="t", image_id="sha256:aa", action="skipped", envkit_version="1.1")
        kept = s.find_build("torch25", "L", "C")
        assert (kept.action, kept.builder, kept.envkit_version) == ("built", "reproducible", "1.0")
        s.record_build("torch25", "L", "C", tag="t", image_id="sha256:bb", builder="classic", envkit_version="1.2")
        assert (s.find_build("torch25", "L", "C").builder, s.find_build("torch25", "L", "C").envkit_version) == \
            ("classic", "1.2")
        s.record_build("torch25", "L", "C", tag="t", image_id="sha256:bb", builder="")  # a resumed build: unknown
        assert s.find_build("torch25", "L", "C").builder == "classic"
