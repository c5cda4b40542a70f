"""Where the history store is (``locate``: ``--store``, ``$ENVKIT_STORE``, else this user's data directory:
``default_path()``, the same from every working directory; a SQLite file or a PostgreSQL URL) and the records it
gives back (builds, certificates, pushes)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from ..errors import EnvkitError, StoreError
from .backends import redact

LEGACY_PATH = Path(".envkit") / "history.sqlite"  # the default before 0.2, relative to the working directory
STORE_ENV = "ENVKIT_STORE"
DEFAULT_HELP = "$ENVKIT_STORE, else history.sqlite in this user's data directory (`envkit doctor` names it)"


def default_path() -> Path:
    """The history store when none is named: ``history.sqlite`` in this user's data directory
    (``$XDG_DATA_HOME/envkit``, else ``~/.local/share/envkit`` on Linux), whatever the working directory."""
    return platformdirs.user_data_path("envkit") / "history.sqlite"
BUILD_ACTIONS = ("built", "skipped")
TAG_KINDS = ("stack", "certified")
STEP_STATES = ("started", "done")


@dataclass(frozen=True)
class Target:
    """Which history store a name means: a SQLite file (``path``) or a PostgreSQL URL (``url``)."""

    path: Path | None = None
    url: str | None = None
    default: bool = False  # nothing (argument or environment) named it: ``default_path()`` or the legacy file
    note: str = ""  # said once by the command: e.g. that a store in the legacy place was used

    @property
    def named(self) -> bool:
        """False only for the default file, when nothing (argument or environment) named a store."""
        return not self.default

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
    ``ENVKIT_STORE`` environment variable, else ``default_path()`` (``default_target``)."""
    if isinstance(url_or_path, str) and not url_or_path.strip():
        raise StoreError(
            "the history store is named by an empty value",
            hint="give a file path, sqlite:///relative/path, sqlite:////absolute/path or "
            f"postgresql://host/db, or leave --store out for {DEFAULT_HELP}",
        )
    target = url_or_path if url_or_path is not None else os.environ.get(STORE_ENV)
    if target is None or target == "":
        return default_target()
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


def default_target() -> Target:
    """``default_path()``; while it does not exist and the working directory holds a store in the place envkit
    used before (``.envkit/history.sqlite``), that one, with a note saying how to move it: it stays readable."""
    path = default_path()
    if not path.exists() and LEGACY_PATH.is_file():
        return Target(path=LEGACY_PATH, default=True,
                      note=f"using the history store in the working directory ({LEGACY_PATH}), where envkit kept it "
                           f"before; the default is now {path}: move it there (`mkdir -p {path.parent} && mv "
                           f"{LEGACY_PATH} {path}`), or name it with --store / $ENVKIT_STORE")
    return Target(path=path, default=True)


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
    builder: str = ""  # classic | buildkit | reproducible; "" for a row recorded before envkit kept it, or skipped
    envkit_version: str = ""  # the envkit that built it; "" as builder

    @classmethod
    def from_row(cls, r: Mapping) -> BuildRecord:
        return cls(r["name"], r["lock_hash"], r["context_hash"], r["tag"], r["image_id"], r["size"], r["seconds"],
                   r["action"], r["run_id"], r["created_at"], r["builder"], r["envkit_version"])


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
