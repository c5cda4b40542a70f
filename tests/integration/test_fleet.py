"""`envkit certify --fleet` through a real Slurm cluster (tests/slurmcluster.py: three slurmd processes posing as
an A100, an H100 and an L40S node by node feature and gres) with the nodes' Docker runtime, on the example image.

The nodes have no GPU: each job runs the payload's CPU checks, so the certificates are `verified`, never
`certified`, and the test fleet's `dispatch.require: verified` is what lets the gate promote. What is tested is
the per-model routing, the collection of each job's report, the faults (a job cancelled or killed on its node,
pending past the limit, a refused submission, SIGTERM, a resumed run) and the promotion gate.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from envkit.store.history import Store
from tests.integration.conftest import ENVKIT, ROOT

pytestmark = pytest.mark.integration

MODELS = {"A100": "a100", "H100": "h100", "L40S": "l40s"}  # fleet model -> the node with its feature
PROMOTED = "vision/torch25:certified"
DISPATCH = """
dispatch:
  require: verified          # the test nodes have no GPU: CPU checks on a node of every model
  shared_dir: shared
  max_parallel: 3
  pending_limit: {pending}
  slurm: {{partition: gpu, time_limit: "20"}}
  gpus:
    A100: {{slurm: {{constraint: {a100}, gres_type: a100}}}}
    H100: {{slurm: {{constraint: h100, gres_type: h100}}}}
    L40S: {{slurm: {{constraint: l40s, gres_type: l40s}}}}
"""


@pytest.fixture
def fleet(tmp_path, example_build, engine, slurm_cluster):
    """A copy of the example team with a dispatch: section, its lock, and the promoted tag cleared (restored after:
    the engine is shared)."""
    slurm_cluster.ready()
    before = engine.inspect(PROMOTED)
    _untag(engine)

    def write(pending: int = 600, a100: str = "a100") -> Path:
        shutil.copy(ROOT / "examples" / "team.lock", tmp_path / "team.lock")
        spec = tmp_path / "team.yaml"
        spec.write_text((ROOT / "examples" / "team.yaml").read_text() + DISPATCH.format(pending=pending, a100=a100))
        return spec

    yield write
    _untag(engine)
    if before is not None:
        engine.tag(before.id, PROMOTED)


def _untag(engine) -> None:
    if engine.inspect(PROMOTED) is not None:
        engine.client.images.remove(PROMOTED, noprune=True)


def _envkit(spec: Path, cluster, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*ENVKIT, "certify", "--fleet", str(spec), "--store", str(spec.parent / "h.sqlite"),
                             "--reports", str(spec.parent / "reports"), "--poll", "0.5", "--json", *extra],
                            cwd=spec.parent, env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=timeout)
    try:
        doc = json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON document (exit {proc.returncode}):\n{out[-2000:]}\n{err[-4000:]}") from None
    return proc.returncode, doc, err


def _running_on(cluster, node: str, timeout: float = 120) -> str:
    """The id of the job running on ``node``, once one does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = cluster.slurm("squeue", "--noheader", "--states=RUNNING", "--format=%i %N").stdout
        for line in out.splitlines():
            job_id, _, where = line.strip().partition(" ")
            if where == node:
                return job_id
        time.sleep(0.3)
    said = cluster.slurm("sinfo", "--Node", "--long").stdout + cluster.slurm("squeue", "--long").stdout
    raise AssertionError(f"no job ran on {node} within {timeout}s:\n{said}")


def _models(doc: dict) -> dict[str, dict]:
    (image,) = doc["images"]
    return {row["model"]: row for row in image["models"]}


def _node_features(cluster, node: str) -> str:
    out = cluster.slurm("scontrol", "--oneliner", "show", "node", node).stdout
    return next(w.partition("=")[2] for w in out.split() if w.startswith("AvailableFeatures="))


def test_a_fleet_certification_certifies_each_model_on_its_node_and_moves_the_promoted_tag(fleet, slurm_cluster,
                                                                                           engine):
    spec = fleet()
    code, doc, err = _finish(_envkit(spec, slurm_cluster))
    assert code == 0, err[-3000:]
    image = doc["images"][0]
    assert image["gate"]["promote"] and image["promoted"] == [PROMOTED]
    rows = _models(doc)
    assert set(rows) == set(MODELS)
    for model, row in rows.items():
        d = row["dispatch"]
        # routing: the job for each model ran on the node that has that model's feature
        assert d["node"] == MODELS[model] and MODELS[model] in _node_features(slurm_cluster, d["node"]).split(",")
        assert (row["status"], d["state"], d["gpu_seen"], d["scheduler"]) == ("verified", "COMPLETED", False, "slurm")
        assert d["queue_s"] is not None and d["run_s"] is not None
    # the promoted tag points at the image, and no GPU certification is claimed anywhere
    assert engine.inspect(PROMOTED).id == image["image_id"]
    assert all("no GPU ran" in note for note in image["gate"]["notes"])
    with Store.open(spec.parent / "h.sqlite") as store:
        certs = store.certificates_for(image["image_id"])
    assert sorted((c.gpu_model, c.status) for c in certs) == [
        (f"none ({m} node)", "verified") for m in sorted(MODELS)]
    reports = spec.parent / "reports"
    junit = (reports / "report.junit.xml").read_text()
    assert all(f"[{m}: no GPU, node {n}]" in junit for m, n in MODELS.items())
    assert (reports / "report.html").read_text().count("no GPU ran") >= 3
    assert json.loads((reports / "fleet.json").read_text())["passed"] is True


@pytest.mark.parametrize("how", ["scancel", "docker kill"])
def test_a_job_killed_on_one_node_leaves_the_image_unpromoted_with_the_reason_named(fleet, slurm_cluster, engine, how):
    spec = fleet()
    proc = _envkit(spec, slurm_cluster)
    job_id = _running_on(slurm_cluster, "h100")
    if how == "scancel":
        slurm_cluster.slurm("scancel", job_id)
    else:
        name = f"envkit-fleet-vision-{job_id}"
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "kill", name], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, f"no container {name} to kill"
            time.sleep(0.3)
    code, doc, _ = _finish(proc)
    assert code == 8
    image = doc["images"][0]
    assert not image["gate"]["promote"] and image["promoted"] == []
    assert engine.inspect(PROMOTED) is None
    rows = _models(doc)
    assert rows["A100"]["status"] == rows["L40S"]["status"] == "verified"
    h100 = rows["H100"]
    assert h100["status"] == "failed"
    state, kind = ("CANCELLED", "cancelled") if how == "scancel" else ("FAILED", "killed")
    assert (h100["dispatch"]["state"], h100["dispatch"]["fault"]) == (state, kind)
    (reason,) = image["gate"]["reasons"]
    assert reason.startswith("H100: ") and state in reason and f"job {job_id}" in reason


def test_sigterm_cancels_every_submitted_job(fleet, slurm_cluster):
    spec = fleet()
    proc = _envkit(spec, slurm_cluster)
    _running_on(slurm_cluster, "l40s")
    proc.send_signal(signal.SIGTERM)
    code, doc, _ = _finish(proc, timeout=120)
    assert code == 143 and doc["error"] == "Interrupted"
    deadline = time.monotonic() + 60
    while slurm_cluster.slurm("squeue", "--noheader").stdout.strip():
        assert time.monotonic() < deadline, "jobs left in the queue after SIGTERM"
        time.sleep(0.3)
    # each job script removes its container on SIGTERM (docker rm -f, within Slurm's KillWait)
    while subprocess.run(["docker", "ps", "-aq", "--filter", "name=envkit-fleet-vision-"], capture_output=True,
                         text=True).stdout.split():
        assert time.monotonic() < deadline + 60, "a job's container was left after SIGTERM"
        time.sleep(0.5)


def test_a_resumed_run_reattaches_to_the_jobs_still_running(fleet, slurm_cluster, engine):
    spec = fleet()
    first = _envkit(spec, slurm_cluster)
    ids = {node: _running_on(slurm_cluster, node) for node in MODELS.values()}
    first.kill()  # SIGKILL: nothing cancels the jobs
    first.communicate()
    code, doc, err = _finish(_envkit(spec, slurm_cluster))
    assert code == 0, err[-3000:]
    assert err.count("re-attached to job") == 3
    assert {row["dispatch"]["node"]: row["dispatch"]["job_id"] for row in _models(doc).values()} == ids


def test_a_job_pending_past_the_limit_is_cancelled_and_named(fleet, slurm_cluster, engine):
    spec = fleet(pending=3)
    blocker = slurm_cluster.slurm("sbatch", "--parsable", "--constraint=a100", "--gres=gpu:a100:1",
                                  "--output=/dev/null", "--wrap", "sleep 120").stdout.strip()
    try:
        _running_on(slurm_cluster, "a100")
        code, doc, _ = _finish(_envkit(spec, slurm_cluster))
    finally:
        slurm_cluster.slurm("scancel", blocker)
    assert code == 8 and engine.inspect(PROMOTED) is None, doc
    a100 = _models(doc)["A100"]
    assert (a100["status"], a100["dispatch"]["fault"], a100["dispatch"]["state"]) == ("failed", "pending limit",
                                                                                      "PENDING")
    assert "pending_limit (3 s)" in doc["images"][0]["gate"]["reasons"][0]


def test_a_constraint_no_node_has_is_refused_at_submission(fleet, slurm_cluster):
    spec = fleet(a100="a800")
    code, doc, _ = _finish(_envkit(spec, slurm_cluster))
    assert code == 16 and doc["error"] == "DispatchError", doc
    assert "Invalid feature specification" in doc["message"] and "sinfo" in doc["hint"]
    assert not slurm_cluster.slurm("squeue", "--noheader").stdout.strip()  # what was submitted before is cancelled


def test_a_locked_nightly_with_dispatch_certifies_each_model_and_moves_the_promoted_tag(fleet, slurm_cluster, engine):
    """`envkit nightly SPEC --locked --dispatch`: the example image (its build recorded in the store, so the nightly
    keeps it as it is instead of building it again) certified on the three nodes, a certificate per model in the
    store, the promoted tag moved, and fleet.json beside the reports."""
    from envkit.app.resolve import lock_path_for
    from envkit.lock import load_lock
    from envkit.render.files import image_tag
    from envkit.support.labels import CONTEXT_LABEL

    spec = fleet()
    (image,) = load_lock(lock_path_for(spec)).images
    tag = image_tag("vision", image)
    info = engine.inspect(tag)
    with Store.open(spec.parent / "h.sqlite") as store:
        store.record_build(image.name, image.hash, info.labels.get(CONTEXT_LABEL, ""), tag=tag, image_id=info.id,
                           size=info.size, seconds=1.0, action="built")
    proc = subprocess.Popen([*ENVKIT, "nightly", str(spec), "--locked", "--dispatch", "--store",
                             str(spec.parent / "h.sqlite"), "--reports", str(spec.parent / "reports"), "--out",
                             str(spec.parent), "--json"], cwd=spec.parent, env=slurm_cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code, doc, err = _finish(proc)
    assert code == 0, err[-3000:]
    (report,) = doc["images"]
    assert (report["build"], report["status"], report["pushed"]) == ("skipped", "verified", [PROMOTED])
    assert engine.inspect(PROMOTED).id == info.id
    rows = _models(doc["fleet"])
    assert {m: (r["status"], r["dispatch"]["node"]) for m, r in rows.items()} == {
        m: ("verified", n) for m, n in MODELS.items()}
    with Store.open(spec.parent / "h.sqlite") as store:
        certs = store.certificates_for(info.id)
    assert sorted((c.gpu_model, c.status) for c in certs) == [(f"none ({m} node)", "verified") for m in sorted(MODELS)]
    assert json.loads((spec.parent / "reports" / "fleet.json").read_text())["passed"] is True
