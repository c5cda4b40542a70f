"""The history store: builds, certificates, metrics, pushes and the nightly's steps.

SQLite by default (one file, no server: ``records.default_path()``); PostgreSQL for teams that share one history
between CI runners (``postgresql://host/db``, through psycopg, the ``envkit[postgres]`` extra). The nightly asks it
"was this exact image built already?", "what did the last certified run on this GPU model measure?" and "which
steps of this run are done?", and records the answers as it goes.

Durability: every write is one transaction (SQLite: WAL journal, ``synchronous=FULL``,
``BEGIN IMMEDIATE``), so a process killed at any instant leaves the old state or the new
one, never half a row or a certificate without its metrics.

Schema changes are ordered, named migrations (``migrations.py``); opening an older store runs the missing
ones in one transaction, and a store written by a newer envkit is refused rather than misread.

``Store`` (this module: the query API; ``records.py``: its records and ``locate``) speaks one SQL (``?``
placeholders, ``ON CONFLICT`` upserts, ``RETURNING``) to a backend (``backends.py``) that owns the connection, the
transactions, the schema version and the per-team run lock (``Store.run_lock``: a file lock beside the SQLite file,
a session advisory lock in PostgreSQL; both vanish with a killed process, so a rerun can resume).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import EnvkitError, StoreError
from .backends import NOT_A_STORE_HINT, Backend, PostgresBackend, SQLiteBackend
from .migrations import MIGRATIONS, SCHEMA_VERSION, Clock, stamp, utcnow
from .records import (
    BUILD_ACTIONS,
    STEP_STATES,
    TAG_KINDS,
    BuildRecord,
    CertificateRecord,
    PushRecord,
    Target,
    check_one_of,
    locate,
)


def _refused(exc: sqlite3.OperationalError) -> bool:
    """SQLite refused for want of permission (a damaged file says otherwise: 'file is not a database')."""
    text = str(exc).lower()
    return "readonly" in text or "unable to open" in text or "permission" in text


# --- the store ------------------------------------------------------------------------------

class Store:
    """The query API. Open with ``Store.open(path_or_url)``; use as a context manager to close."""

    def __init__(self, backend: Backend, *, clock: Clock = utcnow):
        self.backend = backend
        self.clock = clock

    @classmethod
    def open(cls, url_or_path: str | Path | None = None, *, clock: Clock = utcnow) -> "Store":
        """Open (creating and migrating as needed) a history store.

        ``url_or_path``: a file path, ``sqlite:///path`` or ``postgresql://[user@]host[:port]/db``.
        Default: the ``ENVKIT_STORE`` environment variable, else ``records.default_path()``.
        """
        target = locate(url_or_path)
        backend: Backend = SQLiteBackend.open(target.path) if target.path else PostgresBackend.open(target.postgres_url)
        try:
            backend.migrate(MIGRATIONS, clock)
        except BaseException:
            backend.close()
            raise
        return cls(backend, clock=clock)

    @classmethod
    def open_existing(cls, url_or_path: str | Path | None = None, *, must_exist: bool = False) -> "Store | None":
        """The store when one is named (``url_or_path``, ``ENVKIT_STORE``) or the default file exists; else None.
        For readers (show, ls, run, gc): it is opened read-only and never created or written (a 0-byte file is
        refused, not turned into a database); only an older envkit's schema is migrated, as any command did.
        ``must_exist`` (gc, ls, show and run): a named
        SQLite file that does not exist is an error, as a mistyped path must not read as a history with no
        certificates in it (gc would remove images by what it holds; ls would list nothing; show would say
        "none" and run's gate would warn for want of a certificate). ls --registry reads the registry first, and
        a store there only adds to it."""
        target = locate(url_or_path)
        if target.path is not None and not target.path.exists():
            if not (target.named and must_exist):
                return None
            # a named file that is not there may be a typo: gc would then protect nothing the real one records
            raise StoreError(f"no history store at {target.path}",
                             hint="check --store or $ENVKIT_STORE (certify and nightly create the store; commands "
                                  "that only read it never do)")
        return cls.open_readonly(target)

    @classmethod
    def _upgraded(cls, target: Target, version: int, clock: Clock) -> "Store":
        """A store with an older schema, migrated for a reader: what an upgrade of envkit asks of any command
        (a reader refusing it would fail `ls` until the next certify). One this user may not write is refused."""
        try:
            return cls.open(target.path or target.url, clock=clock)
        except (sqlite3.OperationalError, StoreError) as exc:
            raise StoreError(f"{target.path or target.url} has schema version {version}, older than this envkit's "
                             f"({SCHEMA_VERSION}), and it cannot be upgraded here: {getattr(exc, 'message', exc)}",
                             hint="run a command that writes the store (`envkit certify`, `envkit nightly`) as a "
                                  "user who may write it; then every envkit can read it") from None

    @classmethod
    def open_readonly(cls, target: Target, *, clock: Clock = utcnow) -> "Store":
        """Open ``target`` to read it: nothing is created or written. A database without envkit's schema (an empty
        file) or with a newer one is a ``StoreError``; an older one is migrated (``_upgraded``)."""
        backend: Backend = (SQLiteBackend.open(target.path, read_only=True) if target.path
                            else PostgresBackend.open(target.postgres_url))
        try:
            version = backend.stored_version()
            if version == 0:
                empty = target.path is not None and target.path.stat().st_size == 0
                raise StoreError(f"{backend.where} is not an envkit history store ("
                                 + ("an empty file" if empty else "it has no envkit schema") + ")",
                                 hint="check --store or $ENVKIT_STORE; certify and nightly create the store, commands "
                                      "that only read it never do")
            if version < SCHEMA_VERSION:  # an older envkit's store: upgraded (as before), else refused
                backend.close()
                return cls._upgraded(target, version, clock)
            if version > SCHEMA_VERSION:
                raise StoreError(f"{backend.where} has schema version {version}, newer than this envkit understands "
                                 f"(version {SCHEMA_VERSION})",
                                 hint="upgrade envkit to the version that wrote it, or point envkit at another "
                                      "history store")
        except BaseException as exc:
            backend.close()
            if target.path is not None and isinstance(exc, sqlite3.OperationalError) and _refused(exc):
                raise StoreError(f"cannot read the history store {target.path}: {exc}",
                                 hint=f"SQLite also writes beside the store (its -wal and -shm files): this user "
                                      f"must be able to write {target.path.parent}, or ask its owner") from None
            if target.path is not None and isinstance(exc, sqlite3.DatabaseError):
                raise StoreError(f"{target.path} is not an envkit history database: {exc}",
                                 hint=NOT_A_STORE_HINT) from None
            raise
        return cls(backend, clock=clock)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def where(self) -> str:
        """The store, for messages: a path, or a URL without its password."""
        return self.backend.where

    @property
    def schema_version(self) -> int:
        return self.backend.schema_version()

    def _now(self) -> str:
        return stamp(self.clock())

    def run_lock(self, key: str, what: str = "an envkit run") -> AbstractContextManager[None]:
        """Hold an exclusive lock named ``key`` for a run; ``RunInProgressError`` when another holds it.

        Held by the process (SQLite) or its connection (PostgreSQL), so a killed run never
        leaves it behind.
        """
        return self.backend.run_lock(key, what)

    # --- runs -----------------------------------------------------------------------------
    def start_run(self, spec_digest: str) -> int:
        with self.backend.transaction() as db:
            row = db.execute("INSERT INTO runs (started_at, spec_digest, status) VALUES (?, ?, 'running') "
                             "RETURNING id", (self._now(), spec_digest)).fetchone()
            return int(row[0])

    def finish_run(self, run_id: int, status: str, exit_code: int) -> None:
        with self.backend.transaction() as db:
            cur = db.execute("UPDATE runs SET finished_at = ?, status = ?, exit_code = ? WHERE id = ?",
                             (self._now(), status, int(exit_code), run_id))
            if cur.rowcount != 1:
                raise StoreError(f"no run {run_id} in {self.where}")

    def unfinished_run(self, spec_digest: str) -> int | None:
        """The newest run of this spec that never finished (killed mid-way): the one to resume."""
        rows = self.backend.query(
            "SELECT id FROM runs WHERE spec_digest = ? AND finished_at IS NULL "
            "ORDER BY started_at DESC, id DESC LIMIT 1", (spec_digest,))
        return rows[0]["id"] if rows else None

    # --- builds ---------------------------------------------------------------------------
    def record_build(self, name: str, lock_hash: str, context_hash: str, *, tag: str, image_id: str,
                     size: int = 0, seconds: float = 0.0, action: str = "built", builder: str = "",
                     run_id: int | None = None, envkit_version: str = "") -> None:
        """Record that image ``name`` exists for (lock_hash, context_hash); ``builder``: which made it (classic |
        buildkit | reproducible, ``Outcome.made_by``), and ``envkit_version``: which envkit. One row per identity.
        Re-recording updates the tag, image and run; a row that says ``built`` keeps saying so (with its build
        time, builder and envkit version) when a later run merely skipped it."""
        check_one_of(action, BUILD_ACTIONS, "build action")
        with self.backend.transaction() as db:
            db.execute("""
                INSERT INTO builds (run_id, name, lock_hash, context_hash, tag, image_id, size, seconds,
                                    action, created_at, builder, envkit_version)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (name, lock_hash, context_hash) DO UPDATE SET
                    run_id = excluded.run_id,
                    tag = excluded.tag,
                    image_id = CASE WHEN excluded.image_id != '' THEN excluded.image_id ELSE builds.image_id END,
                    size = CASE WHEN excluded.size > 0 THEN excluded.size ELSE builds.size END,
                    seconds = CASE WHEN builds.action = 'built' AND excluded.action = 'skipped'
                                   THEN builds.seconds ELSE excluded.seconds END,
                    action = CASE WHEN builds.action = 'built' THEN 'built' ELSE excluded.action END,
                    created_at = CASE WHEN excluded.action = 'built' THEN excluded.created_at
                                      ELSE builds.created_at END,
                    builder = CASE WHEN excluded.action = 'built' AND excluded.builder != ''
                                   THEN excluded.builder ELSE builds.builder END,
                    envkit_version = CASE WHEN excluded.action = 'built' THEN excluded.envkit_version
                                          ELSE builds.envkit_version END
                """, (run_id, name, lock_hash, context_hash, tag, image_id, int(size), float(seconds), action,
                      self._now(), builder if action == "built" else "", envkit_version if action == "built" else ""))

    def find_build(self, name: str, lock_hash: str, context_hash: str) -> BuildRecord | None:
        rows = self.backend.query(
            "SELECT * FROM builds WHERE name = ? AND lock_hash = ? AND context_hash = ?",
            (name, lock_hash, context_hash))
        return BuildRecord.from_row(rows[0]) if rows else None

    def images(self) -> list[tuple[str, str, str]]:
        """(image_id, tag, date) of every image built or certified, newest record per image."""
        found: dict[str, tuple[str, str]] = {}
        for b in self.backend.query("SELECT image_id, tag, created_at FROM builds WHERE image_id != '' "
                                    "ORDER BY created_at, id"):
            found[b["image_id"]] = (b["tag"], b["created_at"])
        for c in self.backend.query("SELECT image_id, document, created_at FROM certificates ORDER BY created_at, id"):
            if c["image_id"] not in found:
                found[c["image_id"]] = (json.loads(c["document"]).get("image", c["image_id"]), c["created_at"])
        return [(image_id, tag, created) for image_id, (tag, created) in found.items()]

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
            params.append(stamp(before))
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
        check_one_of(tag_kind, TAG_KINDS, "tag kind")
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
            db.execute("INSERT INTO mirrors (base_ref, pinned_ref, pushed_at) VALUES (?, ?, ?) "
                       "ON CONFLICT (base_ref, pinned_ref) DO NOTHING", (base_ref, pinned_ref, self._now()))

    def mirrors_for(self, base_ref: str) -> list[str]:
        rows = self.backend.query("SELECT pinned_ref FROM mirrors WHERE base_ref = ? ORDER BY pushed_at", (base_ref,))
        return [r["pinned_ref"] for r in rows]

    # --- steps (resumable runs) ----------------------------------------------------------------
    def mark_step(self, run_id: int, image: str, step: str, state: str, lock_hash: str = "") -> None:
        """Mark ``step`` of ``image`` (at ``lock_hash``) as started or done within ``run_id``."""
        check_one_of(state, STEP_STATES, "step state")
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
