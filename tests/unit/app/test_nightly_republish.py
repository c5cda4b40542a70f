"""The nightly's memory of what it already did: a certificate it reuses, and a publication it skips.

Pure logic: the engine and the registry answers are fakes (the real registry's side is tested in
tests/integration/test_nightly.py and test_publish*.py); the store is a real SQLite file.
"""

from __future__ import annotations

import pytest

from envkit.engine.protocol import ImageInfo
from envkit.errors import EngineError
from envkit.app.nightly_publish import Asked, _published
from envkit.app.nightly import ImageReport, _certify, _exit_code
from envkit.render.files import image_tag
from envkit.store.history import Store
from tests.unit.lockfixtures import make_image, make_lock

from tests.unit.certify.test_certificate import EXPECT, FakeEngine, cpu_doc, gpu_doc, set_check

IMAGE_ID = "sha256:" + "a" * 64  # FakeEngine's image


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "history.sqlite") as s:
        yield s


def _report(image):
    return ImageReport(image.name, image_tag("vision", image))


# --------------------------------------------------------------------------- certification
def test_a_failed_certificate_is_tried_again_and_a_passed_one_is_reused(store, monkeypatch):
    """A run whose certification failed (a host fault, a timeout) used to hand that failure to every later run,
    with no reason; now the next run certifies again, and only a verdict that passed is reused."""
    image = make_image()
    monkeypatch.setattr("envkit.app.nightly.expected", lambda image: EXPECT)  # what the lock expects
    run_id = store.start_run("sha256:spec")
    engine = FakeEngine(set_check(cpu_doc(), "pip_check", "failed", "broken requirements"))
    first = _report(image)
    _certify(engine, store, run_id, image, first, engine.inspect("x"), False, 0.1, lambda _: None)
    assert first.status == "failed" and any("pip_check" in r for r in first.reasons)

    engine.doc = cpu_doc()  # the fault is gone
    second = _report(image)
    _certify(engine, store, run_id, image, second, engine.inspect("x"), False, 0.1, lambda _: None)
    assert len(engine.runs) == 2 and (second.status, second.reasons) == ("verified", [])

    third = _report(image)
    cert = _certify(engine, store, run_id, image, third, engine.inspect("x"), False, 0.1, lambda _: None)
    assert len(engine.runs) == 2 and third.status == "verified" and cert.status == "verified"  # reused


class GpuRunner(FakeEngine):
    """A GPU runner: nvidia-smi in a container of the image answers `smi` (None: the image has none)."""

    def __init__(self, doc, smi):
        super().__init__(doc)
        self.smi, self.asked = smi, 0

    def run(self, ref, command, options):
        from envkit.engine.protocol import RunResult
        from envkit.errors import CommandNotFoundError

        if command[0] != "nvidia-smi":
            return super().run(ref, command, options)
        self.asked += 1
        assert options.gpus and command[1:] == ["--query-gpu=name,driver_version", "--format=csv,noheader"]
        if self.smi is None:
            raise CommandNotFoundError("no nvidia-smi in the image", command="nvidia-smi")
        return RunResult(exit_code=0, stdout=self.smi, stderr="")


@pytest.mark.parametrize("smi, reused", [
    ("NVIDIA H200, 570.124.06\n", True),                       # the runner that certified it
    ("NVIDIA H200, 570.124.06\nNVIDIA H200, 570.124.06\n", True),  # the same model twice is still that model
    ("NVIDIA H200, 580.95.05\n", False),                       # another driver
    ("NVIDIA A100-SXM4-80GB, 570.124.06\n", False),             # another GPU model sharing the store
    ("NVIDIA H200, 570.124.06\nNVIDIA A100-SXM4-80GB, 570.124.06\n", False),  # a mixed runner
    (None, False),                                               # cannot tell: certify, do not trust
    ("garbage\n", False),
])
def test_a_gpu_runner_reuses_only_a_certificate_of_its_own_gpu_model_and_driver(store, monkeypatch, smi, reused):
    image = make_image()
    monkeypatch.setattr("envkit.app.nightly.expected", lambda image: EXPECT)  # what the lock expects
    run_id = store.start_run("sha256:spec")
    first = GpuRunner(gpu_doc(), smi="NVIDIA H200, 570.124.06\n")
    _certify(first, store, run_id, image, _report(image), first.inspect("x"), True, 0.1, lambda _: None)
    assert first.asked == 0 and len(first.runs) == 1  # nothing to reuse yet: no probe

    engine = GpuRunner(gpu_doc(), smi=smi)
    report = _report(image)
    cert = _certify(engine, store, run_id, image, report, engine.inspect("x"), True, 0.1, lambda _: None)
    assert engine.asked == 1 and cert.status == "certified"
    assert len(engine.runs) == (0 if reused else 1)  # certified again where the runner is not the same kind


def test_a_cpu_runner_never_asks_for_gpus(store, monkeypatch):
    image = make_image()
    monkeypatch.setattr("envkit.app.nightly.expected", lambda image: EXPECT)  # what the lock expects
    run_id = store.start_run("sha256:spec")
    engine = GpuRunner(cpu_doc(), smi="NVIDIA H200, 570.124.06\n")
    for _ in range(2):
        _certify(engine, store, run_id, image, _report(image), engine.inspect("x"), False, 0.1, lambda _: None)
    assert engine.asked == 0 and len(engine.runs) == 1


def test_a_resumed_run_counts_the_certification_its_killed_attempt_did(store, monkeypatch):
    image = make_image()
    monkeypatch.setattr("envkit.app.nightly.expected", lambda image: EXPECT)  # what the lock expects
    engine = FakeEngine(cpu_doc())
    first_run = store.start_run("sha256:spec")
    _certify(engine, store, first_run, image, _report(image), engine.inspect("x"), False, 0.1, lambda _: None)
    resumed = _report(image)  # the same run, resumed after a kill: the certificate is reused, and was its work
    _certify(engine, store, first_run, image, resumed, engine.inspect("x"), False, 0.1, lambda _: None)
    assert len(engine.runs) == 1 and resumed.worked
    later = _report(image)  # a later run: nothing done for it
    _certify(engine, store, store.start_run("sha256:spec2"), image, later, engine.inspect("x"), False, 0.1,
             lambda _: None)
    assert len(engine.runs) == 1 and not later.worked


# --------------------------------------------------------------------------- publication
class Registry:
    """What _published asks: the engine's base, and the registry's manifests (tag -> digest)."""

    def __init__(self, image):
        self.base = ImageInfo("sha256:base", (image.base.ref,), 1, {}, {}, "",
                              repo_digests=("reg:5000/vision/base-debian-bookworm@sha256:b",))
        self.base_ref = image.base.ref
        self.tags: dict[str, str] = {}
        self.down = False
        self.asked = 0

    def inspect(self, ref):
        return self.base if ref == self.base_ref else None


@pytest.fixture
def published(store, monkeypatch):
    image = make_image()
    registry = Registry(image)
    repo = f"reg:5000/vision/{image.name}"
    stack_tag = image_tag("vision", image).split(":", 1)[1]

    def remote_digest(engine, registry_repo, tag, **kwargs):
        registry.asked += 1
        if registry.down:
            raise EngineError("cannot read from registry reg:5000: connection refused")
        return registry.tags.get(f"{registry_repo}:{tag}")

    monkeypatch.setattr("envkit.app.nightly_publish.remote_digest", remote_digest)

    def ask(report=None, *, repo=repo, cert=None, asked=None):
        report = report or _report(image)
        report.status = report.status if report.status != "pending" else "verified"
        return _published(registry, store, repo, stack_tag, image, report, ImageInfo(IMAGE_ID, (), 1, {}, {}, ""),
                          cert, asked or Asked()), report

    def push():
        store.record_push(IMAGE_ID, f"{repo}:{stack_tag}", "sha256:s", "stack")
        registry.tags[f"{repo}:{stack_tag}"] = "sha256:s"
        store.record_mirror(image.base.ref, "reg:5000/vision/base-debian-bookworm@sha256:b")

    return ask, push, registry, repo, stack_tag


def test_a_publication_is_skipped_only_while_the_registry_named_still_holds_it(published):
    ask, push, registry, repo, stack_tag = published
    assert ask()[0] is False  # never pushed
    push()
    assert ask()[0] is True
    assert ask(repo="reg:5000/teamb/vision/torch25")[0] is False  # another path: nothing recorded there
    assert ask(repo="other:5000/vision/torch25")[0] is False  # another registry
    del registry.tags[f"{repo}:{stack_tag}"]  # pruned, or the registry was reset
    assert ask()[0] is False


def test_a_missing_certificate_artifact_or_base_mirror_is_published_again(published, store):
    from envkit.registry.remote_parse import certificate_tag

    ask, push, registry, repo, stack_tag = published
    push()

    class Cert:
        gpu_model = "none"

    assert ask(cert=Cert())[0] is False  # the attachment failed last time: attach it now
    registry.tags[f"{repo}:{certificate_tag(stack_tag, 'none')}"] = "sha256:c"
    assert ask(cert=Cert())[0] is True
    registry.base = ImageInfo("sha256:base2", (registry.base_ref,), 1, {}, {}, "",
                              repo_digests=("reg:5000/vision/base-debian-bookworm@sha256:b2",))
    assert ask(cert=Cert())[0] is False  # a new base, not mirrored yet


def test_a_registry_that_cannot_be_asked_changes_nothing_published_and_is_asked_once_a_run(published):
    """A registry outage must not fail a run with nothing to publish (it would exit 14 where it exited 10), nor
    make every image wait out the registry's timeouts: the first image notes it, the others do not ask."""
    ask, push, registry, *_ = published
    push()
    registry.down = True
    asked = Asked()
    skipped, report = ask(asked=asked)
    assert skipped is True and report.publish_error is None
    assert report.notes[0].startswith("published by an earlier run, not confirmed in reg:5000/vision/torch25 now")
    again, other = ask(asked=asked)
    assert again is True and registry.asked == 1 and other.notes == report.notes
    report.build = "skipped"
    assert _exit_code([report]) == 10  # nothing to do, as before


def test_a_reports_directory_that_cannot_be_used_fails_before_any_build(tmp_path):
    """It used to be found after every build and certification, leaving the run 'running' in the store."""
    import shutil

    from envkit.app.nightly import run_nightly
    from tests.conftest import ROOT

    shutil.copy(ROOT / "examples" / "team.yaml", tmp_path / "team.yaml")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(NotADirectoryError) as err:
        run_nightly(tmp_path / "team.yaml", engine=None, store=None, out_root=tmp_path,
                    reports_dir=tmp_path / "afile" / "reports")
    assert str(tmp_path / "afile") in str(err.value)
