"""`envkit nightly --dispatch`'s wiring, against a scripted scheduler (the real Slurm runs in
tests/integration/test_fleet.py): the fleet gate decides each image's report status, the promotion and the exit
code; a spec without dispatch: is refused naming the file; a resumed run re-attaches instead of submitting twice.

Pure logic: the engine is a stand-in that knows one built image; the store is a real SQLite file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from envkit.app.nightly import CERT_FAILED, PASSED, REGRESSION, _exit_code, run_nightly
from envkit.app.nightly_fleet import FleetStep, certify_on_fleet
from envkit.app.nightly_publish import ImageReport
from envkit.cli import main
from envkit.dispatch.jobs import NODE, REPORT
from envkit.dispatch.states import JobState
from envkit.engine.protocol import ImageInfo
from envkit.errors import SpecError
from envkit.render.files import image_tag
from envkit.spec import load_spec
from envkit.store.history import Store
from tests.unit.certify.test_certificate import cpu_doc, gpu_doc
from tests.unit.dispatch.test_verdict import H100
from tests.unit.lockfixtures import make_image, make_lock

DISPATCH = """
dispatch:
  require: verified
  shared_dir: shared
  slurm: {partition: gpu}
  gpus:
    A100: {slurm: {constraint: a100}}
    H100: {slurm: {constraint: h100}}
    L40S: {slurm: {constraint: l40s}}
"""
SPEC = """version: 1
team: vision
fleet: {min_driver: "550.54.15", gpus: [A100, H100, L40S], policy: minor}
defaults: {base: {bootstrap: {suite: bookworm, mirror: "http://deb.debian.org/debian"}}}
images:
  - name: torch25
    framework: "torch==2.5.*"
"""


class Engine:
    """The built image, and the tags moved to it."""

    def __init__(self, tag: str):
        self.images = {tag: ImageInfo("sha256:" + "e" * 64, (tag,), 10, {}, {}, "")}
        self.tags: list[str] = []

    def layer_chains(self):  # (a build's report of its layers)
        return set()

    def layer_sizes(self, ref):
        return None

    def inspect(self, ref):
        return self.images.get(ref)

    def tag(self, image_id: str, ref: str) -> None:
        self.tags.append(ref)


class Scheduler:
    """Every job completes on the node named after its model; ``fail``: the models whose job fails with no report.
    ``known``: job ids the scheduler still runs (a resumed nightly's); ``gpu``: the models whose node has an H100."""

    scheduler = "slurm"

    def __init__(self, fail: frozenset[str] = frozenset(), known: dict | None = None, gpu: frozenset[str] = frozenset()):
        self.fail, self.gpu, self.submitted = fail, gpu, []
        self.jobs: dict[str, tuple] = dict(known or {})  # job id -> (model, its directory)

    def submit(self, job) -> str:
        job_id = str(100 + len(self.jobs))
        self.jobs[job_id] = (job.model, job.workdir)
        self.submitted.append(job.model)
        return job_id

    def states(self, job_ids) -> dict[str, JobState]:
        out = {}
        for job_id in job_ids:
            if job_id not in self.jobs:
                continue
            model, workdir = self.jobs[job_id]
            if model in self.fail:
                out[job_id] = JobState(job_id, "FAILED", node=model.lower(), exit_code="1:0")
                continue
            gpu = model in self.gpu
            (workdir / REPORT).write_text(json.dumps(gpu_doc(gpus=(H100,)) if gpu else cpu_doc()))
            (workdir / NODE).write_text(json.dumps({"node": model.lower(), "gpu": gpu}))
            out[job_id] = JobState(job_id, "COMPLETED", node=model.lower(), exit_code="0:0")
        return out

    def collect(self, job, job_id) -> None:
        pass

    def cancel(self, job_ids) -> None:
        pass


@pytest.fixture
def nightly(tmp_path):
    spec_path = tmp_path / "team.yaml"
    spec_path.write_text(SPEC + DISPATCH)
    lock = make_lock(make_image())
    image = lock.images[0]
    tag = image_tag(lock.team, image)

    def go(scheduler: Scheduler, checks: dict[str, dict] | None = None):
        engine = Engine(tag)
        report = ImageReport(image.name, tag, build="skipped")
        with Store.open(tmp_path / "h.sqlite") as store:
            run_id = store.start_run("sha256:spec")
            fleet = certify_on_fleet(spec_path, load_spec(spec_path), engine, store, run_id, lock, [(image, report)],
                                     registry=None, threshold=0.1, step=FleetStep(poll_s=0, scheduler=scheduler),
                                     progress=lambda _: None, checks=checks)
            certs = store.certificates_for(engine.images[tag].id)
        return report, fleet, engine, certs

    return go


def test_a_passing_fleet_gate_verifies_the_image_promotes_it_and_records_a_certificate_per_model(nightly):
    report, fleet, engine, certs = nightly(Scheduler())
    assert (report.status, _exit_code([report])) == ("verified", PASSED)
    assert engine.tags == ["vision/torch25:certified"] and report.pushed == ["vision/torch25:certified"]
    assert sorted(c.gpu_model for c in certs) == [f"none ({m} node)" for m in ("A100", "H100", "L40S")]
    rows = fleet.to_json()["images"][0]["models"]
    assert [(r["model"], r["status"]) for r in rows] == [(m, "verified") for m in ("A100", "H100", "L40S")]


def test_the_runs_layer_check_is_in_every_fleet_certificate_stored_and_reported(nightly, tmp_path):
    """`nightly --dispatch --reproducible`: the host's check of the image's layers joins each model's certificate
    (so the store, the reports and the artifacts pushed beside the image say it), and changes no status."""
    from envkit.app.fleet import write_fleet_reports

    check = {"name": "layers", "status": "passed", "value": None, "expected": {"cuda": "sha256:c"},
             "message": "environment layers match the lock exactly (cuda)", "seconds": 0.0}
    report, fleet, _, certs = nightly(Scheduler(), {"torch25": check})
    assert report.status == "verified"
    made = fleet.images[0].certificates
    assert len(made) == 3 and all([c.name for c in cert.checks].count("layers") == 1 for cert in made)
    assert all(c.document["checks"][-1]["message"] == check["message"] for c in certs)
    write_fleet_reports(fleet, tmp_path / "reports")
    assert json.loads((tmp_path / "reports" / "report.json").read_text())["certificates"][0]["checks"][-1]["name"] \
        == "layers"


def test_a_model_whose_job_failed_fails_the_image_with_the_gates_reason_and_promotes_nothing(nightly):
    report, fleet, engine, _ = nightly(Scheduler(fail=frozenset({"H100"})))
    assert (report.status, _exit_code([report])) == ("failed", CERT_FAILED)
    assert engine.tags == [] and not fleet.passed
    assert any(r.startswith("H100: ") for r in report.reasons), report.reasons


def test_a_resumed_run_reattaches_to_the_jobs_an_earlier_one_left_instead_of_submitting_again(nightly, tmp_path):
    first = Scheduler()
    nightly(first)
    assert sorted(first.submitted) == ["A100", "H100", "L40S"]
    # the jobs' state files say unfinished (as a run killed while they ran leaves them), and the scheduler knows them
    known = {}
    for state in (tmp_path / "shared").rglob("job.json"):
        doc = json.loads(state.read_text())
        state.write_text(json.dumps({**doc, "finished": False}))
        known[doc["job_id"]] = (doc["model"], state.parent)
    again = Scheduler(known=known)
    report, *_ = nightly(again)
    assert again.submitted == [] and report.status == "verified"


def test_a_regression_on_a_certified_fleet_model_holds_the_promotion(nightly, monkeypatch):
    seen = []

    def regressions(self, gpu_model, metrics, threshold, exclude_image=None):
        seen.append(gpu_model)
        return ["matmul_tflops dropped 50%"]

    monkeypatch.setattr(Store, "regressions", regressions)
    report, fleet, engine, _ = nightly(Scheduler(gpu=frozenset({"H100"})))
    assert seen == ["NVIDIA H100 80GB HBM3"]  # only a certified model is compared, under its GPU's name
    assert report.regressions == ["H100: matmul_tflops dropped 50%"] and _exit_code([report]) == REGRESSION
    assert engine.tags == [] and not fleet.images[0].gate.promote


def test_a_spec_without_dispatch_is_refused_naming_the_file_before_any_build(tmp_path):
    spec_path = tmp_path / "team.yaml"
    spec_path.write_text(SPEC)
    with Store.open(tmp_path / "h.sqlite") as store, pytest.raises(SpecError) as err:
        run_nightly(spec_path, Engine("x"), store, out_root=tmp_path, reports_dir=tmp_path / "reports",
                    dispatch=FleetStep())
    assert str(spec_path) in err.value.message and "dispatch:" in err.value.message


def test_gpus_and_dispatch_together_are_a_usage_error(tmp_path):
    out = CliRunner().invoke(main, ["nightly", str(tmp_path / "team.yaml"), "--dispatch", "--gpus"])
    assert out.exit_code == 2 and "--dispatch" in out.output
