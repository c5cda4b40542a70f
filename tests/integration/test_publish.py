"""Publishing against a real registry (Debian's docker-registry on loopback) and the real engine."""

import io
import re

import docker
import docker.errors
import pytest
import requests

from envkit.errors import EngineError
from envkit.registry.remote_parse import CERTIFIED_TAG, split_repository
from envkit.registry.publish import (
    PushResult,
    _classify,
    mirror_base,
    promote,
    pull_by_digest,
    pull_layers,
    push,
    remote_digest,
)
from envkit.store.history import Store
from tests.integration.published import untag_registry_refs
from tests.integration.registry import registry, running_registry  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
NO_WAIT = dict(sleep=lambda s: None)


@pytest.fixture(scope="module")
def other(dc, base):
    """A second, different image sharing the base's layers (a label-only build: no new layer)."""
    ref = "envkit-test/publish-other:1"
    dc.images.build(fileobj=io.BytesIO(f"FROM {base}\nLABEL io.envkit.test=other\n".encode()), tag=ref,
                    pull=False, rm=True)
    yield ref
    try:
        dc.images.remove(ref, force=True)
    except docker.errors.APIError:
        pass


@pytest.fixture(scope="module", autouse=True)
def untag_afterwards(dc, registry):
    """Remove every local tag and digest reference into the test registry afterwards."""
    yield
    untag_registry_refs(dc, registry.host)


def image_id(dc, ref) -> str:
    return dc.images.get(ref).id


def untag(dc, ref) -> None:
    dc.images.remove(ref)  # the image stays (the base keeps its own tag); only this name goes


# --- push, pull -----------------------------------------------------------------------------------

def test_push_then_pull_back_by_digest(dc, engine, base, registry, tmp_path):
    repo = registry.repo("envkit-test/base")
    lines = []
    result = push(engine, base, repo, "t1", progress=lines.append)
    assert result.ref == f"{repo}:t1" and DIGEST.match(result.digest)
    assert registry.manifest_digest("envkit-test/base", "t1") == result.digest
    assert remote_digest(engine, repo, "t1") == result.digest
    assert remote_digest(engine, repo, "no-such-tag") is None
    assert any("digest" in line or "Pushed" in line or "exists" in line for line in lines)
    manifest = requests.get(f"http://{registry.host}/v2/envkit-test/base/manifests/t1", timeout=30, headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"}).json()
    blobs = [(x["digest"], x["size"]) for x in manifest["layers"]]
    diff_ids = list(dc.images.get(base).attrs["RootFS"]["Layers"])
    first = result.layers.to_json()  # each layer matched by its diff_id, with the manifest's compressed bytes
    assert [(x["diff_id"], x["digest"], x["bytes"]) for x in first["layers"]] == [
        (d, b, n) for d, (b, n) in zip(diff_ids, blobs)]
    assert {x["outcome"] for x in first["layers"]} == {"uploaded"}  # a fresh registry: every layer sent
    assert first["pushed_bytes"] == sum(n for _, n in blobs) and first["present"] == 0
    again = push(engine, base, repo, "t1-again").layers.to_json()  # the same layers again: the registry has each
    assert [x["outcome"] for x in again["layers"]] == ["present"] * len(diff_ids)
    assert again["pushed"] == 0 and again["pushed_bytes"] == 0 and again["present_bytes"] == first["pushed_bytes"]
    assert again["summary"].startswith(f"pushed 0 of {len(diff_ids)} layers, 0 B; {len(diff_ids)} present, ")

    # the caller's pattern: record a push only once push() has returned
    with Store.open(tmp_path / "h.sqlite") as store:
        store.record_push(image_id(dc, base), result.ref, result.digest, "stack")
        assert [p.digest for p in store.pushes_for(image_id(dc, base))] == [result.digest]

    untag(dc, result.ref)
    untag(dc, f"{repo}:t1-again")
    assert not any(t.startswith(registry.host) for t in dc.images.get(base).tags)
    info, pulled = pull_layers(engine, result.pinned)
    assert info.id == image_id(dc, base)
    assert result.pinned in info.repo_digests
    assert [(x.outcome, x.bytes) for x in pulled.layers] == [("present", n) for _, n in blobs]  # nothing fetched


def test_push_accepts_the_engine_adapter_and_refuses_unknown_images(engine, registry):
    with pytest.raises(EngineError, match="no such image") as err:
        push(engine, "envkit-test/does-not-exist:0", registry.repo("envkit-test/none"), "t", **NO_WAIT)
    assert registry.host in err.value.message


# --- promote ----------------------------------------------------------------------------------

def test_promote_moves_certified_only_when_certified(dc, engine, base, other, registry):
    name = "envkit-test/promote"
    repo = registry.repo(name)

    first = promote(engine, repo, "stack-1", certified=False, image=base, **NO_WAIT)
    assert first.pushed and first.certified is None
    assert registry.manifest_digest(name, "stack-1") == first.digest
    assert registry.manifest_digest(name, CERTIFIED_TAG) is None  # not certified: no :certified

    again = promote(engine, repo, "stack-1", certified=True, image=base, **NO_WAIT)
    assert not again.pushed  # the stack tag already held this image: left alone
    assert again.digest == first.digest
    assert again.certified == PushResult(f"{repo}:{CERTIFIED_TAG}", first.digest)
    assert registry.manifest_digest(name, CERTIFIED_TAG) == registry.manifest_digest(name, "stack-1")

    second = promote(engine, repo, "stack-2", certified=False, image=other, **NO_WAIT)
    assert second.pushed and second.digest != first.digest
    assert registry.manifest_digest(name, CERTIFIED_TAG) == first.digest  # a non-certified promote: unmoved

    third = promote(engine, repo, "stack-2", certified=True, image=other, **NO_WAIT)
    assert registry.manifest_digest(name, CERTIFIED_TAG) == third.digest == second.digest


def test_an_immutable_stack_tag_is_never_overwritten(dc, engine, base, other, registry):
    name = "envkit-test/immutable"
    repo = registry.repo(name)
    kept = promote(engine, repo, "stack-1", certified=True, image=base, **NO_WAIT)
    with pytest.raises(EngineError, match=r"refusing to overwrite .*stack-1: stack tags are immutable") as err:
        promote(engine, repo, "stack-1", certified=True, image=other, **NO_WAIT)
    assert kept.digest in err.value.message and "new stack tag" in err.value.hint
    assert registry.manifest_digest(name, "stack-1") == kept.digest
    assert registry.manifest_digest(name, CERTIFIED_TAG) == kept.digest
    with pytest.raises(EngineError, match="not a stack tag"):
        promote(engine, repo, CERTIFIED_TAG, certified=True, image=base)


# --- mirror ------------------------------------------------------------------------------------

def test_mirror_base_returns_a_digest_pinned_ref_that_pulls(dc, engine, base, registry):
    repo = registry.repo("mirror/debian")
    pinned = mirror_base(engine, base, repo, **NO_WAIT)
    assert re.fullmatch(re.escape(repo) + r"@sha256:[0-9a-f]{64}", pinned)
    assert registry.manifest_digest("mirror/debian", base.rsplit(":", 1)[1]) == pinned.split("@")[1]
    untag(dc, f"{repo}:{base.rsplit(':', 1)[1]}")
    assert pull_by_digest(engine, pinned).id == image_id(dc, base)
    with pytest.raises(EngineError, match="not pinned by digest"):
        pull_by_digest(engine, f"{repo}:latest")


# --- failures ---------------------------------------------------------------------------------

def test_push_to_a_stopped_registry_fails_after_retries_and_records_nothing(dc, engine, base, tmp_path):
    with running_registry(tmp_path / "reg") as reg:
        reg.stop()
        repo = reg.repo("envkit-test/down")
        waits = []
        with Store.open(tmp_path / "h.sqlite") as store:
            with pytest.raises(EngineError) as err:
                result = push(engine, base, repo, "t1", retries=4, backoff=1.0, sleep=waits.append)
                store.record_push(image_id(dc, base), result.ref, result.digest, "stack")  # never reached
            assert store.pushes_for(image_id(dc, base)) == []
            assert store.snapshot()["pushes"] == []
        try:
            untag(dc, f"{repo}:t1")
        except docker.errors.APIError:
            pass
    message = err.value.message
    assert waits == [1.0, 2.0, 4.0, 8.0]  # exponential backoff, then give up
    assert f"registry {reg.host}" in message and base in message and "left unpushed" in message
    assert "after 5 attempts" in message and "connection refused" in message
    assert reg.host in err.value.hint and "still local" in err.value.hint
    with pytest.raises(EngineError, match=f"cannot read .* from registry {re.escape(reg.host)}"):
        remote_digest(engine, repo, "t1", retries=1, **NO_WAIT)


def test_credentials_come_only_from_the_store_or_both_env_vars(dc, engine, base, registry, monkeypatch):
    monkeypatch.setenv("ENVKIT_REGISTRY_USER", "ci")
    monkeypatch.delenv("ENVKIT_REGISTRY_PASSWORD", raising=False)
    with pytest.raises(EngineError, match="ENVKIT_REGISTRY_PASSWORD is not set"):
        push(engine, base, registry.repo("envkit-test/creds"), "t", **NO_WAIT)


def test_failure_classification_and_names():
    assert _classify('Get "http://127.0.0.1:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused')
    assert _classify("received unexpected HTTP status: 503 Service Unavailable")
    assert not _classify("unauthorized: authentication required")
    assert not _classify("denied: requested access to the resource is denied")
    assert not _classify("An image does not exist locally with the tag: x")
    assert split_repository("127.0.0.1:5000/vision/torch25") == ("127.0.0.1:5000", "vision/torch25")
    assert split_repository("localhost/a") == ("localhost", "a")
    assert split_repository("team/img") == ("docker.io", "team/img")
    for bad in ("reg:5000/a:tag", "reg:5000/a@sha256:" + "0" * 64, ""):
        with pytest.raises(EngineError, match="bad registry repository"):
            split_repository(bad)


# --- testcontainers against the local engine ---------------------------------------------------------

def test_testcontainers_runs_a_throwaway_container_from_the_local_base(base, monkeypatch):
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer

    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    monkeypatch.setattr(testcontainers_config, "_ryuk_disabled", None)  # re-read from the environment
    assert testcontainers_config.ryuk_disabled

    with DockerContainer(base).with_command("sleep 30") as container:
        code, out = container.exec(["cat", "/etc/os-release"])
        assert code == 0
        assert b"bookworm" in out
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        assert wrapped.status == "running"
