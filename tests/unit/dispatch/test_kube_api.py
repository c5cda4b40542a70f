"""The Kubernetes backend's wire calls through the official client, against a local HTTP server
(tests/kubefake.py): it proves the calls and how their answers are read, not scheduling, admission or pods."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("kubernetes")

from kubernetes import client  # noqa: E402

from envkit.dispatch.kube_api import KubeJobs  # noqa: E402
from envkit.dispatch.runner import run_jobs  # noqa: E402
from envkit.dispatch.verdict import fleet_certificate  # noqa: E402
from envkit.spec_dispatch import KubernetesTarget  # noqa: E402
from tests.kubefake import FakeApi  # noqa: E402
from tests.unit.certify.test_certificate import EXPECT, H200, WHEN, gpu_doc  # noqa: E402

H100 = {**H200, "name": "NVIDIA H100 80GB HBM3"}


@pytest.fixture
def cluster():
    started = []

    def start(api: FakeApi) -> KubeJobs:
        server, url = api.start()
        started.append(server)
        configuration = client.Configuration()
        configuration.host = url
        return KubeJobs(client.ApiClient(configuration), {"sha256:" + "ab" * 32: EXPECT})

    yield start
    for server in started:
        server.shutdown()


@pytest.fixture
def kube_job(make_job):
    return replace(make_job("H100"), target=KubernetesTarget(namespace="ml"))


def run(jobs, kube, **kw):
    return run_jobs(jobs, kube, **{"max_parallel": 4, "pending_limit": 3600, "retries": 0, "poll_s": 0,
                                   "sleep": lambda _: None, **kw})


def test_a_job_is_created_watched_and_its_report_read_from_the_pods_log(cluster, kube_job):
    api = FakeApi(log="some line the image printed\n" + json.dumps(gpu_doc(gpus=(H100,))))
    (outcome,) = run([kube_job], cluster(api))
    posts = [path for verb, path in api.calls if verb == "POST"]
    assert posts == ["/api/v1/namespaces/ml/configmaps", "/apis/batch/v1/namespaces/ml/jobs"]
    (job,) = api.jobs.values()
    assert job["spec"]["backoffLimit"] == 0 and job["kind"] == "Job"
    assert outcome.report is not None and outcome.node == {"node": "gpu-node-1", "gpu": True,
                                                          "job_id": outcome.last.job_id, "runtime": "kubernetes"}
    cert = fleet_certificate(outcome, EXPECT, lock_hash="sha256:" + "d" * 64, scheduler="kubernetes",
                             runtime="kubernetes", created_at=WHEN, envkit_version="0")
    assert (cert.status, cert.record_model, cert.dispatch.node) == ("certified", "NVIDIA H100 80GB HBM3",
                                                                     "gpu-node-1")


@pytest.mark.parametrize("phase, state, kind", [("deadline", "TIMEOUT", "time limit"),
                                                ("oom", "OUT_OF_MEMORY", "out of memory")])
def test_a_failed_job_is_named_by_its_condition(cluster, kube_job, phase, state, kind):
    api = FakeApi(log="", plan=["running", phase])
    (outcome,) = run([kube_job], cluster(api))
    assert (outcome.fault.state, outcome.fault.kind) == (state, kind)


def test_a_job_pending_past_the_limit_is_deleted(cluster, kube_job):
    api = FakeApi(log="", plan=["pending"])
    ticks = iter(range(0, 1000, 10))
    (outcome,) = run([kube_job], cluster(api), pending_limit=15, clock=lambda: next(ticks))
    assert outcome.fault.kind == "pending limit" and "Unschedulable" in outcome.fault.message
    assert api.deleted == [outcome.last.job_id.split("/")[1]]
    assert ("DELETE", f"/apis/batch/v1/namespaces/ml/jobs/{api.deleted[0]}") in api.calls
