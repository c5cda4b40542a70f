"""Where the history store is (``locate``: ``--store``, ``$ENVKIT_STORE``, else ``.envkit/history.sqlite``; a
SQLite file or a PostgreSQL URL) and the records it gives back (builds, certificates, pushes)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvkitError, StoreError
from .backends import redact


DEFAULT_PATH = Path(".envkit") / "history.sqlite"
STORE_ENV = "ENVKIT_STORE"
BUILD_ACTIONS = ("built", "skipped")
TAG_KINDS = ("stack", "certified")
STEP_STATES = ("started", "done")


@dataclass(frozen=True)
class Target:
    """Which history store a name means: a SQLite file (``path``) or a PostgreSQL URL (``url``)."""

    path: Path | None = None
    url: str | None = None

    @property
    def named(self) -> bool:
        """False only for the default file, when nothing (argument or environment) named a store."""
        return self.url is not None or self.path != DEFAULT_PATH

    @property
    def postgres_url(self) -> str:
        """The PostgreSQL URL of a target that names no file."""
        if self.url is None:
            raise StoreError(f"the history store {self} is a file, not a PostgreSQL URL")
        return self.url

    def __str__(self) -> str:
        return str(self.path) if self.path is not None else redact(self.url or "")


def locate(url_or_path: str | Path | None = None) -> Target:
    """The store ``url_or_path`` names, without opening it: a file path, ``sqlite:///rel``,
    ``sqlite:////abs``, ``postgresql[+driver]://...`` (or ``postgres://``). ``None``: the
    ``ENVKIT_STORE`` environment variable, else ``.envkit/history.sqlite``."""
    if isinstance(url_or_path, str) and not url_or_path.strip():
        raise StoreError(
            "the history store is named by an empty value",
            hint="give a file path, sqlite:///relative/path, sqlite:////absolute/path or "
            "postgresql://host/db, or leave --store out for $ENVKIT_STORE, else .envkit/history.sqlite",
        )
    target = url_or_path if url_or_path is not None else (os.environ.get(STORE_ENV) or DEFAULT_PATH)
    if isinstance(target, Path) or "://" not in target:
        return Target(path=Path(target))
    scheme = target.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme == "sqlite":  # SQLAlchemy's convention: three slashes, then the (relative or /absolute) path
        rest = target[len("sqlite://"):]
        if not rest.startswith("/") or rest == "/":
            raise StoreError(f"bad SQLite URL {target!r}",
                             hint="write sqlite:///relative/path.sqlite or sqlite:////absolute/path.sqlite")
        return Target(path=Path(rest[1:]))
    if scheme in ("postgresql", "postgres"):
        return Target(url=target)
    raise StoreError(f"unknown history store URL scheme {scheme!r} in {redact(target)!r}",
                     hint="use a file path, sqlite:///path or postgresql://host/database")


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


def check_one_of(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise EnvkitError(f"{what} {value!r} is not one of {', '.join(allowed)}")
