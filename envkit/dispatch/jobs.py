"""Fleet jobs as data (pure): one per (image, fleet GPU model), its files in the shared directory, the sbatch
arguments its target asks for, and the job script that runs the payload on the node with the target's runtime.

The payload and its expectations sit in ``<shared>/<team>/<image id>/mount`` (mounted read-only at the harness's
``MOUNT``, as local certification mounts them); each job has ``<shared>/<team>/<image id>/<model>/``: its script,
its state (``job.json``: the job id, so a resumed run re-attaches), the scheduler's log, what the node said
(``node.json``: its name, whether it has a GPU) and the payload's report (``report.json``, written whole only
when the payload finished: a killed job leaves none).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..engine.protocol import GPU_ULIMITS, RUN_SHM_SIZE
from ..payload.harness import MOUNT, payload_command
from ..render.templates import environment
from ..spec_dispatch import KubernetesTarget, SlurmTarget
from ..support.labels import CONTAINER_LABEL

TEMPLATE = "fleet-job.sh.j2"
SLACK_S = 300  # the default Slurm time limit: the payload's timeout and this much for the image's start
REPORT, NODE, STATE, LOG = "report.json", "node.json", "job.json", "slurm.out"
_SLUG = re.compile(r"[^a-z0-9]+")


def model_slug(model: str) -> str:
    """'H100' -> 'h100', 'RTX 6000 Ada' -> 'rtx-6000-ada', '9.0' -> '9-0': a directory and job name part."""
    return _SLUG.sub("-", model.lower()).strip("-") or "gpu"


@dataclass(frozen=True)
class FleetJob:
    """Certify ``image`` (``image_id``) on fleet model ``model`` through ``target``."""

    team: str
    image_name: str
    image: str  # the reference the node runs (a registry reference for pyxis and apptainer)
    image_id: str
    model: str
    target: SlurmTarget | KubernetesTarget
    shared: Path
    timeout: int  # the payload's, seconds
    mount_id: str = "mount"  # ``mount_name``: the payload and expectations' own digest

    @property
    def key(self) -> str:
        return f"{self.image_name}@{self.model}"

    @property
    def image_dir(self) -> Path:
        return self.shared / self.team / self.image_id.removeprefix("sha256:")[:16]

    @property
    def mount_dir(self) -> Path:
        return self.image_dir / self.mount_id

    @property
    def workdir(self) -> Path:
        return self.image_dir / model_slug(self.model)

    @property
    def name(self) -> str:
        """The scheduler's job name: envkit-<team>-<image>-<model>."""
        return f"envkit-{self.team}-{self.image_name}-{model_slug(self.model)}"[:120]


def mount_name(payload_sha256: str, expect: dict) -> str:
    """The payload directory's name: its content's digest, so a run never rewrites what a running job reads (a
    resumed run re-attaches to jobs that read the one an earlier run wrote)."""
    body = json.dumps({"payload": payload_sha256, "expect": expect}, sort_keys=True, default=str).encode()
    return "mount-" + hashlib.sha256(body).hexdigest()[:16]


def time_limit(job: FleetJob) -> str:
    """sbatch --time: the target's, else the payload's timeout plus ``SLACK_S``, in whole minutes."""
    assert isinstance(job.target, SlurmTarget)
    if job.target.time_limit:
        return job.target.time_limit
    return str(-(-(job.timeout + SLACK_S) // 60))


def sbatch_args(job: FleetJob) -> list[str]:
    """sbatch's arguments for ``job`` (before the script's path): --parsable, so it prints the job id alone."""
    t = job.target
    assert isinstance(t, SlurmTarget)
    gres = ":".join(["gpu", *([t.gres_type] if t.gres_type else []), str(t.gpus or 1)])
    args = ["--parsable", f"--job-name={job.name}", f"--output={job.workdir / LOG}", f"--chdir={job.workdir}",
            f"--gres={gres}", f"--time={time_limit(job)}", "--nodes=1", "--ntasks=1"]
    for flag, value in (("partition", t.partition), ("constraint", t.constraint), ("account", t.account),
                        ("qos", t.qos)):
        if value:
            args.append(f"--{flag}={value}")
    return args


def launch_argv(job: FleetJob, mode: str = "$mode") -> list[str]:
    """The command the job script runs for the target's runtime, the payload's command at its end. ``$mode`` and
    the GPU flags are the script's: decided on the node (certify where it has a GPU, else verify)."""
    t = job.target
    assert isinstance(t, SlurmTarget)
    payload = payload_command(job.timeout, mode)
    mount = f"{job.mount_dir}:{MOUNT}:ro"
    runtime = t.runtime or "docker"
    if runtime == "pyxis":
        return ["srun", "--ntasks=1", f"--container-image={pyxis_image(job.image)}", f"--container-mounts={mount}",
                "--no-container-mount-home", *payload]
    if runtime == "apptainer":
        return ["apptainer", "exec", "--nv", "--cleanenv", "--bind", mount, f"docker://{job.image}", *payload]
    return ["docker", "run", "--rm", "--name", "$name", f"--label={CONTAINER_LABEL}=certify",
            f"--shm-size={RUN_SHM_SIZE}", "$gpus", "-v", mount, job.image, *payload]


def docker_gpu_flags() -> str:
    """The docker flags a node with a GPU adds (the script's ``gpus`` array, after ``--gpus``): the ulimits NCCL
    wants, as ``envkit run`` and local certification give GPU jobs."""
    return " ".join(shlex.quote(f"--ulimit={k}={v}") for k, v in GPU_ULIMITS.items())


def pyxis_image(ref: str) -> str:
    """enroot's spelling of an image reference: the registry host apart with '#' (``host:5000#team/img:tag``)."""
    first, sep, rest = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return ref


def _shell(argv: list[str]) -> str:
    """``argv`` as one shell line, every word quoted except the script's own variables ($name, $mode, $gpus)."""
    words = []
    for word in argv:
        if word == "$gpus":
            words.append('"${gpus[@]}"')
        elif "$" in word:
            words.append('"' + word + '"' if re.fullmatch(r"[A-Za-z0-9_/:=.@-]*\$(name|mode)", word) else
                         shlex.quote(word))
        else:
            words.append(shlex.quote(word))
    return " ".join(words)


def job_script(job: FleetJob, envkit_version: str) -> str:
    """The batch script of ``job``: says which node ran it and whether it has a GPU (``node.json``), runs the
    payload with the target's runtime, and writes its report whole (``report.json``) only when it finished;
    SIGTERM (scancel, the time limit) removes the container it started."""
    runtime = (job.target.runtime if isinstance(job.target, SlurmTarget) else None) or "docker"
    return environment().get_template(TEMPLATE).render(
        version=envkit_version, key=job.key, image=job.image, model=job.model, runtime=runtime,
        workdir=shlex.quote(str(job.workdir)), launch=_shell(launch_argv(job)),
        report=REPORT, node=NODE, container_prefix=f"envkit-fleet-{job.team}", gpu_flags=docker_gpu_flags())
