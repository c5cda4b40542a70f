"""A real single-host Slurm cluster for the fleet tests: Debian's slurm-wlm and munge (scripts/ensure-slurm.sh),
one munged, one slurmctld and three slurmd processes posing as an A100, an H100 and an L40S node through node
features and a gpu gres (``File=/dev/null``: the nodes have no GPU). Everything lives under one directory with its
own ports, so parallel test workers do not collide; ``stop`` ends every process it started (SIGTERM, then SIGKILL:
a slurmd that cannot register ignores SIGTERM)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NODES = (("a100", "a100"), ("h100", "h100"), ("l40s", "l40s"))  # (node name, feature and gres type)
SBIN = ("/usr/sbin", "/usr/bin")


def find(program: str) -> str | None:
    found = shutil.which(program)
    if found:
        return found
    for d in SBIN:
        if os.access(f"{d}/{program}", os.X_OK):
            return f"{d}/{program}"
    return None


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


@dataclass
class Cluster:
    root: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client needs to talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        ctl, *node_ports = free_ports(1 + len(NODES))
        host = socket.gethostname()
        (self.root / "spool").mkdir(parents=True, exist_ok=True)
        (self.root / "state").mkdir(exist_ok=True)
        key = self.root / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
        nodes = "\n".join(
            f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs=2 RealMemory=1000 "
            f"Features={feature} Gres=gpu:{feature}:1 State=UNKNOWN"
            for (name, feature), port in zip(NODES, node_ports, strict=True))
        names = ",".join(n for n, _ in NODES)
        self.conf.write_text(f"""\
ClusterName=envkittest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctl}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.root}/munge.sock
CredType=cred/munge
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool/%n
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd-%n.pid
SlurmctldLogFile={self.root}/slurmctld.log
SlurmdLogFile={self.root}/slurmd-%n.log
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=30
UnkillableStepTimeout=180
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
JobCompType=jobcomp/none
{nodes}
PartitionName=gpu Nodes={names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")
        (self.root / "gres.conf").write_text("\n".join(
            f"NodeName={name} Name=gpu Type={feature} File=/dev/null" for name, feature in NODES) + "\n")

    def start(self, timeout: float = 30) -> "Cluster":
        self.write_config()
        munged = find("munged")
        self._daemon([munged, f"--socket={self.root}/munge.sock", f"--key-file={self.root}/munge.key",
                      f"--pid-file={self.root}/munged.pid", f"--log-file={self.root}/munged.log",
                      f"--seed-file={self.root}/munged.seed", "--force"], pidfile=self.root / "munged.pid")
        self._spawn([find("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for name, _ in NODES:
            (self.root / "spool" / name).mkdir(exist_ok=True)
            self._spawn([find("slurmd"), "-D", "-N", name, "-f", str(self.conf)])
        self.wait_idle(timeout)
        return self

    def _spawn(self, argv: list) -> None:
        log = open(self.root / f"{Path(argv[0]).name}-{len(self.procs)}.out", "wb")
        self.procs.append(subprocess.Popen([str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                                           env=self.env, start_new_session=True))
        log.close()

    def _daemon(self, argv: list, pidfile: Path) -> None:
        subprocess.run([str(a) for a in argv], check=True, timeout=30, capture_output=True)
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text().strip():
                self.pids.append(int(pidfile.read_text().split()[0]))
                return
            time.sleep(0.05)
        raise RuntimeError(f"{argv[0]} wrote no pid file")

    def slurm(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster (``timeout``: sinfo retries while the controller is down)."""
        return subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)

    def wait_idle(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited; logs in {self.root}")
            try:
                out = self.slurm("sinfo", "--Node", "--noheader", "--format=%N %t", timeout=5)
                last = out.stdout + out.stderr
                states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
                if len(states) == len(NODES) and all(s == "idle" for s in states.values()):
                    return
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the nodes did not become idle in {timeout}s: {last}; logs in {self.root}")

    def ready(self, timeout: float = 60) -> None:
        """Every node idle again, before a test: a node a killed job drained ("Kill task failed" on a busy host) is
        resumed, and the jobs an earlier test left are waited for."""
        out = self.slurm("sinfo", "--Node", "--noheader", "--format=%N %t", timeout=10).stdout
        for line in out.splitlines():
            name, _, state = line.strip().partition(" ")
            if state.rstrip("*~#!%$@^-") in ("drain", "drng", "down", "fail", "inval"):
                self.slurm("scontrol", "update", f"nodename={name}", "state=resume", timeout=10)
        self.wait_idle(timeout)

    def stop(self) -> None:
        try:
            self.slurm("scancel", "--full", "--partition=gpu", timeout=5)
        except (subprocess.TimeoutExpired, OSError):
            pass
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
