"""A second Docker engine on this host, empty, for tests that need "another machine's" engine; and a Podman one.

Its own dockerd (Debian's, the one `make engine` starts), with its own data root, exec root (so its own managed
containerd), socket and bridge: nothing of the first engine's images, build cache or containers reaches it. Its
bridge (``envkit-br2``, 172.31.254.0/24) gets its own NAT rule, since this dockerd runs with ``--iptables=false``
(two daemons editing the same DOCKER chains would undo each other's rules); the rules, the bridge, the daemon
and its data root go at the end. Needs root and dockerd; skipped otherwise.

What it is not: another kernel, CPU or filesystem; those a second machine would vary too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

PARENT, PREFIX = "/var/tmp", "envkit-engine2-"
BRIDGE = "envkit-br2"
GATEWAY = "172.31.254.1/24"
SUBNET = "172.31.254.0/24"
# (table, chain, rule): NAT for the bridge's subnet, and forwarding to and from it (the FORWARD policy the first
# engine set is DROP)
RULES = [(["-t", "nat"], "POSTROUTING", ["-s", SUBNET, "!", "-o", BRIDGE, "-j", "MASQUERADE"]),
         ([], "FORWARD", ["-i", BRIDGE, "-j", "ACCEPT"]), ([], "FORWARD", ["-o", BRIDGE, "-j", "ACCEPT"])]


def _iptables(op: str, table: list[str], chain: str, rule: list[str]) -> int:
    return subprocess.run(["iptables", *table, op, chain, *rule], capture_output=True).returncode


def _teardown_network() -> None:
    for table, chain, rule in RULES:
        while _iptables("-C", table, chain, rule) == 0:
            _iptables("-D", table, chain, rule)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def _remove_stale_roots(prefix: str) -> None:
    """The roots of earlier runs killed before their clean-up whose daemon is gone (one still running is another
    session's, or an orphan: left alone): what they left mounted, then the directory."""
    for root in Path(PARENT).glob(prefix + "*"):
        try:
            os.kill(int((root / "daemon.pid").read_text().strip()), 0)
            continue
        except (OSError, ValueError):
            _unmount_under(root)
            subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def _unmount_under(root: Path) -> None:
    """Unmount what a stopped daemon left mounted under ``root`` (Podman's overlay driver mounts its own directory),
    deepest first, so the directory can be removed."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{root}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)


@contextlib.contextmanager
def _serving(argv: list[str], address: str, root: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``argv``, a daemon serving the Docker API at ``address`` (its pid in ``root/daemon.pid``, its output in
    ``root/daemon.log``), until the API answers; yield the address; stop it at the end (SIGTERM, killed after 60 s),
    then unmount what it left under ``root`` and remove ``root``."""
    log = open(root / "daemon.log", "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    (root / "daemon.pid").write_text(str(proc.pid))
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "-H", address, "version"], capture_output=True).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{argv[0]} did not start: {(root / 'daemon.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        _unmount_under(root)
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


@contextlib.contextmanager
def second_engine() -> Iterator[str]:
    """Start the second engine; yields its address (``unix://…``), for ``connect`` or ``DOCKER_HOST``."""
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if os.geteuid() != 0 or not os.access(dockerd, os.X_OK) or not shutil.which("iptables"):
        pytest.skip("a second engine needs root, dockerd and iptables")
    _remove_stale_roots(PREFIX)
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=PARENT))  # the disk the first engine's is on
    address = f"unix://{root}/docker.sock"
    _teardown_network()  # what a killed run left
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", GATEWAY, "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
    for table, chain, rule in RULES:
        assert _iptables("-I", table, chain, rule) == 0, f"iptables -I {chain} {rule}"
    try:
        with _serving([dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "-H", address,
                       "--pidfile", str(root / "dockerd.pid"), "--bridge", BRIDGE, "--iptables=false",
                       "--ip-masq=false"], address, root):
            yield address
    finally:
        _teardown_network()


PODMAN_PREFIX = "envkit-podman-"
# what this sandbox needs of Podman's containers (docs/images.md, "Another engine and builder: Podman")
PODMAN_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""


@contextlib.contextmanager
def podman_engine() -> Iterator[str]:
    """Another engine and another builder: Debian's Podman (``podman system service``) on a socket of its own, with
    its own storage and run roots (nothing of the machine's Podman or Docker reaches it) and the settings this
    sandbox needs (runc, cgroupfs, ulimits: PODMAN_CONF). envkit reaches it as a Docker engine (its
    Docker-compatible API); its builds are buildah's. Yields the address (``unix://…``); stops it and removes its
    storage. Skipped without root or podman (``make test`` installs it: scripts/ensure-podman.sh)."""
    podman = shutil.which("podman")
    if os.geteuid() != 0 or podman is None:
        pytest.skip("a Podman engine needs root and Debian's podman (scripts/ensure-podman.sh)")
    _remove_stale_roots(PODMAN_PREFIX)
    root = Path(tempfile.mkdtemp(prefix=PODMAN_PREFIX, dir=PARENT))
    address = f"unix://{root}/podman.sock"
    (root / "containers.conf").write_text(PODMAN_CONF)
    with _serving([podman, "--root", str(root / "storage"), "--runroot", str(root / "run"), "--tmpdir",
                   str(root / "tmp"), "system", "service", "--time=0", address], address, root,
                  env=dict(os.environ, CONTAINERS_CONF=str(root / "containers.conf"))):
        yield address


def copy_image(ref: str, to_address: str) -> None:
    """``docker save`` from the first engine piped into ``docker load`` on the other (same image id)."""
    save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "-H", to_address, "load"], stdin=save.stdout, capture_output=True)
    assert save.wait() == 0 and load.returncode == 0, load.stderr.decode()[-2000:]
