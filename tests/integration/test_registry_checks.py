"""What `envkit ls --registry` and `envkit registry prune` make of odd registries and odd contents, against a
real registry (Debian's docker-registry) and a web server that is no registry (`python3 -m http.server`):

* a 404 from /v2/_catalog is not an empty registry: a web server is named as no registry (exit 6);
* an envkit image whose repository name starts with `base-` is listed and pruned (mirrors are known by content);
* an image that also carries a user's own tag (`:prod`) is kept, dry run and real run alike;
* a path matching no repository, and a dry run on a registry with deletes disabled, are warned about.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import docker.errors
import pytest
import requests

from envkit.engine.docker_engine import as_engine
from envkit.registry.publish import mirror_base, promote
from tests.integration.conftest import envkit
from tests.integration.published import NO_WAIT, label_image, labels_for, untag_registry_refs
from tests.integration.registry import free_port, registry, running_registry  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration

STACKS = [f"2.0.{n}-cu126-py3.12-0000000{n}" for n in (1, 2, 3)]  # oldest first
LOCKS = ["sha256:" + c * 64 for c in "567"]
TOOLS = "vision/base-tools"  # an image named base-tools: the name nightly's mirrors also start with


@pytest.fixture(scope="module")
def local(dc, base):
    run = uuid.uuid4().hex[:12]
    refs = [f"envkit-test/checks-{n}:{run}" for n in range(len(STACKS))]
    for ref, lock, stack in zip(refs, LOCKS, STACKS):
        label_image(dc, base, ref, {**labels_for(lock, stack), "io.envkit.test-run": run}, {})
    yield refs
    for ref in refs:
        try:
            dc.images.remove(ref, force=True)
        except docker.errors.APIError:
            pass


def publish(dc, host: str, refs: list[str], base: str) -> None:
    engine = as_engine(dc)  # (envkit.registry takes the Engine)
    for ref, stack in zip(refs, STACKS):
        promote(engine, f"{host}/{TOOLS}", stack, certified=False, image=ref, **NO_WAIT)
    mirror_base(engine, base, f"{host}/vision/base-debian-bookworm", **NO_WAIT)
    untag_registry_refs(dc, host)


def tags(reg, name: str) -> set[str]:
    r = requests.get(f"{reg.url}/v2/{name}/tags/list", timeout=10)
    r.raise_for_status()
    return set(r.json().get("tags") or [])


def add_tag(reg, name: str, source: str, tag: str) -> None:
    """What a user does with `crane tag` / `docker tag && docker push`: a second tag on the same manifest."""
    accept = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
    got = requests.get(f"{reg.url}/v2/{name}/manifests/{source}", headers={"Accept": accept}, timeout=10)
    got.raise_for_status()
    put = requests.put(f"{reg.url}/v2/{name}/manifests/{tag}", data=got.content,
                       headers={"Content-Type": got.headers["Content-Type"]}, timeout=10)
    assert put.status_code == 201, put.text


def run_json(*args, code: int = 0):
    proc = envkit(*args, "--json", timeout=300)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout), proc


def test_base_named_images_user_tags_and_an_unmatched_path(dc, base, local, registry):  # noqa: F811
    host = registry.host
    publish(dc, host, local, base)
    add_tag(registry, TOOLS, STACKS[0], "prod")  # the oldest: prune would delete it but for this tag

    ls, _ = run_json("ls", "--registry", f"{host}/vision")
    assert {r["stack"] for r in ls["images"]} >= set(STACKS)  # base-tools is an image, not a mirror
    assert {s["reference"] for s in ls["skipped"] if s["reason"] == "base mirror repository"} == {
        f"{host}/vision/base-debian-bookworm"}

    for dry in (True, False):
        doc, proc = run_json("registry", "prune", f"{host}/vision", "--keep", "1", *(["--dry-run"] if dry else []))
        assert [r["repository"] for r in doc["repositories"]] == [TOOLS]
        assert doc["skipped"] == [{"reference": f"{host}/vision/base-debian-bookworm",
                                   "reason": "base mirror repository"}]
        images = {tuple(i["tags"]): i for i in doc["repositories"][0]["images"]}
        assert images[(STACKS[0], "prod")]["action"] == "keep"
        assert images[(STACKS[0], "prod")]["reasons"][0].startswith("also tagged prod: a tag envkit did not make")
        assert images[(STACKS[1],)]["action"] == "delete" and images[(STACKS[2],)]["action"] == "keep"
        assert doc["warnings"] == [] and "warning" not in proc.stderr
    assert tags(registry, TOOLS) == {STACKS[0], "prod", STACKS[2]}  # the real run deleted only STACKS[1]

    doc, proc = run_json("registry", "prune", f"{host}/nope")
    assert doc["repositories"] == [] and doc["warnings"] == [
        f"no repository in registry {host} is 'nope' or under it (its repositories are under: vision)"]
    assert f"warning: no repository in registry {host} is 'nope'" in proc.stderr


def test_a_dry_run_warns_when_deletes_are_disabled(dc, base, local, tmp_path):
    with running_registry(tmp_path / "reg", delete=False) as reg:
        publish(dc, reg.host, local, base)
        doc, proc = run_json("registry", "prune", f"{reg.host}/vision", "--keep", "1", "--dry-run")
        assert doc["summary"]["images_deleted"] == 2 and tags(reg, TOOLS) == set(STACKS)
        assert len(doc["warnings"]) == 1 and "refuses deletes" in doc["warnings"][0]
        assert "storage.delete.enabled: true" in doc["warnings"][0]
        assert f"warning: registry {reg.host} refuses deletes" in proc.stderr


def test_a_web_server_is_no_registry(tmp_path):
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                requests.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except requests.ConnectionError:
                subprocess.run(["sleep", "0.1"])
        for args in (["registry", "prune", f"127.0.0.1:{port}", "--dry-run"], ["ls", "--registry", f"127.0.0.1:{port}"]):
            doc, _ = run_json(*args, code=6)
            assert doc["error"] == "EngineError"
            assert doc["message"].startswith(f"127.0.0.1:{port} is not a container registry: GET /v2/_catalog "
                                             f"answered 404")
            assert "SimpleHTTP" in doc["message"] and "engine" not in doc["message"]
    finally:
        server.terminate()
        server.wait(timeout=10)
