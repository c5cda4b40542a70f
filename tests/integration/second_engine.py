"""A second Docker engine on this host, empty, for tests that need "another machine's" engine.

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


def _remove_stale_roots() -> None:
    """The data roots of earlier runs killed before their clean-up whose dockerd is gone (one still running is
    another session's, or an orphan: left alone)."""
    for root in Path(PARENT).glob(PREFIX + "*"):
        try:
            os.kill(int((root / "dockerd.pid").read_text().strip()), 0)
            continue
        except (OSError, ValueError):
            subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


@contextlib.contextmanager
def second_engine() -> Iterator[str]:
    """Start the second engine; yields its address (``unix://…``), for ``connect`` or ``DOCKER_HOST``."""
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if os.geteuid() != 0 or not os.access(dockerd, os.X_OK) or not shutil.which("iptables"):
        pytest.skip("a second engine needs root, dockerd and iptables")
    _remove_stale_roots()
    root = Path(tempfile.mkdtemp(prefix=PREFIX, dir=PARENT))  # the disk the first engine's is on
    address = f"unix://{root}/docker.sock"
    _teardown_network()  # what a killed run left
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", GATEWAY, "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
    for table, chain, rule in RULES:
        assert _iptables("-I", table, chain, rule) == 0, f"iptables -I {chain} {rule}"
    log = open(root / "dockerd.log", "wb")
    proc = subprocess.Popen([dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
                             "--pidfile", str(root / "dockerd.pid"), "-H", address, "--bridge", BRIDGE,
                             "--iptables=false", "--ip-masq=false"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "-H", address, "version"], capture_output=True).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the second engine did not start: {(root / 'dockerd.log').read_text()[-2000:]}")
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
        _teardown_network()
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def copy_image(ref: str, to_address: str) -> None:
    """``docker save`` from the first engine piped into ``docker load`` on the other (same image id)."""
    save = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
    load = subprocess.run(["docker", "-H", to_address, "load"], stdin=save.stdout, capture_output=True)
    assert save.wait() == 0 and load.returncode == 0, load.stderr.decode()[-2000:]
