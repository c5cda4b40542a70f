"""The researcher's quickstart (README), played through the CLI against a real registry (Debian's docker-registry)
and the real engine: find (ls --gpu), read (show), pull, run, from a working directory of the researcher's own.

The team registry is tests/integration/published.py's (label-only images on the local envkit base: nothing large
is built or pushed): stack A certified on an H200 and verified without a GPU, promoted :certified; stack B
verified only. This host's nightly also certified stack A on an H100 (recorded in the default history store,
from another directory)."""

import json
import os

import pytest

from envkit.store.history import Store
from tests.integration.conftest import ENVKIT
from tests.integration.published import LOCK_A, STACK_A, STACK_B, team  # noqa: F401  (team: a fixture)
from tests.integration.registry import registry  # noqa: F401  (a fixture)

pytestmark = pytest.mark.integration


def researcher(*args, cwd, env, code=0):
    import subprocess

    proc = subprocess.run([*ENVKIT, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == code, f"envkit {' '.join(map(str, args))}: {proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
    return proc


def test_find_read_pull_and_run_a_certified_image(dc, team, tmp_path, monkeypatch):
    from envkit.store.records import default_path

    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    nightly_dir, home = tmp_path / "ci", tmp_path / "home"
    nightly_dir.mkdir()
    home.mkdir()
    monkeypatch.chdir(nightly_dir)  # the nightly run records in the default store, from its own directory
    with Store.open() as store:
        store.record_certificate(team.image_a, "NVIDIA H100", "550.54.15", status="certified", lock_hash=LOCK_A,
                                 document={"reasons": []}, metrics={"matmul_tflops.bf16_matmul_tflops": 640.5})
    assert default_path() == data / "envkit" / "history.sqlite" and default_path().exists()
    env = {**os.environ, "ENVKIT_REGISTRY": f"{team.host}/vision", "XDG_DATA_HOME": str(data)}
    env.pop("ENVKIT_STORE", None)
    a, b = team.ref(STACK_A), team.ref(STACK_B)

    # find: which images run on my H100? (the store's H100 certificate of A, from another directory)
    found = researcher("ls", "--gpu", "H100", cwd=home, env=env).stdout.splitlines()
    assert found[0].split() == ["IMAGE", "FRAMEWORK", "CUDA", "ON", "H100"]
    rows = {line.split()[0]: line for line in found[1:]}
    assert set(rows) == {a, b}
    assert "(:certified)  torch 2.5.1  12.4  H100: certified (" in rows[a]
    assert "torch 2.5.1  12.4  H100: verified only (CPU only verified 2026-12-02)" in rows[b]
    certified = researcher("ls", "--gpu", "H200", "--certified", cwd=home, env=env).stdout.splitlines()
    assert len(certified) == 2 and certified[1].startswith(a) and "H200: certified (2026-12-01)" in certified[1]
    listed = json.loads(researcher("ls", "--json", cwd=home, env=env).stdout)
    assert {r["tag"]: r["status"] for r in listed["images"]}[a] == (
        "H100 certified " + listed["images"][0]["standing"][0]["created_at"][:10]
        + ", H200 certified 2026-12-01, CPU only verified 2026-11-30")

    # read: does it run on my GPU, since when, on which driver, how fast, and how do I run it?
    shown = researcher("show", a, cwd=home, env=env).stdout.splitlines()
    assert shown[0] == f"{a} (in registry {team.host}, not pulled)"
    assert shown[1] == "  torch 2.5.1, CUDA 12.4, needs driver >= 525.60.13"
    assert "  the team's :certified tag points at this image" in shown
    h100 = next(line.split() for line in shown if line.split()[:1] == ["H100"])
    assert h100[1] == "certified" and h100[3] == "550.54.15" and h100[4:7] == ["bf16", "640.5", "TFLOP/s"]
    h200 = next(line.split() for line in shown if line.split()[:1] == ["H200"])
    assert h200[1:3] == ["certified", "2026-12-01"] and h200[3] == "570.124.06"
    assert next(line for line in shown if line.strip().startswith("CPU only")).split()[2] == "verified"
    assert f"  envkit pull {a}" in shown and f"  envkit run {a} -- python3 train.py" in shown
    assert not any(line.startswith("next:") for line in shown) and "io.envkit." not in "\n".join(shown)
    newest = researcher("show", f"{team.host}/vision/torch25", cwd=home, env=env).stdout.splitlines()
    assert newest[0] == f"{b} (in registry {team.host}, not pulled)"  # a bare repository: its newest tag
    assert any(line.startswith("next: verified without a GPU only: certify it") for line in newest)

    # pull: by digest, after run's gate; an image not certified for a GPU run is refused with --require-certified
    refused = researcher("pull", b, "--gpus", "--require-certified", "--json", cwd=home, env=env, code=8)
    assert json.loads(refused.stdout)["message"].startswith("refusing to pull it: ")
    assert dc.api.images(name=f"{team.host}/vision/torch25") == []  # nothing pulled
    pulled = json.loads(researcher("pull", a, "--no-gpus", "--require-certified", "--json", cwd=home, env=env).stdout)
    assert pulled["pinned"] == f"{team.host}/vision/torch25@{team.digest_a}" and pulled["id"] == team.image_a
    assert pulled["gate"]["passed"] and pulled["run"] == f"envkit run {a} -- python3 train.py"
    assert dc.images.get(a).id == team.image_a  # the tag is on the pulled copy
    layers = pulled["layers_pulled"]  # a label-only image on the local base: every layer here already, by digest
    assert [x["diff_id"] for x in layers["layers"]] == dc.images.get(a).attrs["RootFS"]["Layers"]
    assert {x["outcome"] for x in layers["layers"]} == {"present"} and layers["pulled_bytes"] == 0
    assert layers["pulled"] == 0 and layers["present_bytes"] == sum(x["bytes"] for x in layers["layers"]) > 0
    assert all(x["digest"].startswith("sha256:") for x in layers["layers"])

    # run: the gate passes on the registry's certificates; the job's output is the job's
    ran = researcher("run", a, "--no-gpus", "--require-certified", "--", "cat", "/etc/debian_version", cwd=home,
                     env=env)
    assert ran.stdout.strip().split(".")[0].isdigit() and "warning" not in ran.stderr
    assert not (home / ".envkit").exists() and not (nightly_dir / ".envkit").exists()
