"""A throwaway PostgreSQL server for the store tests: Debian's server binaries, a fresh
cluster in a temporary directory, trust authentication on 127.0.0.1, one database per test.

``ENVKIT_TEST_POSTGRES_URL`` (an account that may CREATE DATABASE) uses an existing server
instead. Without either, the tests that need one are skipped, or fail under ``CI``.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def server_bin() -> Path | None:
    """The newest installed PostgreSQL server's bin directory (Debian's layout), if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A postgres process on a private data directory; ``stop()`` removes it all."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="envkit-pg-"))
        self.port = _free_port()
        self.admin_url = f"postgresql://envkit@127.0.0.1:{self.port}/postgres"
        self.proc: subprocess.Popen | None = None
        # initdb and postgres refuse to run as root: hand the directory to the postgres user
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def start(self) -> "Server":
        data = self.root / "data"
        subprocess.run([*self.as_user, str(self.bindir / "initdb"), "-D", str(data), "-U", "envkit",
                        "--auth=trust", "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
        self.proc = subprocess.Popen(
            [*self.as_user, str(self.bindir / "postgres"), "-D", str(data), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.root}",
             "-c", "fsync=off", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=open(self.root / "server.log", "wb"))
        wait_ready(self.admin_url, self.proc, self.root / "server.log")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            # "fast" shutdown: disconnects clients a test left open (SIGTERM's "smart" one would wait)
            subprocess.run([*self.as_user, str(self.bindir / "pg_ctl"), "stop", "-D", str(self.root / "data"),
                            "-m", "fast", "-w", "-t", "20"], capture_output=True)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def wait_ready(url: str, proc: subprocess.Popen | None = None, log: Path | None = None, timeout: float = 30) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if proc is not None and proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
                raise RuntimeError(f"PostgreSQL did not start on {url}:\n{text}")
            time.sleep(0.1)


def create_database(admin_url: str) -> tuple[str, str]:
    """A fresh, empty database: (its name, its URL)."""
    import psycopg

    name = f"envkit_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    return name, urlunsplit(parts._replace(path=f"/{name}"))


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
