"""The researcher's questions, answered from certificates (pure logic: standing per GPU model; ls over a real SQLite
store with a fake engine; show's summary): which images, where each stands on my GPU, how to run it, what next."""

import json

import pytest
from click.testing import CliRunner

from envkit.app import standing
from envkit.app.pull import bare, newest_ref, next_step, summarize
from envkit.app.researchers import list_team_images
from envkit.cli import main
from envkit.engine.protocol import ImageInfo
from envkit.store.history import Store

TEAM_LABELS = {"io.envkit.team": "vision", "io.envkit.image": "torch25", "io.envkit.lock-hash": "sha256:" + "a" * 64,
               "io.envkit.framework": "torch==2.5.1", "io.envkit.variant": "cu124", "io.envkit.cuda": "12.4.127",
               "io.envkit.python": "3.11", "io.envkit.driver-floor": "525.60.13",
               "org.opencontainers.image.version": "2.5.1-cu124-py3.11-aaaaaaaa"}
TAG_A = "vision/torch25:2.5.1-cu124-py3.11-aaaaaaaa"
TAG_B = "vision/torch25:2.5.1-cu124-py3.11-bbbbbbbb"
ID_A, ID_B = "sha256:" + "1" * 64, "sha256:" + "2" * 64


H100_DOCUMENT = {"version": 1, "status": "certified", "gpu_model": "NVIDIA H100", "driver": "570.1",
                 "checks": [{"name": "matmul", "ok": True}], "telemetry": [{"gpu": 0, "samples": 12}]}


def cert(model, status, when, driver="570.124.06", source="store", metrics=None):
    return {"gpu_model": model, "status": status, "created_at": when, "driver": driver, "source": source,
            "reasons": [], "metrics": metrics or {}}


def test_the_newest_certificate_per_model_speaks_and_a_cpu_run_reads_as_cpu_only():
    found = standing.standings([
        cert("NVIDIA H100", "failed", "2026-11-01T00:00:00Z"),
        cert("NVIDIA  H100", "certified", "2026-12-01T00:00:00Z", metrics={"matmul_tflops.bf16_matmul_tflops": 712.5}),
        cert("none", "verified", "2026-11-30T00:00:00Z", driver="none"),
        cert("NVIDIA A100", "failed", "2026-12-02T00:00:00Z")])
    assert [(s.short, s.status, s.bf16_tflops) for s in found] == [
        ("A100", "failed", None), ("H100", "certified", 712.5), ("CPU only", "verified", None)]
    text = standing.summary(found)
    assert text == "A100 failed 2026-12-02, H100 certified 2026-12-01, CPU only verified 2026-11-30"
    assert "none" not in text
    assert standing.on_model(found, "H100")[0] == "certified"
    assert standing.on_model(found, "A100")[0] == "failed"
    assert standing.summary(found, "L40S") == "L40S: verified only (CPU only verified 2026-11-30)"
    assert standing.on_model(standing.standings([]), "H100") == ("not certified", None)
    assert standing.certified_on(found, None) and standing.certified_on(found, "H100")
    assert not standing.certified_on(found, "A100")
    assert found[2].to_json()["driver"] is None and found[2].to_json()["cpu_only"]


class FakeEngine:
    def __init__(self, images):
        self.images = images

    def inspect(self, ref):
        return self.images.get(ref)

    def find_image(self, labels):
        hits = [i for i in self.images.values() if all(i.labels.get(k) == v for k, v in labels.items())]
        return hits[0] if hits else None

    def nvidia_runtime(self):
        return False


def info(image_id, tag, labels=TEAM_LABELS):
    return ImageInfo(id=image_id, tags=(tag,), size=1, labels=dict(labels), env={}, user="")


@pytest.fixture
def team_store(tmp_path, monkeypatch):
    """Stack A built, CPU-verified and certified on an H100; stack B built and verified only."""
    monkeypatch.delenv("ENVKIT_STORE", raising=False)
    db = tmp_path / "h.sqlite"
    with Store.open(db) as store:
        store.record_build("torch25", "sha256:" + "a" * 64, "c", tag=TAG_A, image_id=ID_A)
        store.record_build("torch25", "sha256:" + "b" * 64, "c", tag=TAG_B, image_id=ID_B)
        store.record_certificate(ID_A, "none", "none", status="verified", lock_hash="a", document={})
        store.record_certificate(ID_A, "NVIDIA H100", "570.1", status="certified", lock_hash="a",
                                 document=H100_DOCUMENT, metrics={"matmul_tflops.bf16_matmul_tflops": 700.0})
        store.record_certificate(ID_B, "none", "none", status="verified", lock_hash="b",
                                 document={"expect": {"torch": "2.5.1", "cuda": "12.4"}})
    engine = FakeEngine({ID_A: info(ID_A, TAG_A), TAG_A: info(ID_A, TAG_A)})
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine)
    return db, engine


def test_ls_gives_framework_cuda_and_status_per_model_and_filters_by_gpu(team_store):
    db, engine = team_store
    doc = list_team_images(str(db), lambda: engine)
    rows = {r["tag"]: r for r in doc["images"]}
    a, b = rows[TAG_A], rows[TAG_B]
    assert (a["framework"], a["cuda"], a["driver_floor"]) == ("torch 2.5.1", "12.4", "525.60.13")
    assert (b["framework"], b["cuda"]) == ("torch 2.5.1", "12.4")  # not here: from its certificate's expectations
    assert a["status"].startswith("H100 certified ") and ", CPU only verified " in a["status"]
    assert b["status"].startswith("CPU only verified")
    on_h100 = {r["tag"]: r["status"] for r in list_team_images(str(db), lambda: engine, gpu="H100")["images"]}
    assert on_h100[TAG_A].startswith("H100: certified (") and on_h100[TAG_B].startswith("H100: verified only (")
    certified = list_team_images(str(db), lambda: engine, gpu="H100", certified=True)["images"]
    assert [r["tag"] for r in certified] == [TAG_A]
    assert list_team_images(str(db), lambda: engine, gpu="A100", certified=True)["images"] == []


def test_ls_command_one_line_per_image_and_unknown_gpus_named(team_store):
    db, _ = team_store
    out = CliRunner().invoke(main, ["ls", "--store", str(db), "--gpu", "h100", "--certified"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["IMAGE", "FRAMEWORK", "CUDA", "ON", "H100"]
    assert len(lines) == 2 and lines[1].startswith(TAG_A) and "torch 2.5.1  12.4  H100: certified" in lines[1]
    bad = CliRunner().invoke(main, ["ls", "--gpu", "H1000", "--json"])
    assert bad.exit_code == 2
    message = json.loads(bad.stdout)["message"]
    assert "unknown GPU 'H1000'" in message and "did you mean 'H100'" in message and "A100, " in message
    assert "L40S" in message and "V100" in message  # the full list, not cut before H100


def test_show_answers_first_then_the_run_line(team_store):
    db, _ = team_store
    out = CliRunner().invoke(main, ["show", TAG_A, "--store", str(db), "--gpu", "A100"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert lines[0] == f"{TAG_A} (here)"
    assert lines[1] == "  torch 2.5.1, CUDA 12.4, needs driver >= 525.60.13"
    h100 = next(line for line in lines if line.strip().startswith("H100"))
    assert h100.split()[1] == "certified" and h100.split()[3] == "570.1" and "bf16 700 TFLOP/s" in h100
    assert any(line.split()[:3] == ["CPU", "only", "verified"] for line in lines)
    assert any(line.split()[:3] == ["A100", "verified", "only"] for line in lines)
    assert f"  envkit run {TAG_A} -- python3 train.py" in lines and not any(line.startswith("next:") for line in lines)
    assert "io.envkit.lock-hash" not in out.stdout  # labels only with --all
    full = CliRunner().invoke(main, ["show", TAG_A, "--store", str(db), "--all"])
    assert "io.envkit.lock-hash" in full.stdout and "certificate: certified on NVIDIA H100 driver 570.1" in full.stdout
    doc = json.loads(CliRunner().invoke(main, ["show", TAG_A, "--store", str(db), "--json"]).stdout)
    assert doc["framework"] == "torch 2.5.1" and doc["commands"] == [f"envkit run {TAG_A} -- python3 train.py"]
    assert {s["gpu_model"] for s in doc["standing"]} == {"NVIDIA H100", None} and doc["labels"]
    h100_cert = next(c for c in doc["certificates"] if c["gpu_model"] == "NVIDIA H100")
    assert h100_cert["document"] == H100_DOCUMENT  # the whole certificate, not only its summary


def test_a_bare_repository_means_its_newest_tag(team_store):
    _, engine = team_store
    assert bare("vision/torch25") and bare("127.0.0.1:5000/vision/torch25")
    assert not bare(TAG_A) and not bare("vision/torch25@sha256:" + "a" * 64)
    assert newest_ref(engine, "vision/torch25") == TAG_A
    assert newest_ref(engine, TAG_B) == TAG_B
    out = CliRunner().invoke(main, ["show", "vision/torch25", "--store", str(team_store[0])])
    assert out.exit_code == 0 and out.stdout.startswith(f"{TAG_A} (here)")


def test_next_step_when_nothing_certifies_it():
    assert next_step(standing.standings([cert("NVIDIA H100", "certified", "2026-12-01")])) is None
    assert "no certificate yet" in next_step([])
    assert "failed on H100" in next_step(standing.standings([cert("NVIDIA H100", "failed", "2026-12-01")]))
    assert "verified without a GPU only" in next_step(standing.standings([cert("none", "verified", "2026-12-01")]))
    doc = summarize({"image": "x:1", "source": "registry", "labels": {}, "certificates": []})
    assert doc["commands"] == ["envkit pull x:1", "envkit run x:1 -- python3 train.py"]


def test_show_adds_the_fleets_models_from_the_team_yaml_here(team_store, tmp_path, monkeypatch):
    db, _ = team_store
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text('version: 1\nteam: vision\nfleet: {min_driver: "550.54.15", '
                                        'gpus: [A100, H100, "8.9"]}\nimages: [{name: t, framework: "torch==2.5.*"}]\n')
    out = CliRunner().invoke(main, ["show", TAG_A, "--store", str(db)])
    rows = {line.split()[0]: line.split()[1:3] for line in out.stdout.splitlines() if line.startswith("  ")}
    assert rows["H100"][0] == "certified" and rows["A100"] == ["verified", "only"] and "8.9" not in rows
    (tmp_path / "team.yaml").write_text("version: 1\nteam: [\n")
    broken = CliRunner().invoke(main, ["show", TAG_A, "--store", str(db)])
    assert broken.exit_code == 0 and "team.yaml was not read for the fleet's GPU models" in broken.stderr
