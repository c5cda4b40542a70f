"""`envkit gc --build-cache`: the plan for BuildKit's build cache records (pure), the run against a fake
engine whose images share records until they go, and the CLI option. The real engine, a BuildKit cache on
a small disk: tests/integration/test_build_host_failures.py."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from envkit.cli import main
from envkit.errors import EngineError
from envkit.ops.gc_plan import BUILD_CACHE_NOTE, CacheCutoff, decide_build_cache
from envkit.engine.inventory import CacheRecord
from envkit.ops.gc import collect_garbage
# (fixtures: a store, a private $TMPDIR)
from tests.unit.ops.test_gc import FakeHost, empty_store, engine_of, img, scratch_dir  # noqa: F401

NOW = datetime(2026, 12, 4, 12, tzinfo=timezone.utc)
CUTOFF = CacheCutoff(NOW - timedelta(hours=24), "24 h ago")


def rec(name, kind="regular", size=100, used_hours_ago=48.0, in_use=False, shared=False) -> CacheRecord:
    return CacheRecord(id=name, kind=kind, description=f"{kind} {name}", size=size, in_use=in_use, shared=shared,
                       last_used=None if used_hours_ago is None else NOW - timedelta(hours=used_hours_ago))


def test_the_plan_prunes_what_the_engine_would_and_says_why_the_rest_stays():
    records = [rec("old", size=300), rec("mount", kind="exec.cachemount", size=500), rec("never", used_hours_ago=None),
               rec("busy", in_use=True), rec("layer", shared=True, size=900), rec("fe", kind="frontend"),
               rec("recent", used_hours_ago=2)]
    plan = {d.record.id: d for d in decide_build_cache(records, CUTOFF.since, CUTOFF.what)}
    assert {k for k, d in plan.items() if not d.keep} == {"old", "mount", "never"}
    assert plan["busy"].reasons == ("a build is using it now",)
    assert plan["layer"].reasons == ("it holds a layer of an image still here (pruning it would free nothing)",)
    assert plan["fe"].reasons == ("BuildKit's own (frontend)",)
    assert plan["recent"].reasons == ("used since 24 h ago",)
    assert plan["old"].reasons == ("last used 2026-12-02 12:00, before 24 h ago; no build uses it and no image shares it",)
    assert plan["never"].reasons[0].startswith("never used, before 24 h ago")
    ordered = [d.record.id for d in decide_build_cache(records, CUTOFF.since, CUTOFF.what)]
    assert ordered[:2] == ["layer", "mount"]  # largest first


def test_used_exactly_at_the_cutoff_is_kept():
    d, = decide_build_cache([rec("edge", used_hours_ago=24)], CUTOFF.since, CUTOFF.what)
    assert d.keep


class CacheHost(FakeHost):
    """A fake engine with a build cache: each image's layer is a record it shares until the image goes."""

    def __init__(self, images, records, fail_prune=False):
        super().__init__(images)
        self.records = {r.id: r for r in records}
        self.layer_of = {}  # image id -> the record holding its layer
        self.fail_prune = fail_prune
        self.fail_read = False
        self.pruned_since: list[datetime] = []
        self.reads = 0

    def share(self, image_id, record):
        self.layer_of[image_id] = record.id
        self.records[record.id] = record

    def build_cache(self):
        if self.fail_read:
            raise EngineError("cannot read the engine's disk usage: 500 Server Error", hint="is the engine healthy?")
        self.reads += 1
        here = {self.layer_of[i] for i in self.images if i in self.layer_of}
        return [CacheRecord(**{**r.__dict__, "shared": r.shared or r.id in here}) for r in self.records.values()]

    def prune_build_cache(self, unused_since):
        if self.fail_prune:
            raise EngineError("cannot prune BuildKit's build cache: the engine said no", hint="is the engine healthy?")
        self.pruned_since.append(unused_since)
        gone = [d.record for d in decide_build_cache(self.build_cache(), unused_since, "x") if not d.keep]
        for r in gone:
            del self.records[r.id]
        return tuple(r.id for r in gone), sum(r.size for r in gone)


def hosts():
    images = [img(n) for n in range(1, 4)]  # --keep 2 removes 01, whose layer record then stops being shared
    host = CacheHost(images, [rec("old", size=300), rec("recent", used_hours_ago=1)])
    host.share(images[0].id, rec("layer-01", size=4000, used_hours_ago=72))
    host.share(images[2].id, rec("layer-03", size=4000, used_hours_ago=72))
    return host


def test_the_cache_is_read_after_the_images_go_so_their_layers_are_pruned_too(empty_store):
    host = hosts()
    result = collect_garbage(host, empty_store, keep=2, build_cache=CUTOFF, now=NOW)
    assert [d.image.id[-2:] for d in result.removed] == ["01"]
    doc = result.to_json()["build_cache"]
    assert sorted(doc["pruned"]) == ["layer-01", "old"] and doc["freed_bytes"] == 4300 and doc["error"] is None
    assert doc["unused_since"] == CUTOFF.since.isoformat() and doc["since"] == "24 h ago"
    assert doc["kept"] == 2 and doc["would_prune"] == [] and host.pruned_since == [CUTOFF.since]
    assert set(host.records) == {"recent", "layer-03"}
    assert BUILD_CACHE_NOTE not in result.notes


def test_a_dry_run_prunes_nothing_and_says_the_real_run_may_prune_more(empty_store):
    host = hosts()
    result = collect_garbage(host, empty_store, keep=2, build_cache=CUTOFF, dry_run=True, now=NOW)
    doc = result.to_json()["build_cache"]
    assert doc["would_prune"] == ["old"] and doc["would_free_bytes"] == 300 and doc["pruned"] == []
    assert host.pruned_since == [] and len(host.records) == 4
    assert any("the real run may prune more" in n for n in result.notes)


def test_without_build_cache_the_cache_is_not_read_and_the_note_says_how(empty_store):
    host = hosts()
    result = collect_garbage(host, empty_store, keep=2, now=NOW)
    assert host.reads == 0 and result.to_json()["build_cache"] is None and BUILD_CACHE_NOTE in result.notes


def test_nothing_to_prune_asks_the_engine_for_nothing(empty_store):
    host = CacheHost([img(1)], [rec("recent", used_hours_ago=1)])
    result = collect_garbage(host, empty_store, keep=2, build_cache=CUTOFF, now=NOW)
    assert host.pruned_since == [] and result.to_json()["build_cache"]["pruned"] == []


def test_a_refused_prune_is_reported_and_the_images_removal_stands(empty_store):
    host = hosts()
    host.fail_prune = True
    result = collect_garbage(host, empty_store, keep=2, build_cache=CUTOFF, now=NOW)
    assert [d.image.id[-2:] for d in result.removed] == ["01"]
    assert result.cache_error == "cannot prune BuildKit's build cache: the engine said no (is the engine healthy?)"


@pytest.fixture
def cli_host(monkeypatch, empty_store):
    host = hosts()
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine_of(host))
    return host, empty_store


def test_the_cli_option_sets_the_cutoff_hours_back(cli_host):
    host, store = cli_host
    before = datetime.now(timezone.utc)
    result = CliRunner().invoke(main, ["gc", "--store", store, "--build-cache", "24", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["build_cache"]
    since = datetime.fromisoformat(doc["unused_since"])
    assert before - timedelta(hours=24) <= since <= datetime.now(timezone.utc) - timedelta(hours=24)
    assert doc["since"] == "24 h ago (--build-cache 24)"
    human = CliRunner().invoke(main, ["gc", "--store", store, "--build-cache", "0"])
    assert "BuildKit's build cache (" in human.output and "not used since now (--build-cache 0)" in human.output


def test_a_refused_prune_fails_the_command(cli_host):
    host, store = cli_host
    host.fail_prune = True
    result = CliRunner().invoke(main, ["gc", "--store", store, "--build-cache", "1"])
    assert result.exit_code == 6 and "the prune failed: cannot prune BuildKit's build cache" in result.output


def test_negative_hours_are_a_usage_error():
    assert CliRunner().invoke(main, ["gc", "--build-cache", "-1"]).exit_code == 2


def test_a_cache_that_cannot_be_read_keeps_the_images_removal_and_says_so(empty_store):
    """The images are gone by then: the result must still say so (and a nightly's reclaim still counts them)."""
    host = hosts()
    host.fail_read = True
    result = collect_garbage(host, empty_store, keep=2, build_cache=CUTOFF, now=NOW)
    doc = result.to_json()
    assert doc["removed"] == ["sha256:vision-torch-01"] and host.pruned_since == []
    assert doc["build_cache"]["error"] == "cannot read the engine's disk usage: 500 Server Error (is the engine healthy?)"
