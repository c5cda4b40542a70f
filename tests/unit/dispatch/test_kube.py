"""Kubernetes Jobs for the fleet, built with the official client and validated, strict, against the official schemas
of the oldest and newest Kubernetes kubernetes-validate bundles. Nothing here (nor anywhere in envkit yet) submits
them: no API server can run on these machines."""

from __future__ import annotations

from dataclasses import replace

import pytest

kubernetes_validate = pytest.importorskip("kubernetes_validate")

from envkit.dispatch.kube import as_document, job_manifest, payload_config_map  # noqa: E402
from envkit.payload.contents import payload_files  # noqa: E402
from envkit.spec_dispatch import KubernetesTarget  # noqa: E402
from tests.unit.certify.test_certificate import EXPECT  # noqa: E402

VERSIONS = ("1.25", kubernetes_validate.latest_version())  # the oldest and newest schemas it bundles


@pytest.fixture
def kube_job(make_job):
    def make(**target):
        return replace(make_job("H100"), target=KubernetesTarget(**target))
    return make


@pytest.mark.parametrize("version", VERSIONS)
def test_the_job_and_its_config_map_are_valid_kubernetes_objects(kube_job, version):
    job = kube_job(namespace="ml", node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, gpus=2,
                   runtime_class="nvidia", image_pull_secret="team-registry", priority_class="batch-low",
                   service_account="envkit")
    for obj in (job_manifest(job), payload_config_map(job, EXPECT)):
        kubernetes_validate.validate(as_document(obj), version, strict=True)


def test_strict_validation_catches_a_misspelt_field(kube_job):
    doc = as_document(job_manifest(kube_job()))
    doc["spec"]["backofLimit"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)


def test_the_job_runs_once_within_a_deadline_on_the_models_nodes_with_its_gpus_and_shared_memory(kube_job):
    doc = as_document(job_manifest(kube_job(gpus=2, runtime_class="nvidia")))
    spec, pod = doc["spec"], doc["spec"]["template"]["spec"]
    assert (spec["backoffLimit"], spec["activeDeadlineSeconds"], spec["ttlSecondsAfterFinished"]) == (0, 900, 3600)
    assert pod["restartPolicy"] == "Never" and pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100"}  # GFD's label by default
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert container["command"][-4:] == ["--mode", "certify", "--timeout", "590"]
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/opt/envkit-run"]["readOnly"] and "/dev/shm" in mounts
    assert doc["metadata"]["namespace"] == "default" and len(doc["metadata"]["name"]) <= 63


def test_the_config_map_carries_every_payload_file_to_its_path(kube_job):
    job = kube_job()
    cm = as_document(payload_config_map(job, EXPECT))
    items = next(v for v in as_document(job_manifest(job))["spec"]["template"]["spec"]["volumes"]
                 if v["name"] == "payload")["configMap"]["items"]
    paths = {i["path"] for i in items}
    assert paths == {f"envkit_check/{name}" for name in payload_files()} | {"expect.json"}
    assert {i["key"] for i in items} == set(cm["data"])
