"""`envkit nightly --reproducible`'s layer step (``app.nightly_layers``): each image's environment layers against the
lock's record, the failure it makes, the record a re-resolving run writes, and what is refused before any work.

Pure logic: images are ``ImageInfo`` stand-ins with the layers a reproducible build gives; the store is a real SQLite
file; ``build_image`` is replaced where ``_build`` is driven (the real builds: tests/integration/
test_nightly_reproducible.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from envkit import __version__
from envkit.app.nightly import LAYERS_DIFFER, CERT_FAILED, EXIT_NAMES, ImageReport, _build, _exit_code, run_nightly
from envkit.app.nightly_layers import LayerStep
from envkit.images.layer_record import Recorded, entry, layers_of, load_record, record_path, write_record
from envkit.cli import main
from envkit.engine.protocol import ImageInfo
from envkit.errors import BuildError
from envkit.lock import lock_changes, write_lock
from envkit.render.files import image_tag
from envkit.spec import load_spec
from envkit.store.history import Store
from envkit.support.labels import CONTEXT_LABEL, LAYERS_LABEL, PAYLOAD_LAYER_LABEL, REPRODUCIBLE_LAYERS
from tests.unit.certify.test_certificate import cpu_doc
from tests.unit.lockfixtures import make_image, make_lock

LAYERS = {"cuda": "sha256:c", "framework": "sha256:f", "extra": "sha256:e", "payload": "sha256:p"}
OTHER_HASH = "sha256:" + "9" * 64


def _info(layers: dict[str, str] = LAYERS, reproducible: bool = True) -> ImageInfo:
    labels = {LAYERS_LABEL: REPRODUCIBLE_LAYERS} if reproducible else {}
    return ImageInfo("sha256:" + "1" * 64, (), 0, labels, {}, "1000:1000", layers=("sha256:os", *layers.values()))


@pytest.fixture
def lock_path(tmp_path):
    path = tmp_path / "team.lock"
    write_lock(make_lock(make_image()), path)
    return path


def _judge(lock_path, tmp_path, info, *, locked=False):
    image = make_image()
    step = LayerStep.open(lock_path, locked=locked)
    report = ImageReport(image.name, image_tag("vision", image), build="built")
    with Store.open(tmp_path / "h.sqlite") as store:
        ok = step.judge(store, image, report, info, gpus=False)
        certs = store.certificates_for(info.id)
    return step, report, ok, certs


def test_layers_of_names_a_reproducible_builds_layers_by_group_up_to_its_payload():
    assert layers_of(make_image(), ("sha256:os", *LAYERS.values()), {}) == LAYERS
    no_extra = make_image(extra=())
    assert layers_of(no_extra, ("sha256:os", "sha256:c", "sha256:f", "sha256:p"), {}) == {
        "cuda": "sha256:c", "framework": "sha256:f", "payload": "sha256:p"}
    devel = ("sha256:os", *LAYERS.values(), "sha256:devel-apt", "sha256:cuda-home")  # the builder's steps above
    assert layers_of(make_image(), devel, {PAYLOAD_LAYER_LABEL: LAYERS["payload"]}) == LAYERS


def test_the_recorded_layers_pass_and_nothing_is_rewritten(lock_path, tmp_path):
    image = make_image()
    write_record(lock_path, [Recorded(image.name, image.hash, LAYERS, "test")])
    step, report, ok, certs = _judge(lock_path, tmp_path, _info())
    assert ok and report.status == "pending" and step.entries == [] and certs == []
    assert report.layers["check"] == "passed" and report.layers["reproducible"] is True
    assert report.layers["message"] == "environment layers match the lock exactly (cuda, framework, extra)"
    assert report.layers["digests"] == LAYERS and report.layers["recorded"] is False
    assert step.checks[image.name]["status"] == "passed"
    assert step.finish(lambda _: None) is None  # nothing to write


def test_layers_that_differ_fail_the_image_naming_the_group_and_both_digests(lock_path, tmp_path):
    image = make_image()
    write_record(lock_path, [Recorded(image.name, image.hash, LAYERS, "test")])
    step, report, ok, certs = _judge(lock_path, tmp_path, _info({**LAYERS, "framework": "sha256:f2"}))
    assert not ok and report.status == "failed" and report.worked
    said = "the framework layer differs from the lock's record: the image has sha256:f2, the record sha256:f"
    assert report.reasons == [f"layers: {said}"]
    assert report.layers["check"] == "failed"
    assert report.layers["differs"] == [{"group": "framework", "record": "sha256:f", "image": "sha256:f2"}]
    assert _exit_code([report]) == LAYERS_DIFFER and EXIT_NAMES[LAYERS_DIFFER] == "layer mismatch"
    # before a certification failure: the image is not the lock's
    assert _exit_code([ImageReport("b", "t", build="built", status="failed"), report]) == LAYERS_DIFFER
    assert _exit_code([ImageReport("b", "t", build="built", status="failed")]) == CERT_FAILED
    # the store keeps why: a failed certificate whose one check is the layer check
    [cert] = certs
    assert cert.status == "failed" and cert.lock_hash == image.hash
    [check] = cert.document["checks"]
    assert check["name"] == "layers" and check["status"] == "failed" and said in check["message"]
    assert step.failed[0].status == "failed"
    # a mismatch never overwrites the record it failed against
    assert step.entries == [] and step.finish(lambda _: None) is None
    assert load_record(lock_path)[image.name].layers == LAYERS


def test_a_run_that_re_resolved_writes_the_record_of_an_image_it_has_none_for(lock_path, tmp_path):
    image = make_image()
    step, report, ok, _ = _judge(lock_path, tmp_path, _info())
    assert ok and report.layers["check"] == "no record" and report.layers["recorded"] is True
    assert report.layers["message"] == f"no record of this image in {record_path(lock_path)}: this run writes it"
    assert step.checks[image.name]["status"] == "skipped"  # in the certificate: the run says what it found
    said = []
    assert step.finish(said.append) == record_path(lock_path)
    assert said[0].startswith(f"wrote {record_path(lock_path)}")
    recorded = load_record(lock_path)[image.name]
    assert recorded == entry(image, LAYERS) and recorded.lock_hash == image.hash
    assert json.loads(record_path(lock_path).read_text())["images"][image.name]["layers"] == LAYERS


def test_an_entry_of_another_lock_hash_is_replaced_by_a_re_resolving_run_and_kept_by_a_locked_one(lock_path, tmp_path):
    image = make_image()
    write_record(lock_path, [Recorded(image.name, OTHER_HASH, {**LAYERS, "extra": "sha256:old"}, "test")])
    step, report, ok, _ = _judge(lock_path, tmp_path, _info())
    assert ok and report.layers["check"] == "skipped" and "records lock hash sha256:999999999999" in \
        report.layers["message"] and report.layers["message"].endswith("this run writes the entry of this lock")
    step.finish(lambda _: None)
    assert load_record(lock_path)[image.name].lock_hash == image.hash

    write_record(lock_path, [Recorded(image.name, OTHER_HASH, LAYERS, "test")])
    step, report, ok, _ = _judge(lock_path, tmp_path, _info(), locked=True)
    assert ok and report.layers["recorded"] is False and step.finish(lambda _: None) is None
    assert load_record(lock_path)[image.name].lock_hash == OTHER_HASH


def test_a_locked_run_without_a_record_writes_none_and_says_how_to_get_one(lock_path, tmp_path):
    step, report, ok, _ = _judge(lock_path, tmp_path, _info(), locked=True)
    assert ok and report.layers["check"] == "no record" and "--reproducible --record" in report.layers["message"]
    assert step.finish(lambda _: None) is None and not record_path(lock_path).exists()


def test_a_passing_check_joins_the_certificate_and_a_missing_one_changes_nothing():
    from envkit.certify.certificate import certificate_from
    from envkit.frameworks import expected

    image = make_image()
    cert = certificate_from(cpu_doc(), expected(image), image="t", image_id="sha256:1", lock_hash=image.hash,
                            gpu_requested=False, created_at="2026-12-06T00:00:00Z", envkit_version="0")
    check = {"name": "layers", "status": "passed", "value": None, "expected": LAYERS, "message": "match",
             "seconds": 0.0}
    joined = cert.with_check(check)
    assert joined.checks[-1].name == "layers" and joined.status == cert.status
    assert cert.with_check(None) is cert
    assert [c.name for c in joined.with_check({**check, "status": "skipped"}).checks].count("layers") == 1


SPEC = """version: 1
team: vision
fleet: {min_driver: "550.54.15", gpus: [A100, H100, L40S], policy: minor}
defaults: {base: {bootstrap: {suite: bookworm, mirror: "http://deb.debian.org/debian"}}}
images:
  - name: torch25
    framework: "torch==2.5.*"
  - name: torch25-dev
    framework: "torch==2.5.*"
    flavour: devel
"""


class LocalEngine:
    def __init__(self, local: bool = True):
        self.is_local = local

    def local(self) -> bool:
        return self.is_local


def test_a_remote_engine_is_refused_before_a_run_starts(tmp_path):
    spec_path = tmp_path / "team.yaml"
    spec_path.write_text(SPEC)  # (a devel image: envkit's layers, then the builder's devel steps)
    with Store.open(tmp_path / "h.sqlite") as store, pytest.raises(BuildError, match="remote engine"):
        run_nightly(spec_path, LocalEngine(local=False), store, out_root=tmp_path, reports_dir=tmp_path / "reports",
                    locked=True, reproducible=True)
    with Store.open(tmp_path / "h.sqlite") as store:
        assert store.snapshot()["runs"] == []  # refused before the run began: nothing to resume
    assert not (tmp_path / "team.lock").exists() and not (tmp_path / "dockerfiles").exists()


class Engine:
    """One image already built and recorded, made by a builder or by envkit."""

    def __init__(self, tag: str, reproducible: bool):
        labels = {CONTEXT_LABEL: "sha256:ctx", **({LAYERS_LABEL: REPRODUCIBLE_LAYERS} if reproducible else {})}
        self.images = {tag: ImageInfo("sha256:old", (tag,), 1, labels, {}, "")}

    def layer_chains(self):  # (a build's report of its layers)
        return set()

    def layer_sizes(self, ref):
        return None

    def inspect(self, ref):
        return self.images.get(ref)


@pytest.mark.parametrize("reproducible_image, built", [(False, True), (True, False)])
def test_a_builders_image_of_the_lock_is_built_again_reproducibly_and_envkits_is_kept(
        tmp_path, monkeypatch, reproducible_image, built):
    lock = make_lock(make_image())
    image = lock.images[0]
    tag = image_tag(lock.team, image)
    engine = Engine(tag, reproducible_image)
    engine.images[image.base.ref] = ImageInfo("sha256:base", (image.base.ref,), 1, {}, {}, "")
    calls = []

    def build_image(eng, lk, img, spec_name, **kwargs):
        calls.append(kwargs["reproducible"])
        eng.images[tag] = ImageInfo("sha256:new", (tag,), 1, {LAYERS_LABEL: REPRODUCIBLE_LAYERS}, {}, "")

        class Outcome:
            action, seconds, made_by, moves = "built", 1.0, "reproducible", None
        return Outcome()

    monkeypatch.setattr("envkit.app.nightly.build_image", build_image)
    with Store.open(tmp_path / "h.sqlite") as store:
        store.record_build(image.name, image.hash, "sha256:ctx", tag=tag, image_id="sha256:old", size=1, seconds=1,
                           action="built")
        run_id = store.start_run("sha256:spec")
        report = ImageReport(image.name, tag)
        info = _build(engine, store, run_id, lock, image, "team.yaml", None, report, lambda _: None, "classic",
                      reproducible=True)
        recorded = store.find_build(image.name, image.hash, "")
    assert calls == ([True] if built else [])
    assert report.build == ("built" if built else "skipped") and info.labels[LAYERS_LABEL] == REPRODUCIBLE_LAYERS
    if built:  # the build's builder, as its provenance will say it
        assert recorded is not None and (recorded.builder, recorded.envkit_version) == ("reproducible", __version__)


def test_the_nightly_flag_is_documented(tmp_path):
    out = CliRunner().invoke(main, ["nightly", "--help"])
    assert out.exit_code == 0 and "--reproducible" in out.output and "exit 18" in out.output


# --------------------------------------------------------------------------- the run, end to end (fakes)
class RunEngine:
    """The base is here; a build makes an image with envkit's layers (``LAYERS``, or ``built``)."""

    def __init__(self, base: str):
        self.images = {base: ImageInfo("sha256:base", (base,), 1, {}, {}, "")}

    def layer_chains(self):  # (a build's report of its layers)
        return set()

    def layer_sizes(self, ref):
        return None

    def inspect(self, ref):
        return self.images.get(ref)

    def local(self) -> bool:
        return True


@pytest.fixture
def run(tmp_path, monkeypatch):
    """``run_nightly --reproducible --no-gpus`` over a one-image lock: resolving (``_locks``), building and the
    payload replaced; returns the result, the certifications asked for and the lock path."""
    from envkit.catalog.files import load_catalog
    from envkit.certify.certificate import certificate_from
    from envkit.frameworks import expected
    from envkit.resolve.plan import spec_digest

    spec_path = tmp_path / "team.yaml"
    spec_path.write_text(SPEC.split("  - name: torch25-dev")[0])
    lock = make_lock(make_image()).model_copy(update={"spec_digest": spec_digest(load_spec(spec_path)),
                                                      "catalog_digest": load_catalog().digest})
    image = lock.images[0]
    tag = image_tag(lock.team, image)
    certified: list[str] = []

    def go(built: dict[str, str] = LAYERS, *, locked: bool = False):
        engine = RunEngine(image.base.ref)

        def build_image(eng, lk, img, spec_name, **kwargs):
            assert kwargs["reproducible"] is True
            eng.images[tag] = ImageInfo("sha256:" + "5" * 64, (tag,), 1, {LAYERS_LABEL: REPRODUCIBLE_LAYERS}, {}, "",
                                        layers=("sha256:os", *built.values()))

            class Outcome:
                action, seconds, made_by, moves = "built", 1.0, "reproducible", None
            return Outcome()

        def certify_image(eng, ref, expect, *, gpus):
            certified.append(ref)
            return certificate_from(cpu_doc(), expect, image=ref, image_id=eng.inspect(ref).id, lock_hash=image.hash,
                                    gpu_requested=gpus, created_at="2026-12-06T00:00:00Z", envkit_version="0")

        monkeypatch.setattr("envkit.app.nightly._locks", lambda *a, **k: (lock_changes(lock, lock), lock))
        monkeypatch.setattr("envkit.app.nightly.build_image", build_image)
        monkeypatch.setattr("envkit.app.nightly.certify_image", certify_image)
        monkeypatch.setattr("envkit.app.nightly.expected", lambda img: expected(img))
        with Store.open(tmp_path / "h.sqlite") as store:
            result = run_nightly(spec_path, engine, store, out_root=tmp_path, reports_dir=tmp_path / "reports",
                                 gpus=False, locked=locked, reproducible=True, builder="classic")
            certs = store.certificates_for("sha256:" + "5" * 64)
        engine.images.pop(tag)  # removed before the next run, so it is built again
        return result, certs

    return go, tmp_path / "team.lock", image, certified


def test_a_re_resolving_run_verifies_its_build_and_writes_the_lock_then_the_record_beside_it(run):
    go, lock_path, image, certified = run
    result, [cert] = go()
    assert result.exit_code == 0 and len(certified) == 1
    [report] = result.images
    assert report.status == "verified" and report.layers["check"] == "no record" and report.layers["recorded"]
    assert lock_path.exists() and load_record(lock_path)[image.name] == entry(image, LAYERS)
    assert [c for c in cert.document["checks"] if c["name"] == "layers"][0]["status"] == "skipped"
    # the next run, same lock: the check passes; the stored verdict is reused, its reports say this run's check
    result, [cert] = go()
    assert result.exit_code == 0 and result.images[0].layers["check"] == "passed" and len(certified) == 1
    report = json.loads(Path(result.reports["json"]).read_text())
    assert "environment layers match the lock exactly" in json.dumps(report)
    assert "no record of this image" not in json.dumps(report)


def test_a_build_whose_layers_differ_is_neither_certified_nor_recorded_and_the_run_exits_18(run):
    go, lock_path, image, certified = run
    write_record(lock_path, [entry(image, LAYERS)])
    result, [cert] = go({**LAYERS, "cuda": "sha256:c2"})
    assert result.exit_code == LAYERS_DIFFER and certified == []
    [report] = result.images
    assert report.status == "failed" and report.build == "built"
    assert report.reasons == ["layers: the cuda layer differs from the lock's record: the image has sha256:c2, "
                              "the record sha256:c"]
    assert cert.status == "failed" and [c["name"] for c in cert.document["checks"]] == ["layers"]
    assert load_record(lock_path)[image.name].layers == LAYERS  # the record it failed against stays
    assert "layers differs" not in (lock_path.parent / "reports" / "report.json").read_text()
    assert "the cuda layer differs" in (lock_path.parent / "reports" / "report.json").read_text()


def test_the_command_passes_the_flag_and_its_table_says_what_each_check_said(monkeypatch):
    import contextlib

    from envkit.app.nightly import NightlyResult

    seen = {}
    passed = ImageReport("a", "vision/a:1", build="built", status="verified",
                         layers={"check": "passed", "message": "environment layers match the lock exactly (extra)"})
    failed = ImageReport("b", "vision/b:1", build="built", status="failed",
                         reasons=["layers: the extra layer differs from the lock's record: the image has sha256:x, "
                                  "the record sha256:y"], layers={"check": "failed", "message": "-"})

    def run_nightly(spec, eng, store, **kwargs):
        seen.update(kwargs)
        return NightlyResult(1, LAYERS_DIFFER, [passed, failed], {}, 0.1, False)

    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: object())
    monkeypatch.setattr("envkit.app.nightly.run_nightly", run_nightly)
    monkeypatch.setattr("envkit.store.history.Store.open", lambda *a, **k: contextlib.nullcontext())
    out = CliRunner().invoke(main, ["nightly", "team.yaml", "--reproducible"])
    assert out.exit_code == LAYERS_DIFFER and seen["reproducible"] is True
    assert "a: layers passed: environment layers match the lock exactly (extra)" in out.stderr
    assert "b: layers: the extra layer differs from the lock's record" in out.stderr
    assert "b: layers failed" not in out.stderr  # (said once, among its reasons)
    assert "layer mismatch" in out.stdout
    out = CliRunner().invoke(main, ["nightly", "team.yaml", "--json"])
    assert seen["reproducible"] is False and json.loads(out.stdout)["outcome"] == "layer mismatch"
