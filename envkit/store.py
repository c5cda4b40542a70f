"""The history store: builds, certificates, metrics, pushes and pipeline steps, in SQLite.

One file, no server (``.envkit/history.sqlite`` by default). The nightly pipeline asks it
"was this exact image built already?", "what did the last certified run on this GPU model
measure?" and "which steps of this run are done?", and records the answers as it goes.

Durability: WAL journal, ``synchronous=FULL``, and every write is one ``BEGIN IMMEDIATE``
transaction, so a process killed at any instant leaves the old state or the new one, never
half a row or a certificate without its metrics.

Schema changes are ordered, named migrations (``_m001_initial``, ``_m002_...``); the number
applied lives in ``PRAGMA user_version`` (plus one ``schema_version`` row per migration, for
people). Opening an older file runs the missing ones in one transaction; a file written by a
newer envkit is refused rather than misread.

The backend seam: ``Store`` speaks plain SQL (``?`` placeholders, ``ON CONFLICT`` upserts,
which PostgreSQL also has) through a small backend object that owns the connection and the
transaction. Only SQLite exists today; ``_BACKENDS`` is where another would go.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from .errors import EnvkitError

DEFAULT_PATH = Path(".envkit") / "history.sqlite"

BUILD_ACTIONS = ("built", "skipped")
TAG_KINDS = ("stack", "certified")
STEP_STATES = ("started", "done")

Clock = Callable[[], datetime]


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _stamp(value: datetime | str) -> str:
    """A sortable UTC timestamp text: 2026-01-31T02:00:00.000000Z."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# --- migrations ---------------------------------------------------------------------------

def _m001_initial(db: sqlite3.Connection) -> None:
    """Runs, builds, certificates and their metrics."""
    db.execute("""
        CREATE TABLE runs (
            id           INTEGER PRIMARY KEY,
            started_at   TEXT NOT NULL,
            finished_at  TEXT,
            spec_digest  TEXT NOT NULL,
            status       TEXT NOT NULL DEFAULT 'running',
            exit_code    INTEGER
        )""")
    db.execute("""
        CREATE TABLE builds (
            id            INTEGER PRIMARY KEY,
            run_id        INTEGER REFERENCES runs(id) ON DELETE SET NULL,
            name          TEXT NOT NULL,
            lock_hash     TEXT NOT NULL,
            context_hash  TEXT NOT NULL,
            tag           TEXT NOT NULL,
            image_id      TEXT NOT NULL,
            size          INTEGER NOT NULL DEFAULT 0,
            seconds       REAL NOT NULL DEFAULT 0,
            action        TEXT NOT NULL CHECK (action IN ('built', 'skipped')),
            created_at    TEXT NOT NULL,
            UNIQUE (name, lock_hash, context_hash)
        )""")
    db.execute("CREATE INDEX builds_image_id ON builds (image_id)")
    db.execute("""
        CREATE TABLE certificates (
            id          INTEGER PRIMARY KEY,
            image_id    TEXT NOT NULL,
            gpu_model   TEXT NOT NULL,
            driver      TEXT NOT NULL,
            status      TEXT NOT NULL,
            lock_hash   TEXT NOT NULL,
            created_at  TEXT NOT NULL,
            document    TEXT NOT NULL,
            UNIQUE (image_id, gpu_model, driver)
        )""")
    db.execute("CREATE INDEX certificates_gpu ON certificates (gpu_model, status, created_at)")
    db.execute("""
        CREATE TABLE metrics (
            certificate_id  INTEGER NOT NULL REFERENCES certificates(id) ON DELETE CASCADE,
            name            TEXT NOT NULL,
            value           REAL NOT NULL,
            PRIMARY KEY (certificate_id, name)
        )""")


def _m002_publish_and_steps(db: sqlite3.Connection) -> None:
    """Pushes to the team registry, and per-image step marks for resumable nightly runs."""
    db.execute("""
        CREATE TABLE pushes (
            id         INTEGER PRIMARY KEY,
            image_id   TEXT NOT NULL,
            ref        TEXT NOT NULL,
            digest     TEXT NOT NULL,
            tag_kind   TEXT NOT NULL CHECK (tag_kind IN ('stack', 'certified')),
            pushed_at  TEXT NOT NULL,
            UNIQUE (ref, digest)
        )""")
    db.execute("CREATE INDEX pushes_image_id ON pushes (image_id)")
    db.execute("""
        CREATE TABLE steps (
            run_id      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            image       TEXT NOT NULL,
            lock_hash   TEXT NOT NULL DEFAULT '',
            step        TEXT NOT NULL,
            state       TEXT NOT NULL CHECK (state IN ('started', 'done')),
            updated_at  TEXT NOT NULL,
            PRIMARY KEY (run_id, image, lock_hash, step)
        )""")
    db.execute("CREATE INDEX steps_image ON steps (image, lock_hash, state)")


def _m003_base_mirrors(db: sqlite3.Connection) -> None:
    """Base images mirrored into the team registry, pinned by digest."""
    db.execute("""
        CREATE TABLE mirrors (
            base_ref    TEXT NOT NULL,
            pinned_ref  TEXT NOT NULL,
            pushed_at   TEXT NOT NULL,
            PRIMARY KEY (base_ref, pinned_ref)
        )""")


Migration = tuple[str, Callable[[sqlite3.Connection], None]]

# Append only: never edit or reorder an entry once it has shipped.
MIGRATIONS: tuple[Migration, ...] = (
    ("001_initial", _m001_initial),
    ("002_publish_and_steps", _m002_publish_and_steps),
    ("003_base_mirrors", _m003_base_mirrors),
)
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(db: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS, *,
            where: str = "the history database", clock: Clock = _utcnow) -> list[str]:
    """Bring ``db`` (autocommit mode) up to ``len(migrations)``; return the names applied.

    All missing migrations run in one transaction: a failure (or a kill) leaves the file at
    its old version. A file newer than ``migrations`` is an error.
    """
    applied: list[str] = []
    db.execute("BEGIN IMMEDIATE")
    try:
        current = db.execute("PRAGMA user_version").fetchone()[0]
        if current > len(migrations):
            raise EnvkitError(
                f"{where} has schema version {current}, newer than this envkit understands "
                f"(version {len(migrations)})",
                hint="upgrade envkit to the version that wrote it, or point envkit at another history file",
            )
        if current < len(migrations):
            db.execute("""CREATE TABLE IF NOT EXISTS schema_version (
                              version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)""")
            for version in range(current + 1, len(migrations) + 1):
                name, step = migrations[version - 1]
                step(db)
                db.execute("INSERT OR REPLACE INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                           (version, name, _stamp(clock())))
                applied.append(name)
            db.execute(f"PRAGMA user_version = {len(migrations)}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return applied


# --- backends -------------------------------------------------------------------------------

class SQLiteBackend:
    """One SQLite file in WAL mode; writes are BEGIN IMMEDIATE transactions."""

    name = "sqlite"

    def __init__(self, path: Path, db: sqlite3.Connection):
        self.path = path
        self.db = db

    @classmethod
    def open(cls, path: Path) -> "SQLiteBackend":
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: no implicit transactions; ``transaction()`` is explicit.
            db = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise EnvkitError(f"cannot open the history database {path}: {exc}",
                              hint="check the directory exists and is writable, or choose another path") from None
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise EnvkitError(f"{path}: SQLite refused WAL mode (journal_mode is {mode})",
                                  hint="put the history file on a local file system (WAL does not work over NFS)")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            db.close()
            raise EnvkitError(f"{path} is not an envkit history database: {exc}",
                              hint="move it aside; envkit creates a fresh one on the next run") from None
        return cls(path, db)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def query(self, sql: str, params: Sequence = ()) -> list[dict]:
        cur = self.db.execute(sql, params)
        names = [d[0] for d in cur.description or ()]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def close(self) -> None:
        self.db.close()


def _sqlite_from_url(url: str) -> SQLiteBackend:
    # sqlite:///relative/path  and  sqlite:////absolute/path (SQLAlchemy's convention)
    rest = url[len("sqlite://"):]
    if not rest.startswith("/") or rest == "/":
        raise EnvkitError(f"bad SQLite URL {url!r}",
                          hint="write sqlite:///relative/path.sqlite or sqlite:////absolute/path.sqlite")
    return SQLiteBackend.open(Path(rest[1:]))


def _unsupported(url: str):
    scheme = url.split(":", 1)[0]
    raise EnvkitError(
        f"shared databases are not supported yet: {scheme}:// history stores ({url.split('@')[-1]})",
        hint="use a SQLite file (the default .envkit/history.sqlite, or sqlite:///path)",
    )


_BACKENDS: dict[str, Callable[[str], SQLiteBackend]] = {
    "sqlite": _sqlite_from_url,
    "postgresql": _unsupported,
    "postgres": _unsupported,
    "mysql": _unsupported,
}


# --- records --------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildRecord:
    name: str
    lock_hash: str
    context_hash: str
    tag: str
    image_id: str
    size: int
    seconds: float
    action: str
    run_id: int | None
    created_at: str


@dataclass(frozen=True)
class CertificateRecord:
    image_id: str
    gpu_model: str
    driver: str
    status: str
    lock_hash: str
    created_at: str
    document: dict
    metrics: dict[str, float]


@dataclass(frozen=True)
class PushRecord:
    image_id: str
    ref: str
    digest: str
    tag_kind: str
    pushed_at: str


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise EnvkitError(f"{what} {value!r} is not one of {', '.join(allowed)}")


# --- the store ------------------------------------------------------------------------------

class Store:
    """The query API. Open with ``Store.open(path_or_url)``; use as a context manager to close."""

    def __init__(self, backend: SQLiteBackend, *, clock: Clock = _utcnow):
        self.backend = backend
        self.clock = clock

    @classmethod
    def open(cls, url_or_path: str | Path | None = None, *, clock: Clock = _utcnow) -> "Store":
        """Open (creating and migrating as needed) a history store.

        ``url_or_path``: a file path (default ``.envkit/history.sqlite``), or ``sqlite:///path``.
        """
        target = DEFAULT_PATH if url_or_path is None else url_or_path
        if isinstance(target, Path) or "://" not in str(target):
            backend = SQLiteBackend.open(Path(target))
        else:
            scheme = str(target).split("://", 1)[0].split("+", 1)[0].lower()
            opener = _BACKENDS.get(scheme)
            if opener is None:
                raise EnvkitError(f"unknown history store URL scheme {scheme!r} in {target!r}",
                                  hint="use a file path or sqlite:///path")
            backend = opener(str(target))
        try:
            migrate(backend.db, where=str(backend.path), clock=clock)
        except sqlite3.DatabaseError as exc:
            backend.close()
            raise EnvkitError(f"{backend.path} is not an envkit history database: {exc}",
                              hint="move it aside; envkit creates a fresh one on the next run") from None
        except BaseException:
            backend.close()
            raise
        return cls(backend, clock=clock)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return self.backend.query("PRAGMA user_version")[0]["user_version"]

    def _now(self) -> str:
        return _stamp(self.clock())

    # --- runs -----------------------------------------------------------------------------
    def start_run(self, spec_digest: str) -> int:
        with self.backend.transaction() as db:
            cur = db.execute("INSERT INTO runs (started_at, spec_digest, status) VALUES (?, ?, 'running')",
                             (self._now(), spec_digest))
            return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str, exit_code: int) -> None:
        with self.backend.transaction() as db:
            cur = db.execute("UPDATE runs SET finished_at = ?, status = ?, exit_code = ? WHERE id = ?",
                             (self._now(), status, int(exit_code), run_id))
            if cur.rowcount != 1:
                raise EnvkitError(f"no run {run_id} in {self.backend.path}")

    def unfinished_run(self, spec_digest: str) -> int | None:
        """The newest run of this spec that never finished (killed mid-way): the one to resume."""
        rows = self.backend.query(
            "SELECT id FROM runs WHERE spec_digest = ? AND finished_at IS NULL ORDER BY started_at DESC, id DESC LIMIT 1",
            (spec_digest,))
        return rows[0]["id"] if rows else None

    # --- builds ---------------------------------------------------------------------------
    def record_build(self, name: str, lock_hash: str, context_hash: str, *, tag: str, image_id: str,
                     size: int = 0, seconds: float = 0.0, action: str = "built",
                     run_id: int | None = None) -> None:
        """Record that image ``name`` exists for (lock_hash, context_hash).

        One row per identity. Re-recording updates the tag, image and run; a row that says
        ``built`` keeps saying so (with its build time) when a later run merely skipped it.
        """
        _check(action, BUILD_ACTIONS, "build action")
        with self.backend.transaction() as db:
            db.execute("""
                INSERT INTO builds (run_id, name, lock_hash, context_hash, tag, image_id, size, seconds,
                                    action, created_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (name, lock_hash, context_hash) DO UPDATE SET
                    run_id = excluded.run_id,
                    tag = excluded.tag,
                    image_id = CASE WHEN excluded.image_id != '' THEN excluded.image_id ELSE builds.image_id END,
                    size = CASE WHEN excluded.size > 0 THEN excluded.size ELSE builds.size END,
                    seconds = CASE WHEN builds.action = 'built' AND excluded.action = 'skipped'
                                   THEN builds.seconds ELSE excluded.seconds END,
                    action = CASE WHEN builds.action = 'built' THEN 'built' ELSE excluded.action END,
                    created_at = CASE WHEN excluded.action = 'built' THEN excluded.created_at
                                      ELSE builds.created_at END
                """, (run_id, name, lock_hash, context_hash, tag, image_id, int(size), float(seconds), action,
                      self._now()))

    def record_outcome(self, outcome, *, lock_hash: str, context_hash: str, run_id: int | None = None) -> None:
        """``record_build`` from an ``envkit.build.Outcome``."""
        self.record_build(outcome.name, lock_hash, context_hash, tag=outcome.tag, image_id=outcome.image_id,
                          size=outcome.size, seconds=outcome.seconds, action=outcome.action, run_id=run_id)

    def find_build(self, name: str, lock_hash: str, context_hash: str) -> BuildRecord | None:
        rows = self.backend.query(
            "SELECT * FROM builds WHERE name = ? AND lock_hash = ? AND context_hash = ?",
            (name, lock_hash, context_hash))
        if not rows:
            return None
        r = rows[0]
        return BuildRecord(r["name"], r["lock_hash"], r["context_hash"], r["tag"], r["image_id"], r["size"],
                           r["seconds"], r["action"], r["run_id"], r["created_at"])

    # --- certificates and metrics ------------------------------------------------------------
    def record_certificate(self, image_id: str, gpu_model: str, driver: str, *, status: str, lock_hash: str,
                           document: Mapping, metrics: Mapping[str, float] | None = None) -> None:
        """Record (or replace) the certificate for (image_id, gpu_model, driver) with its metrics.

        Idempotent: recording the same key again updates that one row (and replaces its
        metrics) in one transaction; it never adds a second certificate.
        """
        doc = json.dumps(document, sort_keys=True, separators=(",", ":"))
        values = {str(k): float(v) for k, v in (metrics or {}).items()}
        with self.backend.transaction() as db:
            cert_id = db.execute("""
                INSERT INTO certificates (image_id, gpu_model, driver, status, lock_hash, created_at, document)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (image_id, gpu_model, driver) DO UPDATE SET
                    status = excluded.status, lock_hash = excluded.lock_hash,
                    created_at = excluded.created_at, document = excluded.document
                RETURNING id
                """, (image_id, gpu_model, driver, status, lock_hash, self._now(), doc)).fetchone()[0]
            db.execute("DELETE FROM metrics WHERE certificate_id = ?", (cert_id,))
            db.executemany("INSERT INTO metrics (certificate_id, name, value) VALUES (?, ?, ?)",
                           [(cert_id, name, value) for name, value in sorted(values.items())])

    def _certificates(self, where: str, params: Sequence) -> list[CertificateRecord]:
        rows = self.backend.query(f"SELECT * FROM certificates WHERE {where} ORDER BY created_at, id", params)
        out = []
        for r in rows:
            metrics = {m["name"]: m["value"] for m in self.backend.query(
                "SELECT name, value FROM metrics WHERE certificate_id = ? ORDER BY name", (r["id"],))}
            out.append(CertificateRecord(r["image_id"], r["gpu_model"], r["driver"], r["status"], r["lock_hash"],
                                         r["created_at"], json.loads(r["document"]), metrics))
        return out

    def certificates_for(self, image_id: str) -> list[CertificateRecord]:
        """Every certificate of this image (any GPU model and driver), oldest first."""
        return self._certificates("image_id = ?", (image_id,))

    def last_certified_metric(self, gpu_model: str, metric: str, *, before: datetime | str | None = None,
                              exclude_image: str | None = None) -> float | None:
        """The value of ``metric`` in the newest *certified* certificate on ``gpu_model``.

        ``before``: only certificates recorded strictly earlier. ``exclude_image``: ignore that
        image's own certificates (compare a new image with the ones before it).
        """
        sql = """SELECT m.value FROM certificates c JOIN metrics m ON m.certificate_id = c.id
                 WHERE c.gpu_model = ? AND c.status = 'certified' AND m.name = ?"""
        params: list = [gpu_model, metric]
        if before is not None:
            sql += " AND c.created_at < ?"
            params.append(_stamp(before))
        if exclude_image is not None:
            sql += " AND c.image_id != ?"
            params.append(exclude_image)
        rows = self.backend.query(sql + " ORDER BY c.created_at DESC, c.id DESC LIMIT 1", params)
        return rows[0]["value"] if rows else None

    def regressions(self, gpu_model: str, metrics: Mapping[str, float], threshold: float, *,
                    before: datetime | str | None = None, exclude_image: str | None = None) -> list[str]:
        """Metrics (higher is better) that dropped more than ``threshold`` (a fraction, 0.1 = 10 %)
        below the last certified value on the same GPU model.

        Returns one line per regressed metric, sorted, each starting with ``"<metric>: "``.
        Metrics with no certified history are not regressions.
        """
        if not 0 <= threshold < 1:
            raise EnvkitError(f"regression threshold {threshold!r} must be a fraction in [0, 1)",
                              hint="e.g. 0.1 for a 10% drop")
        found = []
        for name in sorted(metrics):
            value = float(metrics[name])
            last = self.last_certified_metric(gpu_model, name, before=before, exclude_image=exclude_image)
            if last is None or last <= 0:
                continue
            drop = (last - value) / last
            if drop > threshold:
                found.append(f"{name}: {value:g} is {drop:.1%} below the last certified {last:g} on {gpu_model} "
                             f"(allowed drop {threshold:.0%})")
        return found

    # --- pushes ---------------------------------------------------------------------------
    def record_push(self, image_id: str, ref: str, digest: str, tag_kind: str) -> None:
        """Record that ``ref`` (registry/repo:tag) pointed at ``digest``; idempotent per (ref, digest)."""
        _check(tag_kind, TAG_KINDS, "tag kind")
        with self.backend.transaction() as db:
            db.execute("""
                INSERT INTO pushes (image_id, ref, digest, tag_kind, pushed_at) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (ref, digest) DO UPDATE SET
                    image_id = excluded.image_id, tag_kind = excluded.tag_kind, pushed_at = excluded.pushed_at
                """, (image_id, ref, digest, tag_kind, self._now()))

    def pushes_for(self, image_id: str) -> list[PushRecord]:
        rows = self.backend.query("SELECT * FROM pushes WHERE image_id = ? ORDER BY pushed_at, id", (image_id,))
        return [PushRecord(r["image_id"], r["ref"], r["digest"], r["tag_kind"], r["pushed_at"]) for r in rows]

    def record_mirror(self, base_ref: str, pinned_ref: str) -> None:
        with self.backend.transaction() as db:
            db.execute("INSERT OR IGNORE INTO mirrors (base_ref, pinned_ref, pushed_at) VALUES (?, ?, ?)",
                       (base_ref, pinned_ref, self._now()))

    def mirrors_for(self, base_ref: str) -> list[str]:
        rows = self.backend.query("SELECT pinned_ref FROM mirrors WHERE base_ref = ? ORDER BY pushed_at", (base_ref,))
        return [r["pinned_ref"] for r in rows]

    # --- steps (resumable runs) ----------------------------------------------------------------
    def mark_step(self, run_id: int, image: str, step: str, state: str, lock_hash: str = "") -> None:
        """Mark ``step`` of ``image`` (at ``lock_hash``) as started or done within ``run_id``."""
        _check(state, STEP_STATES, "step state")
        with self.backend.transaction() as db:
            db.execute("""
                INSERT INTO steps (run_id, image, lock_hash, step, state, updated_at) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (run_id, image, lock_hash, step) DO UPDATE SET
                    state = excluded.state, updated_at = excluded.updated_at
                """, (run_id, image, lock_hash, step, state, self._now()))

    def done_steps(self, image: str, lock_hash: str, *, run_id: int | None = None) -> set[str]:
        """Steps marked done for ``image`` at ``lock_hash`` (in ``run_id`` only, when given)."""
        sql = "SELECT DISTINCT step FROM steps WHERE image = ? AND lock_hash = ? AND state = 'done'"
        params: list = [image, lock_hash]
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        return {r["step"] for r in self.backend.query(sql, params)}

    def steps(self, run_id: int, image: str) -> dict[str, str]:
        """Each step of ``image`` in ``run_id`` and its state (started | done)."""
        rows = self.backend.query("SELECT step, state FROM steps WHERE run_id = ? AND image = ?", (run_id, image))
        return {r["step"]: r["state"] for r in rows}

    # --- comparison -------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """The store's logical content, deterministic: no row ids, no timestamps, no durations.

        Two stores that recorded the same facts (in any order, over any number of process
        restarts that resumed the same runs) give equal snapshots.
        """
        q = self.backend.query

        def ordered(rows: list[dict], *, distinct: bool = False) -> list[dict]:
            keyed = sorted(((json.dumps(r, sort_keys=True), r) for r in rows), key=lambda kr: kr[0])
            if distinct:
                keyed = list({k: (k, r) for k, r in keyed}.values())
            return [r for _, r in keyed]

        certificates = []
        for r in q("SELECT * FROM certificates"):
            metrics = {m["name"]: m["value"] for m in q(
                "SELECT name, value FROM metrics WHERE certificate_id = ? ORDER BY name", (r["id"],))}
            certificates.append({"image_id": r["image_id"], "gpu_model": r["gpu_model"], "driver": r["driver"],
                                 "status": r["status"], "lock_hash": r["lock_hash"],
                                 "document": json.loads(r["document"]), "metrics": metrics})
        return {
            "schema_version": self.schema_version,
            "runs": ordered(q("SELECT spec_digest, status, exit_code FROM runs")),
            "builds": ordered(q("SELECT name, lock_hash, context_hash, tag, image_id, size, action FROM builds")),
            "certificates": ordered(certificates),
            "pushes": ordered(q("SELECT image_id, ref, digest, tag_kind FROM pushes")),
            # distinct: a step done in two runs is one fact about the image
            "steps": ordered(q("SELECT image, lock_hash, step, state FROM steps"), distinct=True),
        }
