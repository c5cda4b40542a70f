"""Fleet dispatch at scale: N images x M GPU models through a real local Slurm (tests/slurmcluster.py: three nodes,
two CPUs each, so six jobs run at once), each job a stub payload that sleeps JOB_S and writes a report.

Prints the overhead per job (wall time less what the cluster needed to run the jobs back to back in waves of six
at their mean run time, divided by the jobs: envkit's and Slurm's scheduling and launch together), envkit's own
share of it (the time spent in Slurm's clients) and the end-to-end time against the slowest job and against the
sum of the jobs (goal: overhead under 1 s per job; wall time near the waves' time, far below the sum). The anchor is the
same jobs' run time, measured in the same run. Run: .venv/bin/python benchmarks/fleet_dispatch.py [--images 50]
[--models 4] [--job-s 1] (needs Debian's slurm-wlm and munge: scripts/ensure-slurm.sh).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envkit.dispatch.jobs import FleetJob  # noqa: E402
from envkit.dispatch.runner import run_jobs  # noqa: E402
from envkit.dispatch.slurm import SlurmCli  # noqa: E402
from envkit.payload.contents import SCHEMA  # noqa: E402
from envkit.spec_dispatch import SlurmTarget  # noqa: E402
from envkit.support.atomic import write_atomic  # noqa: E402
from tests.slurmcluster import NODES, Cluster  # noqa: E402

SLOTS = 2 * len(NODES)  # CPUs=2 per node, one CPU per job


class StubSlurm(SlurmCli):
    """Slurm's real clients; the job script a stub that sleeps and reports, instead of the payload in an image."""

    def __init__(self, env: dict[str, str], job_s: float):
        super().__init__("bench", env=env)
        self.job_s = job_s
        self.spent = {"sbatch": 0.0, "scontrol": 0.0}

    def _run(self, argv: list[str], what: str):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return super()._run(argv, what)
        finally:
            self.spent[argv[0]] = self.spent.get(argv[0], 0.0) + time.perf_counter() - start

    def submit(self, job: FleetJob) -> str:
        from envkit.dispatch.jobs import sbatch_args
        from envkit.dispatch.runner import clear

        clear(job)
        script = job.workdir / "job.sh"
        report = json.dumps({"schema": SCHEMA, "status": "verified", "checks": []})
        node = f"echo '{{\"node\": \"'$SLURMD_NODENAME'\", \"gpu\": false}}' > {job.workdir}/node.json\n"
        text = f"#!/bin/bash\nsleep {self.job_s}\necho '{report}' > {job.workdir}/report.json\n{node}"
        write_atomic(script, text.encode())
        script.chmod(0o755)
        args = [a for a in sbatch_args(job) if not a.startswith("--gres")]  # the stub needs no GPU slot
        proc = self._run(["sbatch", *args, "--cpus-per-task=1", str(script)], "submit a job")
        return proc.stdout.strip().split(";")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=50)
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--job-s", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="envkit-fleet-bench-") as tmp:
        cluster = Cluster(Path(tmp) / "slurm").start()
        try:
            jobs = [FleetJob("bench", f"img{i}", "stub", "sha256:" + hashlib.sha256(b"%d" % i).hexdigest(), f"M{m}",
                             SlurmTarget(partition="gpu", time_limit="5"), Path(tmp) / "shared", 60)
                    for i in range(args.images) for m in range(args.models)]
            start = time.perf_counter()
            slurm = StubSlurm(cluster.env, args.job_s)
            outcomes = run_jobs(jobs, slurm, max_parallel=len(jobs), pending_limit=3600,
                                retries=0, poll_s=0.5)
            wall = time.perf_counter() - start
        finally:
            cluster.stop()
    reported = sum(1 for o in outcomes if o.report is not None)
    for o in outcomes:
        if o.report is None:
            print(f"no report: {o.job.key}: {o.fault.message if o.fault else 'no fault'}")
    runs = [o.last.state.run_s() or 0.0 for o in outcomes if o.last and o.last.state]
    slowest, total = max(runs, default=0.0), sum(runs)
    mean = total / max(len(runs), 1)
    waves = math.ceil(len(jobs) / SLOTS) * mean  # the cluster's own floor: six at a time, back to back
    print(f"{len(jobs)} jobs ({args.images} images x {args.models} models), {reported} reported, {SLOTS} slots")
    print(f"wall {wall:.1f} s | slowest job {slowest:.1f} s | sum of jobs {total:.1f} s | waves of {SLOTS}: "
          f"{waves:.1f} s")
    print(f"end-to-end overhead per job (envkit and Slurm's scheduling and launch): {(wall - waves) / len(jobs):.3f} s "
          "(goal < 1 s)")
    print("time in Slurm's clients: " + ", ".join(f"{k} {v:.1f} s" for k, v in slurm.spent.items())
          + f" ({sum(slurm.spent.values()) / len(jobs):.3f} s per job)")
    print(f"wall / waves: {wall / waves:.2f}; wall / sum of jobs: {wall / max(total, 1e-9):.2f}")


if __name__ == "__main__":
    main()
