"""The spine, end to end on the real engine: resolve, render, build, verify a CUDA torch image."""

import json

import pytest

from envkit.payload.contents import payload_sha256
from envkit.payload.harness import run_payload
from envkit.lock import load_lock
from tests.integration.conftest import ROOT, empty_store, envkit
from envkit.frameworks import expected

pytestmark = pytest.mark.integration


def test_example_builds_and_verifies(example_build):
    doc, _ = example_build
    assert doc["team"] == "vision"
    assert [i["status"] for i in doc["images"]] == ["verified"] * len(doc["images"])


def test_versions_inside_equal_the_lock(example_build):
    doc, _ = example_build
    lock = load_lock(ROOT / "examples" / "team.lock")
    for result in doc["images"]:
        locked = lock.image(result["name"])
        facts = result["verification"]["facts"]
        assert facts["torch"].split("+")[0] == locked.framework_version
        assert facts["cuda"] == locked.cuda_major_minor
        assert facts["nccl"] == locked.nccl
        assert locked.cudnn.startswith(facts["cudnn"])
        assert set(facts["arch_list"]) == set(locked.arch_list)
        checks = {c["name"]: c["status"] for c in result["verification"]["checks"]}
        assert checks["pip_check"] == "passed"
        # the spec's pip: packages import (and a lock from before `requested` asks for none)
        assert checks["requested_imports"] == ("passed" if locked.requested else "skipped")
        assert checks["cpu_train_step"] == "passed"
        # no GPU here: GPU checks are skipped, never passed
        assert checks["cuda_train_step"] == "skipped"


def test_image_carries_pins_lock_hash_and_driver_floor(example_build, engine):
    doc, _ = example_build
    lock = load_lock(ROOT / "examples" / "team.lock")
    for result in doc["images"]:
        locked = lock.image(result["name"])
        info = engine.inspect(result["tag"])
        assert info.labels["io.envkit.lock-hash"] == locked.hash
        assert info.labels["io.envkit.cudnn"] == locked.cudnn
        assert info.labels["io.envkit.nccl"] == locked.nccl
        assert info.labels["io.envkit.framework"] == f"torch=={locked.framework_version}"
        assert info.env["NVIDIA_REQUIRE_CUDA"] == locked.require_cuda
        assert info.env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        assert info.user and not info.user.startswith("0") and info.user != "root"
        uid = engine.run(result["tag"], ["id", "-u"], _opts()).stdout.strip()
        assert uid == "1000"


def test_the_online_classic_build_leaves_no_stage_image_and_nothing_of_the_installer(example_build, engine):
    """The real template through the real classic builder: the environment is installed where it runs, so the
    build has no stage but the image's own (offline builds' stage images carry the labels gc reads:
    test_gc_stages.py), and nothing of uv, its cache or the site CA is in the image (every layer of a small image
    of both builders is read in test_buildkit.py; `docker save` of this 5.7 GB one timed out under load)."""
    from envkit.render.files import render_files

    lock = load_lock(ROOT / "examples" / "team.lock")
    doc, _ = example_build
    for image, built in zip(lock.images, doc["images"]):
        text = render_files(lock, image, "examples/team.yaml")["Dockerfile"].decode()
        assert [line.split(" AS ")[1] for line in text.splitlines() if line.startswith("FROM ")] == ["os", "runtime"]
        found = engine.run(built["image_id"], ["bash", "-c", "find / -xdev \\( -name 'envkit-uv*' -o -name 'envkit-ca*' "
                                                         "-o -path '*site-ca*' \\) -print"], _opts(user="0"))
        assert found.exit_code == 0 and found.stdout.strip() == "", found.stdout + found.stderr


def test_second_build_rebuilds_nothing(example_build):
    proc = envkit("build", "examples/team.yaml", "--json", check=True)
    doc = json.loads(proc.stdout)
    assert doc["lock_reused"] is True
    assert {i["action"] for i in doc["images"]} == {"skipped"}
    assert "skipping" in proc.stderr
    for image in doc["images"]:  # every layer the engine's already: reused, with its size unpacked
        layers = image["layers_built"]
        assert layers["layers"] and {x["outcome"] for x in layers["layers"]} == {"reused"}
        assert layers["built"] == 0 and layers["built_bytes"] == 0 and layers["present_bytes"] > 0
    first, _ = example_build  # the first build (skipped where an earlier run left the image; cold, even its base built)
    for image in first["images"]:
        made = image["layers_built"]
        assert made["built"] + made["present"] == len(made["layers"])
        assert image["action"] == "built" or made["built"] == 0, made  # a skipped build makes no layer
        assert made["built_bytes"] + made["present_bytes"] == sum(x["bytes"] or 0 for x in made["layers"])


def test_verify_command(example_build):
    doc, _ = example_build
    tag = doc["images"][0]["tag"]
    proc = envkit("verify", tag, "--lock", "examples/team.lock", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "verified"


def test_mismatch_is_a_failure(example_build, engine):
    doc, _ = example_build
    tag = doc["images"][0]["tag"]
    lock = load_lock(ROOT / "examples" / "team.lock")
    expect = expected(lock.images[0]) | {"nccl": "2.99.1", "torch": "2.4.0"}
    result = run_payload(engine, tag, expect)
    assert result.status == "failed"
    failed = {m.split(":")[0] for m in result.mismatches}
    assert {"nccl_version", "torch_version"} <= failed


def test_the_images_own_self_check_is_this_envkits_payload(example_build, engine):
    """The researcher's self-check (the image's CMD, python3 /opt/envkit/envkit_check) runs the payload
    directory baked into the image: the identity it reports is the one this envkit computes over its
    own copy, and the one the mounted copy reports."""
    doc, _ = example_build
    tag = doc["images"][0]["tag"]
    from envkit.engine.protocol import RunOptions

    result = engine.run(tag, ["python3", "/opt/envkit/envkit_check", "--json", "--expect", "/opt/envkit/expect.json"],
                        RunOptions(timeout=300))
    report = json.loads(result.stdout)
    assert (report["status"], result.exit_code) == ("verified", 0), result.stderr[-2000:]
    assert report["payload"] == {"version": "2", "sha256": payload_sha256()}
    assert doc["images"][0]["verification"]["payload"] == report["payload"]


def test_verify_refuses_an_image_envkit_did_not_build(engine, example_build):
    doc, _ = example_build
    base = load_lock(ROOT / "examples" / "team.lock").images[0].base.ref
    proc = envkit("verify", base, "--json")
    assert proc.returncode == 8
    doc = json.loads(proc.stdout)
    assert "not built by envkit" in doc["message"] and "`envkit build team.yaml`" in doc["hint"]  # no placeholder


def _opts(**options):
    from envkit.engine.protocol import RunOptions

    return RunOptions(timeout=60, **options)


def test_certify_without_gpu_is_verified_with_gpu_checks_skipped(example_build, tmp_path):
    doc, _ = example_build
    tag = doc["images"][0]["tag"]
    proc = envkit("certify", tag, "--no-gpus", "--lock", "examples/team.lock", "--reports", tmp_path / "r",
                  "--store", tmp_path / "h.sqlite", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    cert = out["certificate"]
    assert cert["status"] == "verified" and cert["gpu_model"] == "none"
    gpu_only = {"cuda_available", "arch_covered", "cuda_train_step", "memory", "dataloader", "nccl_allreduce",
                "matmul_tflops", "h2d_d2h_bandwidth"}
    statuses = {c["name"]: c["status"] for c in cert["checks"]}
    assert {statuses[n] for n in gpu_only} == {"skipped"}
    for kind in ("json", "junit", "html"):
        assert (tmp_path / "r" / out["reports"][kind].split("/")[-1]).is_file()
    listed = json.loads(envkit("ls", "--store", tmp_path / "h.sqlite", "--json").stdout)["images"]
    assert [(r["tag"], r["certification"]) for r in listed] == [(tag, {"none": "verified"})]


def test_run_gates_on_certification_refusing_until_the_image_is_certified_here(example_build, tmp_path):
    """`envkit run --require-certified` on this GPU-less host: refused (exit 8, nothing run) while the store has
    no certificate of the image; after `envkit certify` (verified) it runs, and --json carries the verdict.
    Without the flag an uncertified image runs with a warning."""
    doc, _ = example_build
    tag = doc["images"][0]["tag"]
    store = empty_store(tmp_path)  # no certificate of the image yet
    cmd = ["python3", "-c", "print('ran')"]
    refused = envkit("run", tag, "--no-gpus", "--require-certified", "--store", store, "--", *cmd)
    assert refused.returncode == 8 and "ran" not in refused.stdout
    assert f"refusing to run it: {tag} has no certificate that passed" in refused.stderr
    assert f"envkit certify {tag}" in refused.stderr
    warned = envkit("run", tag, "--no-gpus", "--store", store, "--", *cmd)
    assert warned.returncode == 0 and warned.stdout == "ran\n" and "warning: " in warned.stderr
    envkit("certify", tag, "--no-gpus", "--lock", "examples/team.lock", "--reports", tmp_path / "r", "--store", store,
           check=True)
    passed = envkit("run", tag, "--no-gpus", "--require-certified", "--store", store, "--json", "--", *cmd)
    assert passed.returncode == 0, passed.stderr
    out = json.loads(passed.stdout)
    assert out["stdout"] == "ran\n" and out["exit_code"] == 0 and out["gate"]["passed"]
    assert [c["status"] for c in out["gate"]["certificates"]] == ["verified"] and "warning" not in passed.stderr
