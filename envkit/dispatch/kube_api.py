"""Kubernetes through the official ``kubernetes`` client (the one place envkit calls a cluster's API): per job a
ConfigMap with the payload and a Job (``kube.job_manifest``); states read from the Job and its pods
(``kube.job_state``); a finished job's report collected from its pod's log; cancelling deletes the Job (and its
pods, in the background). Which cluster is the client's business: ``$KUBECONFIG`` / ``~/.kube/config``, else the
pod's service account when envkit itself runs in a cluster.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ..errors import DispatchError
from ..spec_dispatch import KubernetesTarget
from ..support.atomic import write_atomic
from .jobs import NODE, REPORT, FleetJob
from .kube import as_document, job_manifest, job_state, k8s_name, payload_config_map
from .states import JobState


def connect() -> client.ApiClient:
    """An API client for the cluster the kubeconfig (or the pod's service account) names."""
    try:
        config.load_kube_config()
    except (config.ConfigException, OSError, TypeError):
        try:
            config.load_incluster_config()
        except config.ConfigException:
            raise DispatchError("no Kubernetes cluster is configured here (no kubeconfig, not in a pod)",
                                hint="set $KUBECONFIG (or ~/.kube/config) to the cluster's config") from None
    return client.ApiClient()


class KubeJobs:
    """``submit``, ``states``, ``collect`` and ``cancel`` over the Batch and Core APIs. Job ids are
    ``namespace/name``."""

    scheduler = "kubernetes"

    def __init__(self, api: client.ApiClient, expects: dict[str, dict]):
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)
        self.expects = expects  # image id -> what the payload must find

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except ApiException as exc:
            if exc.status == 404:
                return None
            said = (exc.body or exc.reason or "")[:300] if isinstance(exc.body or exc.reason, str) else exc.reason
            raise DispatchError(f"the Kubernetes API refused to {what}: HTTP {exc.status} {said}",
                                hint="check the target's namespace, and that this account may create Jobs and "
                                     "ConfigMaps there (kubectl auth can-i create jobs -n NAMESPACE)") from None
        except (HTTPError, OSError) as exc:
            raise DispatchError(f"cannot {what}: the Kubernetes API did not answer ({exc})",
                                hint="is the cluster reachable from here? (kubectl cluster-info)") from None

    def submit(self, job: FleetJob) -> str:
        assert isinstance(job.target, KubernetesTarget)
        ns = job.target.namespace or "default"
        cm = payload_config_map(job, self.expects[job.image_id])
        if self._call("create the payload's ConfigMap", self.core.create_namespaced_config_map, ns, cm) is None:
            raise DispatchError(f"namespace {ns!r} does not exist", hint="create it, or name another in dispatch:")
        name = f"{k8s_name(job)[:56]}-{secrets.token_hex(3)}"  # one Job per attempt
        self._call("create the Job", self.batch.create_namespaced_job, ns, job_manifest(job, name))
        return f"{ns}/{name}"

    def _read(self, job_id: str) -> tuple[dict | None, list[dict]]:
        ns, _, name = job_id.partition("/")
        raw = self._call("read a Job", self.batch.read_namespaced_job_status, name, ns, _preload_content=False)
        if raw is None:
            return None, []
        pods = self._call("list a Job's pods", self.core.list_namespaced_pod, ns, label_selector=f"job-name={name}",
                          _preload_content=False)
        return json.loads(raw.data), (json.loads(pods.data).get("items") or []) if pods is not None else []

    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        out = {}
        for job_id in job_ids:
            job, pods = self._read(job_id)
            if job is not None:
                out[job_id] = job_state(job_id, job, pods)
        return out

    def collect(self, job: FleetJob, job_id: str) -> None:
        """The pod's log (the payload's document on stdout) into ``report.json``, and its node into ``node.json``:
        the Job asked for ``nvidia.com/gpu``, so the pod ran where one was allocated."""
        ns = job_id.partition("/")[0]
        _, pods = self._read(job_id)
        if not pods:
            return
        pod = pods[-1]
        name = str((pod.get("metadata") or {}).get("name"))
        node = {"node": (pod.get("spec") or {}).get("nodeName") or "", "gpu": True, "job_id": job_id,
                "runtime": "kubernetes"}
        write_atomic(job.workdir / NODE, json.dumps(node).encode() + b"\n")
        log = self._call("read the pod's log", self.core.read_namespaced_pod_log, name, ns)
        if log:
            write_atomic(job.workdir / REPORT, str(log).encode())

    def cancel(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            ns, _, name = job_id.partition("/")
            self._call("delete a Job", self.batch.delete_namespaced_job, name, ns, propagation_policy="Background")


def manifests(job: FleetJob, expect: dict) -> list[dict]:
    """What ``submit`` creates for ``job``, as documents (``--dry-run`` style output and the tests)."""
    return [as_document(payload_config_map(job, expect)), as_document(job_manifest(job))]
