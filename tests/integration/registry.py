"""A real OCI registry for tests: Debian's ``docker-registry`` (distribution 2.x), on loopback.

Use the context manager::

    with running_registry(tmp_path) as reg:
        push(engine, "img:tag", f"{reg.host}/team/img", "t1")

or the module-scoped fixture (import it into a test module)::

    from tests.integration.registry import registry  # noqa: F401

The engine treats 127.0.0.0/8 registries as insecure (plain http) by default, so pushes to
``127.0.0.1:<port>/...`` work without TLS. Without the binary the tests skip, except under
CI, where it is installed (``apt-get install -y docker-registry``, as root).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
import requests

BINARY = "docker-registry"


def find_binary() -> str:
    """The registry binary; installed under CI, else the calling test skips."""
    path = shutil.which(BINARY) or ("/usr/bin/docker-registry" if Path("/usr/bin/docker-registry").exists() else None)
    if path:
        return path
    if os.environ.get("CI") and hasattr(os, "geteuid") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update"], check=True, capture_output=True, env=env, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", BINARY], check=True,
                       capture_output=True, env=env, timeout=600)
        path = shutil.which(BINARY)
        if path:
            return path
        pytest.fail(f"apt-get installed {BINARY} but it is not on PATH")
    if os.environ.get("CI"):
        pytest.fail(f"{BINARY} is not installed and this CI job is not root: apt-get install -y {BINARY}")
    pytest.skip(f"{BINARY} is not installed (apt-get install -y {BINARY})")


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


CONFIG = """\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: {delete}
http:
  addr: {address}:{port}
"""

TLS = """\
  tls:
    certificate: {cert}
    key: {key}
"""

CLIENT_CAS = """\
    clientcas:
      - {ca}
"""


@dataclass
class Registry:
    """One registry process; ``stop()`` and ``start()`` keep the port and the stored data."""

    workdir: Path
    binary: str
    address: str = "127.0.0.1"  # another of this host's addresses: a registry the engine does not treat as insecure
    port: int = 0  # 0: a free port on ``address``
    proc: subprocess.Popen | None = None
    tls: tuple[Path, Path] | None = None  # (certificate, key): serve https
    ca: Path | None = None  # the CA that signed the certificate (clients verify with it)
    auth: str = ""  # an ``auth:`` section for the config (registry_auth.py writes them)
    headers: Callable[[str], dict[str, str]] | None = None  # scope -> Authorization header, for manifest_digest
    client_ca: Path | None = None  # mutual TLS: only clients with a certificate from this CA are served
    client: tuple[Path, Path] | None = None  # (certificate, key) this fixture's own requests present
    delete: bool = True  # storage.delete.enabled: False gives a registry that answers DELETE with 405 UNSUPPORTED

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port(self.address)

    @property
    def host(self) -> str:
        return f"{self.address}:{self.port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}"

    @property
    def verify(self) -> str | bool:
        return str(self.ca) if self.ca else True

    def repo(self, name: str) -> str:
        return f"{self.host}/{name}"

    @property
    def log(self) -> Path:
        return self.workdir / "registry.log"

    def start(self, timeout: float = 20.0) -> "Registry":
        root = self.workdir / "data"
        root.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.yml"
        text = CONFIG.format(root=root, address=self.address, port=self.port, delete=str(self.delete).lower())
        if self.tls:
            text += TLS.format(cert=self.tls[0], key=self.tls[1])
            text += CLIENT_CAS.format(ca=self.client_ca) if self.client_ca else ""
        config.write_text(text + self.auth)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.binary} exited {self.proc.returncode}:\n{self.log.read_text()[-2000:]}")
            try:
                if requests.get(f"{self.url}/v2/", timeout=1, verify=self.verify, cert=self.client).status_code in (
                        200, 401 if self.auth else 200):
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the registry on {self.host} did not answer within {timeout}s:\n"
                           f"{self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def manifest_digest(self, name: str, reference: str) -> str | None:
        """What ``name:reference`` points to, read straight from the registry (None: no such tag)."""
        auth = self.headers(f"repository:{name}:pull") if self.headers else {}
        r = requests.get(f"{self.url}/v2/{name}/manifests/{reference}", timeout=10, verify=self.verify,
                         cert=self.client, headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json, "
                                                              "application/vnd.oci.image.manifest.v1+json", **auth})
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.headers["Docker-Content-Digest"]


@contextmanager
def running_registry(workdir: Path, *, delete: bool = True) -> Iterator[Registry]:
    """Start a registry storing under ``workdir``; stop it on exit. ``delete=False``: deletes disabled."""
    reg = Registry(Path(workdir), find_binary(), delete=delete).start()
    try:
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Iterator[Registry]:
    """A registry shared by one test module."""
    with running_registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg
