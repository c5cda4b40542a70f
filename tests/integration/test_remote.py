"""What a researcher sees of published images before pulling: `envkit show REF` and
`envkit ls --registry`, through the CLI, against a real registry (Debian's docker-registry)."""

import json

import docker.errors
import pytest

from envkit.store.history import Store
from tests.integration.conftest import empty_store, envkit
from tests.integration.published import (LOCK_A, LOCK_B, STACK_A, STACK_B, team,  # noqa: F401  (a fixture)
                                         untag_registry_refs)
from tests.integration.registry import registry, running_registry  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration


def run_json(*args, code=0):
    proc = envkit(*args, "--json", timeout=300)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout), proc


def not_local(dc, ref: str) -> bool:
    try:
        dc.images.get(ref)
    except docker.errors.ImageNotFound:
        return True
    return False


def test_show_reads_a_published_image_from_the_registry_without_pulling(dc, team, tmp_path):
    ref = team.ref(STACK_A)
    assert not_local(dc, ref)
    doc, _ = run_json("show", ref, "--store", empty_store(tmp_path))
    assert doc["source"] == "registry" and doc["image"] == ref
    assert doc["id"] == team.image_a  # the config digest is the engine's image id
    assert doc["labels"]["io.envkit.lock-hash"] == LOCK_A and doc["require_cuda"] == "cuda>=12.0"
    reg = doc["registry"]
    assert reg["digest"] == team.digest_a and reg["pinned"] == f"{team.host}/vision/torch25@{team.digest_a}"
    assert 10 * 2**20 < reg["compressed_size"] < 200 * 2**20  # the base's one compressed layer + config
    assert reg["tags"] == [STACK_A, "certified"] and reg["certified_tag"] is True
    seen = {(c["gpu_model"], c["status"], c["driver"], c["created_at"][:10], c["source"]) for c in doc["certificates"]}
    assert seen == {("NVIDIA H200", "certified", "570.124.06", "2026-12-01", "registry"),
                    ("none", "verified", "none", "2026-11-30", "registry")}
    assert all(c["artifact"].startswith(f"{team.host}/vision/torch25@sha256:") for c in doc["certificates"])
    assert not_local(dc, ref) and not_local(dc, reg["pinned"])  # nothing was pulled

    # by digest: the same image, its stack tag found; :certified points at it
    by_digest, _ = run_json("show", reg["pinned"], "--store", empty_store(tmp_path))
    assert by_digest["registry"]["tags"] == [STACK_A, "certified"]
    assert len(by_digest["certificates"]) == 2

    # the other stack: verified only, :certified points elsewhere
    other, proc = run_json("show", team.ref(STACK_B), "--store", empty_store(tmp_path))
    assert other["registry"]["certified_tag"] is False
    assert other["registry"]["certified_digest"] == team.digest_a
    assert [(c["gpu_model"], c["status"]) for c in other["certificates"]] == [("none", "verified")]

    human = envkit("show", team.ref(STACK_A), "--store", empty_store(tmp_path), "--all")
    assert human.returncode == 0, human.stderr
    assert ":certified points at             this image" in human.stdout
    assert "certificate: certified on NVIDIA H200 driver 570.124.06" in human.stdout


def test_ls_registry_lists_the_team_images_and_joins_the_store(dc, team, tmp_path):
    db = empty_store(tmp_path)
    with Store.open(db) as store:  # this host certified stack B on an A100 and built it as vision/torch25:...
        store.record_build("torch25", LOCK_B, "sha256:ctx", tag=f"vision/torch25:{STACK_B}", image_id=team.image_b)
        store.record_certificate(team.image_b, "NVIDIA A100", "550.54.15", status="certified", lock_hash=LOCK_B,
                                 document={"reasons": []})
    doc, _ = run_json("ls", "--registry", f"{team.host}/vision", "--store", db)
    assert doc["registry"] == team.host and doc["prefix"] == "vision" and doc["store"] == str(db)
    rows = {r["stack"]: r for r in doc["images"]}
    assert set(rows) == {STACK_A, STACK_B}
    a, b = rows[STACK_A], rows[STACK_B]
    assert a["tag"] == team.ref(STACK_A) and a["digest"] == team.digest_a and a["image_id"] == team.image_a
    assert a["certified_tag"] is True and a["lock_hash"] == LOCK_A
    assert a["certification"] == {"NVIDIA H200": "certified", "none": "verified"}
    built = dc.images.get(team.image_a).attrs["Created"][:10]  # the newest of the image and its certificates
    assert a["date"] == max(built, "2026-12-01")
    assert a["sources"] == ["registry"] and a["local_tag"] is None
    assert b["certified_tag"] is False
    assert b["certification"] == {"NVIDIA A100": "certified", "none": "verified"}
    assert b["sources"] == ["registry", "store"] and b["local_tag"] == f"vision/torch25:{STACK_B}"
    assert {s["reference"] for s in doc["skipped"]} == {f"{team.host}/vision/base-debian-bookworm"}

    human = envkit("ls", "--registry", f"{team.host}/vision", "--store", db)
    assert human.returncode == 0, human.stderr
    assert team.ref(STACK_A) in human.stdout and "H200 certified 2026-12-01" in human.stdout
    assert "CPU only verified 2026-11-30" in human.stdout and "none" not in human.stdout

    # the whole registry: an image envkit did not build is skipped; a broken certificate artifact fails
    doc, proc = run_json("ls", "--registry", team.host, "--store", db, code=6)
    assert doc["error"] == "EngineError"
    assert f"{team.host}/broken/torch25:{STACK_A}.cert-nvidia-h200" in doc["message"]
    assert f"registry {team.host}" in doc["message"] and "re-attach" in doc["hint"]
    tools, _ = run_json("ls", "--registry", f"{team.host}/tools", "--store", db)
    assert tools["images"] == [] and tools["skipped"][0]["reference"] == f"{team.host}/tools/debian:bookworm"


def test_registry_errors_name_the_registry_and_the_reference(team, tmp_path):
    store = ("--store", empty_store(tmp_path))
    doc, _ = run_json("show", f"{team.host}/vision/nope:1", *store, code=6)
    assert f"registry {team.host} has no repository 'vision/nope'" in doc["message"]
    assert f"envkit ls --registry {team.host}" in doc["hint"]
    doc, _ = run_json("show", team.ref("no-such-stack"), *store, code=6)
    assert "has no tag 'no-such-stack' in repository vision/torch25" in doc["message"] and STACK_A in doc["hint"]
    doc, _ = run_json("show", team.ref(STACK_A, repo="broken/torch25"), *store, code=6)
    assert f"{team.host}/broken/torch25:{STACK_A}.cert-nvidia-h200" in doc["message"]
    # a malformed reference is a usage error, read with the command line (exit 2), before any registry is asked
    doc, _ = run_json("show", f"{team.host}/Vision/torch25:1", *store, code=2)
    assert doc["error"] == "UsageError" and "bad image reference" in doc["message"] and "lower case" in doc["message"]


def test_a_stopped_registry_fails_with_its_name_and_a_hint(tmp_path):
    with running_registry(tmp_path / "reg") as reg:
        host = reg.host
        reg.stop()
        doc, _ = run_json("ls", "--registry", host, "--store", empty_store(tmp_path), code=6)
        assert f"from registry {host}" in doc["message"] and "Connection refused" in doc["message"]
        assert f"curl http://{host}/v2/" in doc["hint"]
        doc, _ = run_json("show", f"{host}/vision/torch25:{STACK_A}", "--store", empty_store(tmp_path), code=6)
        assert f"{host}/vision/torch25" in doc["message"] and f"registry {host}" in doc["message"]


def test_a_local_copy_shows_the_engine_and_store_view_plus_the_registry_view(dc, engine, team, tmp_path):
    from envkit.registry.publish import pull_by_digest

    pinned = f"{team.host}/vision/torch25@{team.digest_a}"
    try:
        info = pull_by_digest(engine, pinned)  # shares every layer with the local base: nothing large moves
        assert info.id == team.image_a
        store = empty_store(tmp_path)  # it knows no certificate of the image: the registry's are shown
        doc, _ = run_json("show", pinned, "--store", store)
        assert doc["source"] == "local" and doc["id"] == team.image_a and doc["size"] > 0
        assert doc["registry"]["certified_tag"] is True
        assert {c["gpu_model"] for c in doc["registry"]["certificates"]} == {"NVIDIA H200", "none"}
        # the certificates run's gate weighs, each with its source, in JSON and in words
        assert {(c["gpu_model"], c["source"]) for c in doc["certificates"]} == {("NVIDIA H200", "registry"),
                                                                              ("none", "registry")}
        human = envkit("show", pinned, "--store", store, "--all")
        assert human.returncode == 0 and "certificate: none" not in human.stdout
        assert "certificate: certified on NVIDIA H200 driver 570.124.06" in human.stdout and ", registry)" in human.stdout
        ran = envkit("run", pinned, "--no-gpus", "--require-certified", "--store", store, "--json", "--", "true")
        assert ran.returncode == 0, ran.stderr
        gate = json.loads(ran.stdout)["gate"]
        assert gate["passed"] and [c["source"] for c in gate["certificates"]] == ["registry"]
        # a mistyped store is refused, not read as no certificates (show and run alike)
        typo = tmp_path / "h.sqlit"
        for args in (("show", pinned, "--store", typo, "--json"), ("run", pinned, "--store", typo, "--json", "--", "true")):
            refused = envkit(*args)
            assert refused.returncode == 9 and json.loads(refused.stdout)["message"] == f"no history store at {typo}"
    finally:
        untag_registry_refs(dc, team.host)
