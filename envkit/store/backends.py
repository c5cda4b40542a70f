"""History store backends: a SQLite file (default) and a shared PostgreSQL database.

Each owns its connection, its transactions, where the schema version lives, and the run
lock (a file lock beside the SQLite file; a session advisory lock in PostgreSQL: both
vanish with a killed process). ``Store`` talks to them in one SQL: ``?`` placeholders,
``ON CONFLICT`` upserts, ``RETURNING``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

from ..errors import RunInProgressError, StoreError
from .migrations import POSTGRES, SCHEMA_VERSION_TABLE, Clock, Migration, apply_migrations, migrate


def _lock_key(text: str) -> int:
    """A stable signed 64-bit key for ``text`` (PostgreSQL advisory locks take a bigint)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _holder() -> str:
    return f"envkit pid {os.getpid()} on {socket.gethostname()}"


class SQLiteBackend:
    """One SQLite file in WAL mode; writes are BEGIN IMMEDIATE transactions."""

    def __init__(self, path: Path, db: sqlite3.Connection):
        self.path = path
        self.where = str(path)
        self.db = db

    @classmethod
    def open(cls, path: Path, *, read_only: bool = False) -> "SQLiteBackend":
        """Open (``read_only``: never create, write or migrate) the SQLite file at ``path``."""
        if path.is_dir():
            raise directory_error(path)
        try:
            if read_only:  # mode=ro: SQLite neither creates the file nor writes it (a 0-byte file stays 0 bytes)
                db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                     timeout=30.0)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                # isolation_level=None: no implicit transactions; ``transaction()`` is explicit.
                db = sqlite3.connect(path, isolation_level=None, timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the history database {path}: {exc}",
                             hint="check the directory exists and is writable, or choose another path") from None
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            if read_only:
                db.execute("PRAGMA user_version").fetchone()  # reads the header: a file that is not SQLite fails here
                return cls(path, db)
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{path}: SQLite refused WAL mode (journal_mode is {mode})",
                                 hint="put the history file on a local file system (WAL does not work over NFS)")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            db.close()
            raise StoreError(f"{path} is not an envkit history database: {exc}",
                             hint=NOT_A_STORE_HINT) from None
        return cls(path, db)

    def migrate(self, migrations: Sequence[Migration], clock: Clock) -> list[str]:
        try:
            return migrate(self.db, migrations, where=self.where, clock=clock)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not an envkit history database: {exc}",
                             hint=NOT_A_STORE_HINT) from None

    def schema_version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def stored_version(self) -> int:
        """The schema version without creating anything (0: no envkit schema)."""
        return self.schema_version()

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

    @contextmanager
    def run_lock(self, key: str, what: str) -> Iterator[None]:
        """An exclusive ``flock`` on a file beside the database; the kernel drops it with the process."""
        lock_path = self.path.with_name(f"{self.path.name}.run-{_lock_key(key) & 0xFFFFFFFFFFFF:012x}.lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                raise RunInProgressError(
                    f"{what} is already running against {self.where} ({holder})",
                    hint="wait for it to finish; a run that was killed releases the lock, and the next run resumes it",
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder().encode(), 0)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def close(self) -> None:
        self.db.close()


def directory_error(path: Path) -> StoreError:
    """A store path that names a directory: the history store is one file."""
    return StoreError(f"{path} is a directory; the history store is a file",
                      hint=f"give the path of a file (e.g. {path / 'history.sqlite'}): --store, $ENVKIT_STORE")


# for a file that is not an envkit history: a mistyped path is the likelier cause than a damaged store
NOT_A_STORE_HINT = ("check the path (--store, else $ENVKIT_STORE, else .envkit/history.sqlite); if it is the "
                    "store and it is damaged, move it aside and envkit creates a fresh one on the next run")


def redact(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


class _PgExecutor:
    """``execute(sql, params)`` with ``?`` placeholders over a psycopg connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @staticmethod
    def sql(text: str) -> str:
        if "%" in text:
            raise ValueError("store SQL must not contain '%' (psycopg reads it as a placeholder)")
        return text.replace("?", "%s")

    def execute(self, sql: str, params: Sequence = ()) -> Any:
        return self.conn.execute(self.sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(self.sql(sql), [tuple(r) for r in rows])


class PostgresBackend:
    """A shared PostgreSQL database, for teams whose CI runners share one history."""

    MIGRATION_LOCK = _lock_key("envkit:migrations")

    def __init__(self, url: str, conn: Any, psycopg: Any) -> None:
        self.where = redact(url)
        self.path = self.where  # what messages call the store
        self.conn = conn
        self.psycopg = psycopg
        self.db = _PgExecutor(conn)

    @classmethod
    def open(cls, url: str) -> "PostgresBackend":
        try:
            import psycopg
        except ImportError:
            raise StoreError(f"the history store {redact(url)} needs the PostgreSQL driver, psycopg",
                             hint="pip install 'envkit[postgres]' (or psycopg[binary])") from None
        parts = urlsplit(url)
        dsn = urlunsplit(parts._replace(scheme="postgresql"))  # postgresql+psycopg:// -> postgresql://
        try:
            conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10,
                                   application_name=_holder()[:63])
        except psycopg.Error as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if parts.password:
                message = message.replace(parts.password, "***")
            raise StoreError(
                f"cannot connect to the history database {redact(url)}: {message}",
                hint="check host, port, database and user; give the password through PGPASSWORD "
                "or ~/.pgpass (or the ENVKIT_STORE variable), never on a shared command line",
            ) from None
        return cls(url, conn, psycopg)

    def _failed(self, exc: Exception) -> StoreError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreError(f"the history database {self.where} failed: {text}",
                          hint="check the database is up and reachable; the run resumes where it stopped")

    def migrate(self, migrations: Sequence[Migration], clock: Clock) -> list[str]:
        with self.transaction() as db:
            # concurrent openers (two CI runners starting at once) take turns here
            db.execute("SELECT pg_advisory_xact_lock(?)", (self.MIGRATION_LOCK,))
            db.execute(SCHEMA_VERSION_TABLE)
            current = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0]
            return apply_migrations(db, POSTGRES, current, migrations, self.where, clock)

    def schema_version(self) -> int:
        return self.query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")[0]["v"]

    def stored_version(self) -> int:
        """The schema version without creating anything (0: no envkit schema in this database)."""
        if not self.query("SELECT to_regclass('schema_version') IS NOT NULL AS e")[0]["e"]:
            return 0
        return self.schema_version()

    @contextmanager
    def transaction(self) -> Iterator[_PgExecutor]:
        psycopg = self.psycopg
        try:
            with self.conn.transaction():
                yield self.db
        except psycopg.Error as exc:
            raise self._failed(exc) from None

    def query(self, sql: str, params: Sequence = ()) -> list[dict]:
        try:
            cur = self.db.execute(sql, params)
            names = [d.name for d in cur.description or ()]
            return [dict(zip(names, row)) for row in cur.fetchall()]
        except self.psycopg.Error as exc:
            raise self._failed(exc) from None

    @contextmanager
    def run_lock(self, key: str, what: str) -> Iterator[None]:
        """A session advisory lock: the server drops it when this connection ends, killed or not."""
        k = _lock_key(key)
        if not self.query("SELECT pg_try_advisory_lock(?) AS got", (k,))[0]["got"]:
            rows = self.query("""SELECT a.application_name AS who, a.backend_start AS since
                                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                                 WHERE l.locktype = 'advisory' AND l.granted
                                   AND l.classid::bigint = ? AND l.objid::bigint = ?""",
                              ((k >> 32) & 0xFFFFFFFF, k & 0xFFFFFFFF))
            holder = (
                f"{rows[0]['who']}, connected since {rows[0]['since']:%Y-%m-%d %H:%M:%S}" if rows else "another session"
            )
            raise RunInProgressError(
                f"{what} is already running against {self.where} ({holder})",
                hint="wait for it to finish; a run that was killed releases the lock, and the next run resumes it")
        try:
            yield
        finally:
            if not self.conn.closed:
                self.query("SELECT pg_advisory_unlock(?) AS released", (k,))

    def close(self) -> None:
        self.conn.close()


Backend = SQLiteBackend | PostgresBackend
