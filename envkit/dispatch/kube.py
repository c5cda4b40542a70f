"""Kubernetes Jobs for fleet certification, built with the official ``kubernetes`` client's models (pure: nothing
here talks to a cluster).

One Job per (image, GPU model): ``backoffLimit: 0`` (a failed pod is a named fault, not a silent retry),
``activeDeadlineSeconds`` (the payload's timeout and ``SLACK_S``), ``ttlSecondsAfterFinished`` (the cluster
removes it after envkit read it), ``restartPolicy: Never``, the ``nvidia.com/gpu`` limit, the node selector
(default: GPU Feature Discovery's ``nvidia.com/gpu.product`` label, ``NVIDIA-<MODEL>``), an in-memory emptyDir at
``/dev/shm`` (the 64 MB default starves data loaders and NCCL), the runtime class, pull secret, priority class and
service account the target names. The payload and its expectations travel in a ConfigMap mounted read-only at the
harness's ``MOUNT``; the payload's JSON document comes back in the pod's log. Validated against the official
schemas (``kubernetes-validate``, strict) in the tests; submitted and watched by ``kube_api.KubeJobs``.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from kubernetes import client

from ..engine.protocol import RUN_SHM_SIZE
from ..payload.contents import PAYLOAD_NAME, payload_expect, payload_files
from ..payload.harness import MOUNT, payload_command
from ..spec_dispatch import KubernetesTarget
from .jobs import SLACK_S, FleetJob, model_slug
from .states import JobState

GFD_PRODUCT = "nvidia.com/gpu.product"  # GPU Feature Discovery's node label
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource
TTL_S = 3600  # how long a finished Job stays for envkit (and people) to read
LABEL = "app.kubernetes.io/managed-by"
_NAME = re.compile(r"[^a-z0-9-]+")


def gfd_product(model: str) -> str:
    """The default node selector value for ``model``: 'NVIDIA-' + the model, spaces as '-' ('NVIDIA-L40S'). GFD names
    the SKU ('NVIDIA-H100-80GB-HBM3'), so a target gives its own ``node_selector`` where that differs."""
    return "NVIDIA-" + "-".join(model.split())


def k8s_name(job: FleetJob) -> str:
    """A DNS-1123 name for the Job and its ConfigMap (at most 63 characters)."""
    base = _NAME.sub("-", f"envkit-{job.team}-{job.image_name}-{model_slug(job.model)}".lower()).strip("-")
    return base[:52].rstrip("-") + "-" + job.image_id.removeprefix("sha256:")[:10]


def _shm_limit() -> str:
    return RUN_SHM_SIZE.upper().removesuffix("G") + "Gi" if RUN_SHM_SIZE.lower().endswith("g") else RUN_SHM_SIZE


def payload_config_map(job: FleetJob, expect: dict) -> client.V1ConfigMap:
    """The payload's files and ``expect.json``, as one ConfigMap (keys are flat; the Job's volume puts each file
    back at its path under ``MOUNT``)."""
    data = {f"{PAYLOAD_NAME}.{name}": body.decode() for name, body in payload_files().items()}
    data["expect.json"] = json.dumps(payload_expect(expect), sort_keys=True)
    return client.V1ConfigMap(api_version="v1", kind="ConfigMap",
                              metadata=client.V1ObjectMeta(name=k8s_name(job), labels=_labels(job)), data=data)


def _labels(job: FleetJob) -> dict[str, str]:
    return {LABEL: "envkit", "envkit.io/team": job.team, "envkit.io/image": job.image_name,
            "envkit.io/gpu-model": model_slug(job.model)}


def _volumes(job: FleetJob) -> list[client.V1Volume]:
    items = [client.V1KeyToPath(key=f"{PAYLOAD_NAME}.{name}", path=f"{PAYLOAD_NAME}/{name}")
             for name in sorted(payload_files())]
    items.append(client.V1KeyToPath(key="expect.json", path="expect.json"))
    return [client.V1Volume(name="payload", config_map=client.V1ConfigMapVolumeSource(
                name=k8s_name(job), items=items, default_mode=0o444)),
            client.V1Volume(name="shm", empty_dir=client.V1EmptyDirVolumeSource(medium="Memory",
                                                                                size_limit=_shm_limit()))]


def job_manifest(job: FleetJob, name: str | None = None) -> client.V1Job:
    """The Job that certifies ``job.image`` on a node of ``job.model`` (``name``: this attempt's; default
    ``k8s_name``)."""
    t = job.target
    assert isinstance(t, KubernetesTarget)
    gpus = str(t.gpus or 1)
    container = client.V1Container(
        name="certify", image=job.image, command=payload_command(job.timeout, "certify"),
        resources=client.V1ResourceRequirements(limits={GPU_RESOURCE: gpus}),
        volume_mounts=[client.V1VolumeMount(name="payload", mount_path=MOUNT, read_only=True),
                       client.V1VolumeMount(name="shm", mount_path="/dev/shm")])
    pod = client.V1PodSpec(
        restart_policy="Never", containers=[container], volumes=_volumes(job),
        node_selector=dict(t.node_selector) if t.node_selector else {GFD_PRODUCT: gfd_product(job.model)},
        runtime_class_name=t.runtime_class, priority_class_name=t.priority_class,
        service_account_name=t.service_account,
        image_pull_secrets=[client.V1LocalObjectReference(name=t.image_pull_secret)] if t.image_pull_secret else None)
    return client.V1Job(
        api_version="batch/v1", kind="Job",
        metadata=client.V1ObjectMeta(name=name or k8s_name(job), namespace=t.namespace or "default",
                                     labels=_labels(job)),
        spec=client.V1JobSpec(
            backoff_limit=0, active_deadline_seconds=job.timeout + SLACK_S, ttl_seconds_after_finished=TTL_S,
            template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=_labels(job)), spec=pod)))


def as_document(obj: Any) -> dict:
    """A client model as the API's JSON (camelCase keys, no nulls)."""
    doc: dict = client.ApiClient().sanitize_for_serialization(obj)
    return doc


# ----------------------------------------------------------------------- what the API says
def _ts(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _terminated(pod: dict) -> dict:
    for c in (pod.get("status") or {}).get("containerStatuses") or []:
        done = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated")
        if done:
            return dict(done)
    return {}


def _disruption(pod: dict) -> str:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "")
    return ""


def _waiting(pod: dict) -> str:
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        reason = ((c.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return str(reason)
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "Unschedulable")
    return ""


def job_state(job_id: str, job: dict, pods: list[dict]) -> JobState:
    """A Job and its pods (the API's JSON) in Slurm's words, so one runner and one ``classify`` serve both:
    Complete -> COMPLETED; DeadlineExceeded -> TIMEOUT; a container OOMKilled -> OUT_OF_MEMORY; a pod the scheduler
    preempted -> PREEMPTED; one lost with its node -> NODE_FAIL; other failures -> FAILED; a running pod ->
    RUNNING; else PENDING with its reason (Unschedulable, ImagePullBackOff, ...)."""
    status = job.get("status") or {}
    conds = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    pod = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""), default={})
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    done = _terminated(pod)
    started = _ts(((pod.get("status") or {}).get("startTime"))) or _ts(status.get("startTime"))
    submitted = _ts((job.get("metadata") or {}).get("creationTimestamp"))
    exit_code = f"{done.get('exitCode', '')}:{done.get('signal', 0) or 0}" if done else ""
    if "Complete" in conds or status.get("succeeded"):
        state, reason, ended = "COMPLETED", "", _ts(status.get("completionTime"))
    elif "Failed" in conds:
        reason = str(conds["Failed"].get("reason") or "")
        ended = _ts(conds["Failed"].get("lastTransitionTime"))
        disrupted = _disruption(pod)
        state = ("TIMEOUT" if reason == "DeadlineExceeded" else
                 "OUT_OF_MEMORY" if done.get("reason") == "OOMKilled" else
                 "PREEMPTED" if disrupted == "PreemptionByScheduler" else
                 "NODE_FAIL" if disrupted in ("DeletionByTaintManager", "TerminationByKubelet") else "FAILED")
    elif (pod.get("status") or {}).get("phase") == "Running":
        state, reason, ended = "RUNNING", "", None
    else:
        state, reason, ended, started = "PENDING", _waiting(pod) or "Pending", None, None
    return JobState(job_id, state, reason=reason, node=node, exit_code=exit_code, submitted=submitted,
                    started=started, ended=ended)
