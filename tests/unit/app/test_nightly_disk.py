"""The nightly's builds when the engine's disk fills up: reclaim once (``nightly --gc``) and try that
build again, else stop building; images already built go on to certification.

Pure logic: ``build_image`` is replaced by a script of outcomes (the real engine's disk-full error is
tested in tests/integration/test_build_host_failures.py); the store is a real SQLite file.
"""

from __future__ import annotations

import pytest

from envkit.engine.protocol import ImageInfo
from envkit.engine.space import engine_full, engine_out_of_space
from envkit.errors import BuildError
from envkit.support.labels import CONTEXT_LABEL
from envkit.app.nightly import BUILD_FAILED, Disk, ImageReport, _build, _exit_code
from envkit.render.files import image_tag
from envkit.store.history import Store
from tests.unit.lockfixtures import make_image, make_lock


class Engine:
    """What _build asks of an engine: the base is present; an image exists once 'built'."""

    def __init__(self, base: str):
        self.images = {base: ImageInfo("sha256:base", (base,), 1, {}, {}, "")}

    def layer_chains(self):  # (a build's report of its layers)
        return set()

    def layer_sizes(self, ref):
        return None

    def inspect(self, ref):
        return self.images.get(ref)

    def disk_usage(self):
        return {"root": "/nonexistent/docker", "images_bytes": 5 << 30}


def full_error(tag: str) -> BuildError:
    return engine_out_of_space(BuildError(f"building {tag} failed: write /usr/lib: no space left on device"),
                               Engine("x"))


@pytest.fixture
def run(tmp_path, monkeypatch):
    """Runs _build over a lock of images a, b, c; ``script``: per build_image call, None (builds) or an error."""

    def go(script: list, reclaim=None):
        lock = make_lock(*(make_image(n) for n in ("a", "b", "c")))
        engine = Engine(lock.images[0].base.ref)
        calls: list[str] = []
        outcomes = iter(script)

        def build_image(eng, lk, image, spec_name, **kwargs):
            calls.append(image.name)
            error = next(outcomes)
            if error is not None:
                raise error
            tag = image_tag(lk.team, image)
            eng.images[tag] = ImageInfo(f"sha256:{image.name}", (tag,), 10, {}, {}, "")

            class Outcome:
                action, seconds, made_by, moves = "built", 1.0, "classic", None
            return Outcome()

        monkeypatch.setattr("envkit.app.nightly.build_image", build_image)
        disk = Disk(reclaim)
        tags = [image_tag(lock.team, i) for i in lock.images]
        messages: list[str] = []
        with Store.open(tmp_path / "history.sqlite") as store:
            run_id = store.start_run("sha256:spec")
            reports = []
            for image in lock.images:
                report = ImageReport(image.name, image_tag(lock.team, image))
                _build(engine, store, run_id, lock, image, "team.yaml", None, report, messages.append, "classic",
                       disk, tags)
                reports.append(report)
        return reports, calls, disk, messages, tags

    return go


def test_the_disk_full_error_is_marked_and_others_are_not():
    assert engine_full(full_error("vision/a:1"))
    assert not engine_full(BuildError("building vision/a:1 failed: pip: no matching distribution"))
    assert not engine_full(ValueError("no space left on device"))


def test_without_reclaim_the_first_full_disk_ends_the_building(run):
    reports, calls, disk, _, _ = run([full_error("vision/a:1")])
    assert calls == ["a"]  # b and c are never tried: each would download gigabytes to fail the same way
    a, b, c = reports
    assert (a.build, a.status) == ("failed", "failed")
    assert a.reasons[0].startswith("building vision/a:1 failed: the engine ran out of disk space (")
    for r in (b, c):
        assert (r.build, r.status) == ("not built", "failed")
        assert r.reasons == [
            "not built: the engine's disk filled up building a in this run; free space on it (`envkit gc --dry-run` "
            "shows what gc would remove; `envkit nightly --gc` runs it) and run the nightly again: it rebuilds "
            "only what is missing"]
    assert disk.full == "a" and disk.reclaimed is None
    assert _exit_code(reports) == BUILD_FAILED


def test_reclaim_that_removes_something_gives_the_build_one_more_try(run):
    asked = []

    def reclaim(tags):
        asked.append(tags)
        return {"removed": ["sha256:old1", "sha256:old2"], "removed_containers": []}

    reports, calls, disk, messages, tags = run([full_error("vision/a:1"), None, None, None], reclaim)
    assert calls == ["a", "a", "b", "c"]
    assert asked == [tags]  # the lock's tags: gc keeps whichever of them exist
    assert [r.build for r in reports] == ["built", "built", "built"]
    assert reports[0].notes == [
        "the engine's disk filled up (building vision/a:1 failed: the engine ran out of disk space (its data root "
        "/nonexistent/docker is not on this host; its images hold 5.0 GiB)); gc removed 2 image(s), and the build "
        "was tried again"]
    assert reports[0].reasons == [] and disk.full is None
    assert "[a] the engine's disk is full: running gc for the team now, then building it again" in messages


def test_reclaim_runs_once_a_run_and_a_second_full_disk_stops_the_building(run):
    reclaims = []
    reports, calls, disk, _, _ = run([full_error("vision/a:1"), None, full_error("vision/b:1")],
                                     lambda tags: reclaims.append(tags) or {"removed": ["sha256:old"]})
    assert len(reclaims) == 1 and calls == ["a", "a", "b"]
    assert [r.build for r in reports] == ["built", "failed", "not built"]
    assert reports[2].reasons[0].startswith("not built: the engine's disk filled up building b in this run and gc "
                                            "could not make room; ")


def test_reclaim_that_removes_nothing_is_not_followed_by_a_retry(run):
    reports, calls, disk, _, _ = run([full_error("vision/a:1")], lambda tags: {"removed": [], "removed_containers": []})
    assert calls == ["a"]
    assert [r.build for r in reports] == ["failed", "not built", "not built"]
    assert disk.reclaimed == {"removed": [], "removed_containers": []}


def test_a_gc_that_fails_is_not_followed_by_a_retry(run):
    reports, calls, _, _, _ = run([full_error("vision/a:1")], lambda tags: {"error": {"message": "store locked"}})
    assert calls == ["a"] and [r.build for r in reports] == ["failed", "not built", "not built"]


def test_another_build_failure_does_not_stop_the_others(run):
    reports, calls, disk, _, _ = run([BuildError("building vision/a:1 failed: pip: no matching distribution"),
                                      None, None], lambda tags: pytest.fail("gc ran for a build that did not fill the disk"))
    assert calls == ["a", "b", "c"]
    assert [r.build for r in reports] == ["failed", "built", "built"]
    assert disk.full is None


def test_images_already_built_are_kept_when_the_disk_is_full(tmp_path, monkeypatch):
    """An image whose build the store knows is skipped (and certified later), full disk or not."""
    from envkit.app import nightly

    lock = make_lock(*(make_image(n) for n in ("a", "b")))
    engine = Engine(lock.images[0].base.ref)
    tag_b = image_tag(lock.team, lock.images[1])
    engine.images[tag_b] = ImageInfo("sha256:b", (tag_b,), 10, {CONTEXT_LABEL: "ctx"}, {}, "")
    monkeypatch.setattr(nightly, "build_image", lambda *a, **k: (_ for _ in ()).throw(full_error("vision/a:1")))
    disk = Disk()
    with Store.open(tmp_path / "kept.sqlite") as store:
        store.record_build("b", lock.images[1].hash, "ctx", tag=tag_b, image_id="sha256:b", size=10, seconds=1.0)
        run_id = store.start_run("sha256:spec")
        ra, rb = ImageReport("a", image_tag(lock.team, lock.images[0])), ImageReport("b", tag_b)
        assert _build(engine, store, run_id, lock, lock.images[0], "team.yaml", None, ra, print, "classic", disk) is None
        assert _build(engine, store, run_id, lock, lock.images[1], "team.yaml", None, rb, print, "classic",
                      disk).id == "sha256:b"
    assert (ra.build, rb.build) == ("failed", "skipped")
