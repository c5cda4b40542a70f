"""Where a reproducible build's install containers get uv and the wheels (``reproducible.assemble``): the lock's
indexes over the network (``online_source``), or an offline bundle's files with no network (``Offline``,
``offline_source``: `envkit bundle build --reproducible`), which give the same layers."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ..engine.protocol import Mount
from ..render import installer
from ..render.files import UV_CA

UV = "/tmp/envkit-uv/uv"  # where an install container's uv is
NETRC = "/tmp/envkit-netrc"  # the index logins (images.builder's netrc) in an install container


@dataclass(frozen=True)
class Offline:
    """An offline bundle's files as the install containers' source, with no network: uv from ``uv_wheel`` (the
    pinned wheel, its sha256 checked in the container as online), the lock's wheels from ``wheelhouse`` served to uv
    as a PEP 503 index on the container's loopback. Not ``--find-links``: from a directory uv writes one more file
    into each dist-info (`uv_cache.json`), so the layers would not be the online build's; from an index it writes
    what it writes from PyPI."""

    wheelhouse: Path
    uv_wheel: Path


INDEX_DIR = "/tmp/envkit-index"  # an offline install container's index: simple/ (written here) and wheels/
INDEX_PORT = 8731
UV_WHEEL = "/tmp/envkit-uv.whl"  # an offline bundle's uv wheel, mounted


@dataclass(frozen=True)
class Source:
    """Where an install container gets uv and the wheels: what it mounts, its variables and network, the shell
    that puts uv at ``UV`` (and an offline build's index up), and uv's index flags."""

    mounts: tuple[Mount, ...]
    env: dict[str, str]
    network: bool
    prelude: tuple[str, ...]
    index_flags: str


def online_source(index_flags: str, ca_bundle: Path | None, netrc: Path | None) -> Source:
    """The lock's indexes over the network, uv fetched as a build's step fetches it. The site CA (uv's
    SSL_CERT_FILE, as in a BuildKit build) and the index logins (uv's NETRC) are mounted read-only: never in the
    install directory, so in no layer."""
    mounts, env = [], {}
    if ca_bundle is not None:
        mounts.append(Mount(str(Path(ca_bundle).resolve()), UV_CA))
    if netrc is not None:
        mounts.append(Mount(str(netrc), NETRC))
        env["NETRC"] = NETRC
    return Source(tuple(mounts), env, True, (f"if [ -f {UV_CA} ]; then export SSL_CERT_FILE={UV_CA}; fi",
                                             installer.fetch_shell(UV)), index_flags)


def offline_source(offline: Offline, directory: Path) -> Source:
    """An offline bundle's wheels and uv, with no network: ``directory`` gets the index's pages (``index_pages``)."""
    index_pages(offline.wheelhouse, directory)
    url = f"http://127.0.0.1:{INDEX_PORT}"
    serve = (f"python3 -m http.server --bind 127.0.0.1 --directory {INDEX_DIR} {INDEX_PORT} >/dev/null 2>&1 &",
             f"for _ in $(seq 100); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", "
             f"{INDEX_PORT}), 1)' 2>/dev/null && break; sleep 0.1; done")
    mounts = (Mount(str(directory.resolve()), f"{INDEX_DIR}/simple"),
              Mount(str(offline.wheelhouse.resolve()), f"{INDEX_DIR}/wheels"),
              Mount(str(offline.uv_wheel.resolve()), UV_WHEEL))
    return Source(mounts, {}, False, (installer.extract_shell(UV_WHEEL, UV), *serve), f" --index-url {url}/simple/")


def index_pages(wheelhouse: Path, directory: Path) -> None:
    """A PEP 503 simple index of the wheels in ``wheelhouse`` (served at the index's ``wheels/``): one page per
    project, named as PEP 503 normalises it, linking its files (uv checks each against the lock's hashes)."""
    from packaging.utils import canonicalize_name, parse_wheel_filename

    directory.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[str]] = {}
    for wheel in sorted(wheelhouse.glob("*.whl")):
        projects.setdefault(canonicalize_name(parse_wheel_filename(wheel.name)[0]), []).append(wheel.name)
    for name, wheels in projects.items():
        (directory / name).mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../../wheels/{urllib.parse.quote(w)}">{w}</a>\n' for w in wheels)
        (directory / name / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")

