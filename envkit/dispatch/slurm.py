"""Slurm through its own command-line clients (the one place envkit runs them): ``sbatch --parsable`` submits,
``scontrol show job --oneliner`` reads every job's state in one call (no accounting database needed, as ``sacct``
would), ``scancel`` cancels. Which cluster is the clients' business: ``$SLURM_CONF``, or the site's config.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from ..errors import DispatchError
from ..support.atomic import write_atomic
from .jobs import FleetJob, job_script, sbatch_args
from .runner import clear
from .states import JobState, parse_scontrol

CLIENT_TIMEOUT_S = 60  # a client retries for minutes while the controller is down: cut it short and say so
_HINTS = (
    ("Invalid feature specification", "the constraint names a feature no node of the partition has: "
                                      "`sinfo -o '%N %f'` lists the nodes' features"),
    ("Requested node configuration is not available", "no node has the GPUs (gres type and count) or the feature "
                                                      "asked for: `sinfo -o '%N %G %f'` lists them"),
    ("Invalid partition", "no such partition: `sinfo -s` lists them"),
    ("Invalid account", "the account is not one Slurm knows for this user: `sacctmgr show assoc user=$USER`"),
    ("Invalid qos", "the qos is not one this account may use: `sacctmgr show assoc user=$USER format=qos`"),
    ("Unable to contact slurm controller", "is slurmctld up? `scontrol ping`"),
)


def prepare(job: FleetJob, envkit_version: str) -> Path:
    """Write ``job``'s batch script into its cleared directory; its path."""
    clear(job)
    script = job.workdir / "job.sh"
    write_atomic(script, job_script(job, envkit_version).encode())
    script.chmod(0o755)
    return script


class SlurmCli:
    """``submit``, ``states`` and ``cancel`` over Slurm's clients, each one subprocess."""

    scheduler = "slurm"

    def __init__(self, envkit_version: str, env: dict[str, str] | None = None, timeout: float = CLIENT_TIMEOUT_S):
        self.envkit_version = envkit_version
        self.env = env
        self.timeout = timeout

    def _run(self, argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout, stdin=subprocess.DEVNULL,
                                  env=self.env if self.env is not None else dict(os.environ))
        except FileNotFoundError:
            raise DispatchError(f"cannot {what}: {argv[0]} is not installed here",
                                hint="install Slurm's clients (Debian: slurm-client) on the host that runs "
                                     "`envkit certify --fleet`, with the cluster's slurm.conf") from None
        except subprocess.TimeoutExpired:
            raise DispatchError(f"cannot {what}: {argv[0]} did not answer in {self.timeout:.0f} s",
                                hint="is slurmctld up and reachable? `scontrol ping`") from None
        return proc

    def submit(self, job: FleetJob) -> str:
        """Write ``job``'s batch script and submit it with its sbatch arguments; the job id."""
        script = prepare(job, self.envkit_version)
        proc = self._run(["sbatch", *sbatch_args(job), str(script)], "submit a job")
        out = proc.stdout.strip()
        job_id = out.split(";")[0].strip() if out else ""
        if proc.returncode != 0 or not job_id.isdigit():
            said = (proc.stderr.strip() or out or f"exit {proc.returncode}")[-400:]
            hint = next((h for needle, h in _HINTS if needle in said),
                        "check the target's partition, constraint, gres, account and qos in dispatch:")
            raise DispatchError(f"sbatch refused the job {script.parent.name}: {said}", hint=hint)
        return job_id

    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        """The state of each of ``job_ids`` the controller still knows (``MinJobAge`` after they ended)."""
        wanted = set(job_ids)
        if not wanted:
            return {}
        proc = self._run(["scontrol", "--oneliner", "show", "job"], "read the jobs' states")
        if proc.returncode != 0 and "No jobs in the system" not in proc.stdout + proc.stderr:
            raise DispatchError(f"scontrol could not read the jobs: {(proc.stderr or proc.stdout).strip()[-300:]}",
                                hint="is slurmctld up? `scontrol ping`")
        return {k: v for k, v in parse_scontrol(proc.stdout).items() if k in wanted}

    def collect(self, job: FleetJob, job_id: str) -> None:
        """Nothing to fetch: the job script wrote its report and node into the shared directory."""

    def cancel(self, job_ids: Iterable[str]) -> None:
        ids = sorted(set(job_ids))
        if ids:
            self._run(["scancel", *ids], "cancel the jobs")
