"""`envkit registry prune` against a real registry (Debian's docker-registry, deletes enabled) and the
real engine: small label-only images pushed under stack tags with the real publish code, certificate
artifacts attached, `:certified` promoted; prune keeps the right ones and deletes the rest with their
artifacts; a second prune deletes nothing; a dry run deletes nothing; a registry with deletes
disabled fails naming the setting."""

from __future__ import annotations

import json
import subprocess
import uuid

import docker.errors
import pytest
import requests

from envkit.engine.docker_engine import as_engine
from envkit.registry.artifacts import attach_certificate
from envkit.registry.publish import mirror_base, promote, push
from tests.integration.conftest import envkit
from tests.integration.published import NO_WAIT, certificate, label_image, labels_for, sign, untag_registry_refs
from tests.integration.registry import registry, running_registry  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration

STACKS = [f"2.5.1-cu124-py3.11-{c * 8}" for c in "1234"]  # oldest first
LOCKS = ["sha256:" + c * 64 for c in "1234"]
REPO = "vision/torch25"


def build_stacks(dc, base: str) -> tuple[list[str], list[str]]:
    """Four envkit images built one after the other (so their created times order them); local tags and ids."""
    run = uuid.uuid4().hex[:12]  # never a cached build: created is this run's
    refs = [f"envkit-test/prune-{n}:{run}" for n in range(len(STACKS))]
    ids = [label_image(dc, base, ref, {**labels_for(lock, stack), "io.envkit.test-run": run}, {})
           for ref, lock, stack in zip(refs, LOCKS, STACKS)]
    return refs, ids


def publish(dc, host: str, refs: list[str], ids: list[str], *, certified: int | None, certs: bool = True) -> None:
    engine = as_engine(dc)  # (envkit.registry takes the Engine)
    repo = f"{host}/{REPO}"
    for n, (ref, stack) in enumerate(zip(refs, STACKS)):
        digest = promote(engine, repo, stack, certified=n == certified, image=ref, **NO_WAIT).digest
        if certs:
            signed = []
            for gpu, slug in (("NVIDIA H200", "nvidia-h200"), ("none", "none")):
                cert = certificate(f"{REPO}:{stack}", ids[n], LOCKS[n], gpu, "certified" if gpu != "none"
                                   else "verified", f"2026-12-0{n + 1}T03:00:00Z")
                attach_certificate(engine, repo, stack, cert.to_bytes(), gpu_slug=slug, status="verified", **NO_WAIT)
                signed.append(cert)
            sign(dc, repo, digest, signed)  # cosign's sha256-<hex>.sig and .att, as a signing nightly leaves them


@pytest.fixture(scope="module")
def local(dc, base):
    refs, ids = build_stacks(dc, base)
    yield refs, ids
    for ref in refs:
        try:
            dc.images.remove(ref, force=True)
        except docker.errors.APIError:
            pass


@pytest.fixture(scope="module")
def team(dc, engine, base, registry, local):  # noqa: F811
    """vision/torch25 with four stacks (the second one :certified) and their certificates, a base mirror,
    and vision/debian:bookworm, an image envkit did not build."""
    refs, ids = local
    publish(dc, registry.host, refs, ids, certified=1)
    mirror_base(engine, base, f"{registry.host}/vision/base-debian-bookworm", **NO_WAIT)
    push(engine, base, f"{registry.host}/vision/debian", "bookworm", **NO_WAIT)
    untag_registry_refs(dc, registry.host)
    yield registry
    untag_registry_refs(dc, registry.host)


def tags(reg, name: str) -> set[str]:
    r = requests.get(f"{reg.url}/v2/{name}/tags/list", timeout=10)
    r.raise_for_status()
    return set(r.json().get("tags") or [])


def blob(reg, digest: str) -> int:
    return requests.head(f"{reg.url}/v2/{REPO}/blobs/{digest}", timeout=10).status_code


def prune(host: str, *args, code: int = 0):
    proc = envkit("registry", "prune", f"{host}/vision", *args, "--json", timeout=300)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout), proc


def test_prune_keeps_certified_and_the_newest_and_deletes_the_rest_with_their_artifacts(team, local, tmp_path):
    host = team.host
    everything = tags(team, REPO)
    digests = {s: team.manifest_digest(REPO, s) for s in STACKS}
    signed = {s: {digests[s].replace(":", "-") + x for x in (".sig", ".att")} for s in STACKS}
    assert everything == {*STACKS, "certified", *(f"{s}.cert-{g}" for s in STACKS for g in ("nvidia-h200", "none")),
                          *(t for s in STACKS for t in signed[s])}
    mirrors, foreign = tags(team, "vision/base-debian-bookworm"), tags(team, "vision/debian")

    # a dry run: says what would go, deletes nothing
    doc, _ = prune(host, "--keep", "1", "--dry-run")
    assert doc["dry_run"] is True and tags(team, REPO) == everything
    assert [r["repository"] for r in doc["repositories"]] == ["vision/debian", REPO]
    plan = {i["tags"][0]: i for r in doc["repositories"] for i in r["images"]}
    assert plan[STACKS[3]]["reasons"] == ["one of the 1 newest (#1)"]
    assert plan[STACKS[1]]["reasons"] == [":certified points at it"]
    assert {s for s, i in plan.items() if i["action"] == "delete"} == {STACKS[0], STACKS[2]}
    assert plan["bookworm"]["action"] == "keep" and "not an envkit image" in plan["bookworm"]["reasons"][0]
    assert doc["summary"] == {"images_kept": 2 + 1, "images_deleted": 2, "artifacts_kept": 4 + 4,
                              "artifacts_deleted": 4 + 4}  # certificate artifacts, and .sig/.att
    assert doc["skipped"] == [{"reference": f"{host}/vision/base-debian-bookworm",
                               "reason": "base mirror repository"}]
    human = envkit("registry", "prune", f"{host}/vision", "--keep", "1", "--dry-run", timeout=300)
    assert human.returncode == 0, human.stderr
    assert "would delete" in human.stdout and "registry garbage-collect" in human.stdout
    assert tags(team, REPO) == everything

    # --older-than keeps everything built today, whatever --keep says
    doc, _ = prune(host, "--keep", "0", "--older-than", "1")
    assert doc["summary"]["images_deleted"] == 0 and tags(team, REPO) == everything

    # the real thing
    doc, _ = prune(host, "--keep", "1")
    kept = {STACKS[1], STACKS[3]}
    assert tags(team, REPO) == {*kept, "certified", *(f"{s}.cert-{g}" for s in kept for g in ("nvidia-h200", "none")),
                                *(t for s in kept for t in signed[s])}

    # what the note says: the registry's garbage collector (not envkit) reclaims the deleted images' blobs
    _, ids = local  # an image's id is its config blob's digest
    assert [blob(team, i) for i in ids] == [200, 200, 200, 200]
    team.stop()
    gc = subprocess.run([team.binary, "garbage-collect", str(team.workdir / "config.yml")], capture_output=True,
                        text=True, timeout=300)
    assert gc.returncode == 0, gc.stdout + gc.stderr
    team.start()
    assert [blob(team, i) for i in ids] == [404, 200, 404, 200]
    assert tags(team, REPO) >= kept and team.manifest_digest(REPO, "certified") == digests[STACKS[1]]
    assert team.manifest_digest(REPO, digests[STACKS[0]]) is None  # the manifest itself is gone
    assert team.manifest_digest(REPO, digests[STACKS[2]]) is None
    assert team.manifest_digest(REPO, "certified") == digests[STACKS[1]]
    assert tags(team, "vision/base-debian-bookworm") == mirrors and tags(team, "vision/debian") == foreign
    results = [x["result"] for r in doc["repositories"] for x in r["images"] + r["artifacts"] if x["action"] == "delete"]
    assert results == ["deleted"] * (2 + 4 + 4)  # 2 images, their 4 certificate artifacts, their .sig and .att

    # what researchers read still reads (from a store that exists: a named store must)
    from envkit.store.history import Store

    with Store.open(str(tmp_path / "h.sqlite")):
        pass
    ls = envkit("ls", "--registry", f"{host}/vision", "--store", tmp_path / "h.sqlite", "--json", timeout=300)
    assert ls.returncode == 0, ls.stderr
    assert {r["stack"] for r in json.loads(ls.stdout)["images"]} == kept

    # a second prune is a no-op
    again, _ = prune(host, "--keep", "1")
    assert again["summary"] == {"images_kept": 3, "images_deleted": 0, "artifacts_kept": 8, "artifacts_deleted": 0}
    assert tags(team, REPO) == {*kept, "certified", *(f"{s}.cert-{g}" for s in kept for g in ("nvidia-h200", "none")),
                                *(t for s in kept for t in signed[s])}


def test_a_registry_with_deletes_disabled_fails_naming_the_setting(dc, local, tmp_path):
    refs, ids = local
    with running_registry(tmp_path / "reg", delete=False) as reg:
        try:
            publish(dc, reg.host, refs[:2], ids[:2], certified=None, certs=False)
        finally:
            untag_registry_refs(dc, reg.host)
        doc, proc = prune(reg.host, "--keep", "1", code=6)
        assert doc["error"] == "DeleteDisabledError"
        assert "storage.delete.enabled: true" in doc["message"] and f"registry {reg.host}" in doc["message"]
        assert "UNSUPPORTED" in doc["message"] and "registry garbage-collect" in doc["hint"]
        assert tags(reg, REPO) == set(STACKS[:2])  # nothing went
        dry, _ = prune(reg.host, "--keep", "1", "--dry-run")
        assert dry["summary"]["images_deleted"] == 1


def test_token_auth_needs_the_delete_action(dc, local, tmp_path, monkeypatch):
    """A token service that grants pull and push but not delete: prune is refused before anything goes,
    naming the scope; an account with `delete` prunes."""
    from tests.integration.secure_registry import auth_registry
    from tests.integration.tokenserver import Account

    refs, ids = local
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-login"))
    with auth_registry(tmp_path / "reg", "token") as reg:
        monkeypatch.setenv("ENVKIT_REGISTRY_USER", "pusher")
        monkeypatch.setenv("ENVKIT_REGISTRY_PASSWORD", reg.password("pusher"))
        try:
            publish(dc, reg.host, refs[:2], ids[:2], certified=None, certs=False)
        finally:
            untag_registry_refs(dc, reg.host)
        doc, _ = prune(reg.host, "--keep", "1", code=6)
        assert doc["error"] == "RegistryAuthError" and f"repository:{REPO}:delete" in doc["message"]
        assert reg.manifest_digest(REPO, STACKS[0]) is not None

        reg.tokens.accounts["pruner"] = Account("pw-pruner", {"repository:*": ("pull", "delete"),
                                                              "registry:catalog": ("*",)})
        monkeypatch.setenv("ENVKIT_REGISTRY_USER", "pruner")
        monkeypatch.setenv("ENVKIT_REGISTRY_PASSWORD", "pw-pruner")
        doc, _ = prune(reg.host, "--keep", "1")
        assert doc["summary"]["images_deleted"] == 1
        assert reg.manifest_digest(REPO, STACKS[0]) is None and reg.manifest_digest(REPO, STACKS[1]) is not None
