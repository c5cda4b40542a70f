"""team.yaml's ``dispatch:`` section: where each of the fleet's GPU models lives, for ``envkit certify --fleet``.

Each GPU model of ``fleet.gpus`` maps to one target: a Slurm partition/constraint/gres (run on the node by its
Docker engine, by pyxis/enroot, or by Apptainer) or a Kubernetes namespace/node selector with NVIDIA's GPU
operator. ``dispatch.slurm`` and ``dispatch.kubernetes`` hold the settings every target of that kind shares;
a model's own keys override them. ``require`` is the promotion policy: ``certified`` (a GPU ran the payload on
every fleet model) or ``verified`` (the CPU checks passed on a node of every model: for test fleets whose nodes
have no GPU; the report says no GPU ran). Every value that reaches a job script or a manifest has a grammar.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, TypeVar

from pydantic import Field, model_validator

from .support.grammar import Grammar
from .support.models import Strict

# Slurm's names (partition, account, qos, gres type) and its constraint expressions (features joined by & | ,
# with brackets and counts), kept to characters that need no quoting in a job's command line
SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")
CONSTRAINT_RE = re.compile(r"[A-Za-z0-9_.:&|,()\[\]*!-]{1,200}")
# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]
SLURM_TIME_RE = re.compile(r"\d{1,5}(:\d{2}){0,2}|\d{1,3}-\d{1,2}(:\d{2}){0,2}")
# Kubernetes: DNS-1123 labels (namespace, service account, secret) and subdomains (priority and runtime classes)
K8S_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
K8S_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
LABEL_KEY_RE = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")

SlurmName = Annotated[str, Grammar(SLURM_NAME_RE, "Slurm name (letters, digits, '_', '.', '+', '-')")]
Constraint = Annotated[str, Grammar(CONSTRAINT_RE, "Slurm constraint (node features joined by & | ,)")]
SlurmTime = Annotated[str, Grammar(SLURM_TIME_RE, "Slurm time limit (MINUTES, HH:MM:SS or D-HH:MM:SS)")]
K8sLabel = Annotated[str, Grammar(K8S_LABEL_RE, "Kubernetes name (lowercase letters, digits and '-', at most 63)",
                                  max_length=63)]
K8sSubdomain = Annotated[str, Grammar(K8S_SUBDOMAIN_RE, "Kubernetes name (lowercase letters, digits, '-' and '.')",
                                      max_length=253)]
LabelKey = Annotated[str, Grammar(LABEL_KEY_RE, "Kubernetes label key (e.g. nvidia.com/gpu.product)", max_length=317)]
LabelValue = Annotated[str, Grammar(LABEL_VALUE_RE, "Kubernetes label value (at most 63 letters, digits, '-', '_', "
                                                    "'.')", max_length=63)]
GpuCount = Annotated[int, Field(ge=1, le=64)]
Runtime = Literal["docker", "pyxis", "apptainer"]
RUNTIMES: tuple[str, ...] = ("docker", "pyxis", "apptainer")


class SlurmTarget(Strict):
    """Where a GPU model's job goes on a Slurm cluster, and how its node runs the image."""

    partition: SlurmName | None = Field(None, description="sbatch --partition")
    constraint: Constraint | None = Field(None, description="sbatch --constraint: the node feature of this model")
    gres_type: SlurmName | None = Field(None, description="the gres type: --gres=gpu:<type>:<gpus>")
    gpus: GpuCount | None = Field(None, description="GPUs per job (default 1)")
    account: SlurmName | None = Field(None, description="sbatch --account")
    qos: SlurmName | None = Field(None, description="sbatch --qos")
    time_limit: SlurmTime | None = Field(None, description="sbatch --time (default: the payload's timeout + 5 min)")
    runtime: Runtime | None = Field(None, description="how the node runs the image: docker (its Docker engine, the "
                                                      "default), pyxis (srun --container-image) or apptainer "
                                                      "(apptainer exec --nv docker://...)")


class KubernetesTarget(Strict):
    """Where a GPU model's Job goes on a Kubernetes cluster with NVIDIA's GPU operator."""

    namespace: K8sLabel | None = Field(None, description="the Job's namespace (default: default)")
    node_selector: dict[LabelKey, LabelValue] | None = Field(
        None, description="the pods' node selector (default: GPU Feature Discovery's nvidia.com/gpu.product label "
                          "for the model, NVIDIA-<MODEL>: give it where your SKU's label differs)")
    gpus: GpuCount | None = Field(None, description="nvidia.com/gpu limit (default 1)")
    runtime_class: K8sSubdomain | None = Field(None, description="runtimeClassName (e.g. nvidia)")
    image_pull_secret: K8sLabel | None = Field(None, description="imagePullSecrets entry for the team registry")
    priority_class: K8sSubdomain | None = Field(None, description="priorityClassName")
    service_account: K8sSubdomain | None = Field(None, description="serviceAccountName")


class Route(Strict):
    """One fleet GPU model's target: exactly one of slurm or kubernetes."""

    slurm: SlurmTarget | None = None
    kubernetes: KubernetesTarget | None = None

    @model_validator(mode="after")
    def _one(self) -> "Route":
        if (self.slurm is None) == (self.kubernetes is None):
            raise ValueError("give exactly one of 'slurm' or 'kubernetes' (an empty mapping takes every setting "
                             "from dispatch.slurm or dispatch.kubernetes)")
        return self


class Dispatch(Strict):
    """Certify across the fleet: one job per (image, GPU model), through the team's scheduler."""

    require: Literal["certified", "verified"] = Field(
        "certified", description="what moves the promoted tag: certified (a GPU ran the payload on every fleet "
                                 "model) or verified (CPU checks passed on a node of every model; for test fleets "
                                 "without GPUs: the report says no GPU ran)")
    max_parallel: Annotated[int, Field(ge=1, le=1000)] = Field(8, description="jobs in the queue at once")
    pending_limit: Annotated[int, Field(ge=1, le=7 * 86400)] = Field(
        3600, description="seconds a job may wait in the queue before it is cancelled and named")
    retries: Annotated[int, Field(ge=0, le=5)] = Field(
        1, description="resubmissions of a job lost to its node (node failure, preemption, boot failure)")
    shared_dir: Annotated[str, Field(max_length=4096)] | None = Field(
        None, description="a directory this host and every node see at the same path (relative to this file): "
                          "the payload goes there and the jobs' reports come back there")
    slurm: SlurmTarget | None = Field(None, description="settings every Slurm target shares")
    kubernetes: KubernetesTarget | None = Field(None, description="settings every Kubernetes target shares")
    gpus: dict[Annotated[str, Field(max_length=40)], Route] = Field(
        min_length=1, description="per fleet GPU model (as fleet.gpus names it), its target")

    def target(self, model: str) -> SlurmTarget | KubernetesTarget | None:
        """``model``'s target with the shared settings under it (None: the model has no route)."""
        route = self.gpus.get(model)
        if route is None:
            return None
        if route.slurm is not None:
            return _merged(SlurmTarget, self.slurm, route.slurm)
        assert route.kubernetes is not None
        return _merged(KubernetesTarget, self.kubernetes, route.kubernetes)


T = TypeVar("T", SlurmTarget, KubernetesTarget)


def _merged(kind: type[T], shared: T | None, own: T) -> T:
    body = {**(shared.model_dump(exclude_none=True) if shared else {}), **own.model_dump(exclude_none=True)}
    return kind.model_validate(body)
