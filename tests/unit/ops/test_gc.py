"""`envkit gc`: the keep/remove decision on fake image lists, the run against a fake engine and a real
(temporary) store, and the CLI. The real engine: tests/integration/test_gc.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from envkit.cli import main
from envkit.engine.docker_gc import parse_created
from envkit.errors import EngineError, EnvkitError, StoreError
from envkit.ops.gc_plan import CONTAINER_GRACE, STAGE_GRACE, Protection, decide, decide_containers, decide_stages
from envkit.engine.inventory import IDENTITY, Candidate, LeftContainer, Removal, StageImage, is_candidate, is_stage
from envkit.ops.gc import collect_garbage
from envkit.store.history import Store

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


@pytest.fixture(autouse=True)
def scratch_dir(tmp_path, monkeypatch):
    """gc also sweeps the temporary directory: here, a private one (never the host's /tmp)."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(path))
    return path


def labels(team="vision", image="torch", lock="l", ctx="c", **extra):
    return {"io.envkit.team": team, "io.envkit.image": image, "io.envkit.lock-hash": f"sha256:{lock}",
            "io.envkit.context-hash": f"sha256:{ctx}", **extra}


def img(n: int, team="vision", image="torch", tags=None, unique=1000, **kw) -> Candidate:
    """Image number n of a group: a larger n is newer."""
    return Candidate(id=f"sha256:{team}-{image}-{n:02d}", tags=tuple(tags if tags is not None else [f"{team}/{image}:v{n}"]),
                     digests=(), labels=labels(team, image, lock=str(n)), created=T0 + timedelta(hours=n),
                     size=5_000_000_000, unique_size=unique, **kw)


def kept(decisions) -> dict[str, tuple[str, ...]]:
    return {d.image.id.split(":", 1)[1]: d.reasons for d in decisions if d.keep}


def removed(decisions) -> list[str]:
    return sorted(d.image.id.split(":", 1)[1] for d in decisions if not d.keep)


def test_keeps_the_n_newest_per_team_and_image_by_creation_time():
    images = [img(n) for n in (3, 1, 4, 2)] + [img(1, image="jax"), img(1, team="nlp"), img(2, team="nlp")]
    d = decide(images, Protection(), keep=2)
    assert removed(d) == ["vision-torch-01", "vision-torch-02"]
    assert kept(d)["vision-torch-04"] == ("one of the 2 newest builds of vision/torch",)
    assert {"vision-jax-01", "nlp-torch-01", "nlp-torch-02"} <= set(kept(d))
    assert removed(decide(images, Protection(), keep=1)) == ["nlp-torch-01", "vision-torch-01", "vision-torch-02",
                                                             "vision-torch-03"]
    assert decide(images, Protection(), keep=10) and not removed(decide(images, Protection(), keep=10))



def test_what_the_caller_needs_stays_whatever_its_age():  # envkit nightly --gc: the lock it ran
    images = [img(n) for n in (1, 2, 3)]
    d = decide(images, Protection(caller={"sha256:vision-torch-01": "the build of the lock this nightly ran"}), keep=1)
    assert removed(d) == ["vision-torch-02"]
    assert kept(d)["vision-torch-01"] == ("the build of the lock this nightly ran",)

def test_untagged_builds_count_by_age_like_any_other():
    images = [img(1), img(2, tags=[]), img(3)]
    d = decide(images, Protection(), keep=2)
    assert removed(d) == ["vision-torch-01"]
    assert [x.image.name for x in d][1] == "sha256:vision-torch (untagged)"  # the id's first 19 characters


def test_the_newest_certified_image_per_gpu_model_is_kept_not_older_ones():
    images = [img(n) for n in range(1, 7)]
    certified = {"sha256:vision-torch-01": ("NVIDIA H200",),  # older than 02 on the same model: not kept for it
                 "sha256:vision-torch-02": ("nvidia h200", "NVIDIA A100"),
                 "sha256:vision-torch-03": ("NVIDIA H100",)}
    d = decide(images, Protection(certified=certified), keep=2)
    assert removed(d) == ["vision-torch-01", "vision-torch-04"]
    assert kept(d)["vision-torch-02"] == ("the newest image of vision/torch certified on nvidia h200, NVIDIA A100",)
    assert kept(d)["vision-torch-03"] == ("the newest image of vision/torch certified on NVIDIA H100",)


def test_certified_in_another_group_does_not_keep_this_one():
    images = [img(1), img(2), img(3), img(1, image="jax")]
    d = decide(images, Protection(certified={"sha256:vision-jax-01": ("NVIDIA H200",)}), keep=2)
    assert removed(d) == ["vision-torch-01"]


def test_containers_current_certified_refs_local_certified_tags_and_children_keep_images():
    images = [img(1, tags=["vision/torch:v1", "reg:5000/vision/torch:certified"]), img(2), img(3), img(4), img(5),
              img(6), img(7)]
    protection = Protection(current_certified={"sha256:vision-torch-02": ("reg:5000/vision/torch:certified",)},
                            containers={"sha256:vision-torch-03": ("job (exited)", "x (running)")},
                            children={"sha256:vision-torch-04": 2})
    d = decide(images, protection, keep=2)
    assert removed(d) == ["vision-torch-05"]
    assert kept(d)["vision-torch-01"] == ("tagged reg:5000/vision/torch:certified here",)
    assert kept(d)["vision-torch-02"] == ("the store's current reg:5000/vision/torch:certified",)
    assert kept(d)["vision-torch-03"] == ("used by container job (exited)", "used by container x (running)")
    assert kept(d)["vision-torch-04"] == ("2 other image(s) are built on it",)
    [gone] = [x for x in d if not x.keep]
    assert "older than the 2 newest builds of vision/torch" in gone.reasons[0]


@pytest.mark.parametrize("lbl, tags, ok", [
    (labels(), ["vision/torch:v1"], True),
    (labels(), [], True),
    ({k: v for k, v in labels().items() if k != "io.envkit.context-hash"}, ["x/y:1"], False),  # a step image
    ({k: v for k, v in labels().items() if k != "io.envkit.team"}, ["x/y:1"], False),
    (dict(labels(), **{"io.envkit.team": ""}), ["x/y:1"], False),
    ({"io.envkit.base-recipe": "bookworm minbase"}, ["envkit-base/debian:bookworm-minbase-e70052fe766d"], False),
    (labels(), ["envkit-base/debian:bookworm"], False),  # a base is never a candidate, whatever its labels
    ({}, ["postgres:16"], False),
    (None, [], False),
])
def test_only_images_with_all_four_build_labels_and_no_base_tag_are_candidates(lbl, tags, ok):
    assert is_candidate(lbl, tags) is ok


def test_decide_refuses_a_list_with_a_foreign_image():
    foreign = Candidate("sha256:f", ("postgres:16",), (), {}, T0, 1)
    with pytest.raises(EnvkitError, match="not an envkit build"):
        decide([img(1), foreign], Protection(), keep=2)


@pytest.mark.parametrize("keep", [0, -1])
def test_keep_below_one_is_refused(keep):
    with pytest.raises(EnvkitError, match="at least the newest build") as e:
        decide([img(1)], Protection(), keep=keep)
    assert "--keep 1 or more" in e.value.hint


def test_parse_created_keeps_order_below_the_second():
    a, b = parse_created("2026-12-03T10:05:42.563498639Z"), parse_created("2026-12-03T10:05:42.5635Z")
    assert a < b and a.tzinfo is not None
    assert parse_created("2026-12-03T12:05:42+02:00") == parse_created("2026-12-03T10:05:42Z")
    with pytest.raises(EnvkitError, match="creation time"):
        parse_created("yesterday")


# --- the run: a fake engine, a real (temporary) store -------------------------------------------

def engine_of(host: "FakeHost") -> object:
    """An engine whose ``image_host()`` (what gc asks of the engine) is ``host``."""
    return type("E", (), {"image_host": lambda self: host})()


class FakeHost:
    """The engine as gc sees it; its layer total is the sum of its images' unique sizes."""

    def __init__(self, images, containers=None, fail=(), stages=(), left=()):
        self.images = {i.id: i for i in (*images, *stages)}
        self.using = dict(containers or {})
        self.left = {c.id: c for c in left}  # stopped envkit containers; each also uses its image
        self.fail = set(fail)
        self.removed: list[str] = []
        self.teams_asked: list[str | None] = []

    def envkit_images(self, team):
        self.teams_asked.append(team)
        return [i for i in self.images.values() if isinstance(i, Candidate) and (team is None or i.team == team)]

    def stage_images(self, team):
        return [i for i in self.images.values() if isinstance(i, StageImage) and (team is None or i.team == team)]

    def layers_size(self, fresh=True):
        return sum(i.unique_size or 0 for i in self.images.values())

    def containers(self, skip=()):
        using = {k: list(v) for k, v in self.using.items()}
        for c in self.left.values():
            if c.id not in skip:
                using.setdefault(c.image_id, []).append(f"{c.name} ({c.state})")
        return {k: tuple(v) for k, v in using.items()}

    def leftover_containers(self, team):
        return [c for c in self.left.values() if team is None or c.team == team]

    def remove_container(self, container):
        if container.id in self.fail:
            return "conflict: container is running"
        del self.left[container.id]
        return None

    def children(self, ids):
        return {}

    def remove(self, image):
        if image.id in self.fail:
            return Removal(untagged=image.tags[:1], error="conflict: unable to delete (cannot be forced)")
        self.removed.append(image.id)
        del self.images[image.id]
        return Removal(untagged=image.tags, deleted=(image.id,))


@pytest.fixture
def store_path(tmp_path):
    clock = iter(f"2026-12-{d:02d}T00:00:00Z" for d in range(1, 29))  # (the migrations take one each first)
    path = tmp_path / "history.sqlite"
    with Store.open(path, clock=lambda: next(clock)) as store:
        store.record_certificate("sha256:vision-torch-01", "NVIDIA H200", "570", status="certified", lock_hash="1",
                                 document={})  # 12-01
        store.record_certificate("sha256:vision-torch-02", "NVIDIA H200", "570", status="certified", lock_hash="2",
                                 document={})  # 12-02
        store.record_certificate("sha256:vision-torch-02", "NVIDIA H200", "575", status="failed", lock_hash="2",
                                 document={})  # 12-03: 02's newest on H200 failed, so 01 is the newest certified
        store.record_push("sha256:vision-torch-03", "reg/vision/torch:certified", "sha256:d3", "certified")  # 12-04
        store.record_push("sha256:vision-torch-04", "reg/vision/torch:certified", "sha256:d4", "certified")  # 12-05
        store.record_push("sha256:vision-torch-05", "reg/vision/torch:v5", "sha256:d5", "stack")  # 12-06
    return path


@pytest.fixture
def empty_store(tmp_path):
    """A history store with nothing in it (a named store must exist: gc refuses a mistyped path)."""
    path = tmp_path / "empty.sqlite"
    Store.open(path).close()
    return str(path)


def test_a_named_store_that_does_not_exist_is_refused_not_read_as_empty(tmp_path):
    """A typo in --store must not make gc forget every certificate it protects."""
    host = FakeHost([img(n) for n in range(1, 9)])
    with pytest.raises(StoreError) as err:
        collect_garbage(host, str(tmp_path / "typo.sqlite"), team="vision", keep=2)
    assert err.value.message == f"no history store at {tmp_path / 'typo.sqlite'}"
    assert not (tmp_path / "typo.sqlite").exists() and host.removed == []


def test_store_certificates_and_pushes_keep_what_they_should(store_path):
    host = FakeHost([img(n) for n in range(1, 9)])
    result = collect_garbage(host, str(store_path), team="vision", keep=2)
    reasons = {d.image.id[-2:]: d.reasons for d in result.decisions if d.keep}
    assert reasons["01"] == ("the newest image of vision/torch certified on NVIDIA H200",)
    assert reasons["04"] == ("the store's current reg/vision/torch:certified",)
    assert set(reasons) == {"01", "04", "07", "08"}
    assert sorted(i[-2:] for i in host.removed) == ["02", "03", "05", "06"]
    assert result.reclaimed() == (4000, True)
    assert result.store == str(store_path)


def test_dry_run_removes_nothing_and_a_second_run_is_a_no_op(store_path):
    host = FakeHost([img(n) for n in range(1, 5)])
    plan = collect_garbage(host, str(store_path), keep=2, dry_run=True)
    assert host.removed == [] and len(plan.to_remove) == 1 and plan.reclaimed() == (1000, True)
    doc = plan.to_json()
    assert doc["would_remove"] == ["sha256:vision-torch-02"] and doc["removed"] == []
    first = collect_garbage(host, str(store_path), keep=2)
    assert [d.image.id for d in first.removed] == ["sha256:vision-torch-02"]
    second = collect_garbage(host, str(store_path), keep=2)
    assert second.to_remove == [] and second.removals == {} and second.reclaimed() == (0, True)


def test_an_image_another_gc_removed_meanwhile_is_not_counted_as_removed(store_path):
    """Two gc runs at once each planned the same images; the one that found them gone counted them (and their
    bytes) as its own."""
    host = FakeHost([img(n) for n in range(1, 5)])
    host.remove = lambda image: Removal(gone=True)  # the engine no longer has it
    result = collect_garbage(host, str(store_path), keep=2)
    assert len(result.to_remove) == 1 and result.removed == [] and result.failed == []
    assert result.reclaimed() == (0, True) and result.to_json()["removed"] == []


def test_the_engine_host_says_gone_only_when_nothing_of_the_image_was_left():
    import docker

    from envkit.engine.docker_gc import DockerImageHost

    class Api:
        def __init__(self, present):
            self.present = set(present)

        def remove_image(self, ref, force, noprune):
            if ref not in self.present:
                raise docker.errors.ImageNotFound(f"No such image: {ref}")
            return [{"Untagged": ref}] if ":" in ref and not ref.startswith("sha256:") else [{"Deleted": ref}]

    class Client:
        def __init__(self, present):
            self.api = Api(present)

    image = img(2)
    assert DockerImageHost(Client(())).remove(image).gone
    kept = DockerImageHost(Client((image.id,))).remove(image)
    assert not kept.gone and kept.deleted == (image.id,)


def test_the_team_is_passed_to_the_engine_and_other_teams_are_never_removed(store_path):
    host = FakeHost([img(n) for n in range(1, 5)] + [img(n, team="nlp") for n in range(1, 5)])
    collect_garbage(host, str(store_path), team="nlp", keep=1)
    assert host.teams_asked == ["nlp"]
    assert sorted(host.removed) == ["sha256:nlp-torch-01", "sha256:nlp-torch-02", "sha256:nlp-torch-03"]


def test_a_container_started_since_the_listing_stops_that_removal(empty_store):
    class LateContainer(FakeHost):
        calls = 0

        def containers(self, skip=()):
            self.calls += 1
            return {} if self.calls == 1 else {"sha256:vision-torch-01": ("late (running)",)}

    host = LateContainer([img(n) for n in range(1, 4)])
    result = collect_garbage(host, str(empty_store), team="vision", keep=2)
    assert host.removed == [] and [d.image.id for d in result.failed] == ["sha256:vision-torch-01"]
    assert "late (running)" in result.removals["sha256:vision-torch-01"].error


def test_without_unique_sizes_the_bytes_are_an_upper_bound(empty_store):
    host = FakeHost([img(1, unique=None), img(2), img(3)])
    result = collect_garbage(host, str(empty_store), keep=2)
    assert result.reclaimed() == (5_000_000_000, False)
    assert result.to_json()["reclaimed_basis"].startswith("upper bound")
    assert any("upper bound" in n for n in result.notes)


def test_no_store_here_is_said_and_none_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVKIT_STORE", raising=False)
    result = collect_garbage(FakeHost([img(1), img(2), img(3)]), None, keep=2, dry_run=True)
    assert result.store is None and "no history store here" in result.notes[0]
    assert any("docker builder prune" in n for n in result.notes)
    assert not (tmp_path / ".envkit").exists()


# --- stage images ---------------------------------------------------------------------------------

NOW = T0 + timedelta(days=2)


def stage(n: int, name="extras", team="vision", image="torch", age=timedelta(days=1), unique=7000, **kw) -> StageImage:
    """The `name` stage image of build n of a group (the lock of img(n))."""
    lbl = {"io.envkit.stage": name, "io.envkit.team": team, "io.envkit.image": image,
           "io.envkit.lock-hash": f"sha256:{n}"}
    return StageImage(id=f"sha256:stage-{name}-{team}-{image}-{n:02d}", tags=kw.pop("tags", ()), digests=(),
                      labels=lbl, created=NOW - age, size=9_000_000_000, unique_size=unique, **kw)


def test_a_stage_image_stays_with_a_staying_build_of_its_lock_and_goes_with_the_last_one():
    builds = [img(n) for n in range(1, 5)]
    kept_builds = [d.image for d in decide(builds, Protection(), keep=2) if d.keep]  # 03, 04
    stages = [stage(n) for n in range(1, 5)] + [stage(4, "nvcc"), stage(9)]  # 9: a build that never finished
    d = {x.image.id.split(":")[1]: x for x in decide_stages(stages, kept_builds, Protection(), NOW)}
    assert {k for k, x in d.items() if x.keep} == {"stage-extras-vision-torch-03", "stage-extras-vision-torch-04",
                                                    "stage-nvcc-vision-torch-04"}
    assert d["stage-extras-vision-torch-04"].reasons == ("its build of vision/torch (lock sha256:4) stays",)
    assert "no build of vision/torch with lock sha256:9 stays here" in d["stage-extras-vision-torch-09"].reasons[0]


def test_the_same_lock_in_another_team_or_image_does_not_keep_a_stage():
    kept_builds = [img(1, team="nlp"), img(1, image="jax")]
    decisions = decide_stages([stage(1)], kept_builds, Protection(), NOW)
    assert [x.keep for x in decisions] == [False]


def test_a_young_stage_a_tagged_one_and_one_in_use_stay():
    young = stage(1, age=STAGE_GRACE - timedelta(minutes=5))
    tagged = stage(2, tags=("mine:debug",))
    used, parent = stage(3), stage(4)
    protection = Protection(containers={used.id: ("dbg (exited)",)}, children={parent.id: 1})
    d = {x.image.id: x for x in decide_stages([young, tagged, used, parent, stage(5)], [], protection, NOW)}
    assert d[young.id].keep and "made 55 min ago, under 1 h: a build may still be using it" in d[young.id].reasons
    assert d[tagged.id].reasons == ("tagged mine:debug here",)
    assert d[used.id].reasons == ("used by container dbg (exited)",)
    assert d[parent.id].reasons == ("1 other image(s) are built on it",)
    assert [x.keep for x in d.values()].count(False) == 1


def test_only_labelled_stages_that_are_not_builds_are_stages():
    assert is_stage(stage(1).labels)
    assert not is_stage({**stage(1).labels, "io.envkit.context-hash": "sha256:c"})  # a final image: never a stage
    assert not is_stage({k: v for k, v in stage(1).labels.items() if k != "io.envkit.lock-hash"})
    assert not is_candidate(stage(1).labels, ())
    with pytest.raises(EnvkitError, match="stage labels"):
        decide_stages([StageImage("sha256:x", (), (), {}, NOW, 1)], [], Protection(), NOW)


def test_gc_removes_old_builds_then_their_stages_and_measures_the_engine(empty_store):
    host = FakeHost([img(n) for n in range(1, 4)], stages=[stage(n) for n in range(1, 4)] + [stage(7, age=timedelta(0))])
    result = collect_garbage(host, empty_store, keep=2, now=NOW)
    assert host.removed == ["sha256:vision-torch-01", "sha256:stage-extras-vision-torch-01"]  # the build first
    assert result.reclaimed() == (8000, True)
    doc = result.to_json()
    assert doc["removed"] == host.removed
    assert [s["id"] for s in doc["stages"] if not s["keep"]] == ["sha256:stage-extras-vision-torch-01"]
    assert doc["stages"][0]["stage"] == "extras" and doc["stages"][0]["lock_hash"].startswith("sha256:")
    assert doc["engine_layers_bytes"] == {"before": 31000, "after": 23000, "freed": 8000}
    again = collect_garbage(host, empty_store, keep=2, now=NOW)
    assert again.to_remove == [] and again.layers is None


def test_cli_human_lists_stage_images_and_the_measured_layers(monkeypatch, empty_store):
    host = FakeHost([img(1), img(2)], stages=[stage(1), stage(2)])
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine_of(host))
    result = CliRunner().invoke(main, ["gc", "--keep", "1", "--store", empty_store])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "removed  sha256:stage-extras (stage extras of vision/torch)  2026-12-02 00:00  7.00 kB" in out
    assert ("every envkit team on this host: removed 2 of 4 image(s) (2 build(s), 2 stage image(s)), "
            "reclaimed 8.00 kB") in out
    assert "the engine's image layers: 16.00 kB -> 8.00 kB (8.00 kB freed)" in out


# --- the CLI ---------------------------------------------------------------------------------------

@pytest.fixture
def fake_engine(monkeypatch):
    host = FakeHost([img(n) for n in range(1, 5)], fail={"sha256:vision-torch-01"})
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine_of(host))
    return host


def test_cli_json_document_and_failed_removal_exit_code(fake_engine, empty_store):
    result = CliRunner().invoke(main, ["gc", "--team", "vision", "--store", str(empty_store), "--json"])
    assert result.exit_code == 6, result.output
    doc = json.loads(result.stdout)
    assert doc["removed"] == ["sha256:vision-torch-02"] and doc["failed"][0]["id"] == "sha256:vision-torch-01"
    assert doc["kept"] == ["sha256:vision-torch-04", "sha256:vision-torch-03"]
    assert doc["reclaimed_bytes"] == 1000 and doc["reclaimed_basis"] == "unique sizes"
    assert {i["id"]: i["keep"] for i in doc["images"]}["sha256:vision-torch-02"] is False
    assert any("docker builder prune" in n for n in doc["notes"])


def test_cli_human_dry_run(fake_engine, empty_store):
    result = CliRunner().invoke(main, ["gc", "--dry-run", "--store", str(empty_store)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "would remove  vision/torch:v1" in out and "keep          vision/torch:v4" in out
    assert ("dry run (every envkit team on this host): would remove 2 of 4 image(s) (4 build(s), 0 stage image(s)), "
            "reclaiming 2.00 kB") in out
    assert "docker builder prune" in result.stderr and fake_engine.removed == []


def test_cli_bad_keep_exits_with_a_hint(fake_engine):
    result = CliRunner().invoke(main, ["gc", "--keep", "0", "--json"])
    assert result.exit_code == 2  # a usage error, as every other bad argument
    doc = json.loads(result.stdout)
    assert doc["error"] == "UsageError" and doc["message"] == "Invalid value for '--keep': 0 is not in the range x>=1."


def test_engine_unreachable_is_exit_6(monkeypatch):
    from envkit.errors import EngineError

    def refuse():
        raise EngineError("no container engine is reachable: refused", hint="start one")

    monkeypatch.setattr("envkit.engine.docker_engine.connect", refuse)
    result = CliRunner().invoke(main, ["gc", "--dry-run"])
    assert result.exit_code == 6 and "no container engine is reachable" in result.stderr


def test_module_constants_name_the_labels_render_writes():
    from envkit.support.labels import CONTEXT_LABEL, LOCK_LABEL
    assert IDENTITY == ("io.envkit.team", "io.envkit.image", LOCK_LABEL, CONTEXT_LABEL)


# --- the stopped containers a killed envkit left -------------------------------------------------

def left(n: int, image: Candidate, ended: datetime, state="exited", role="certify") -> LeftContainer:
    return LeftContainer(id=f"c{n:02d}", name=f"box{n}", role=role, state=state, image=image.tags[0],
                         image_id=image.id, ended=ended, team=image.team)


def test_a_stopped_envkit_container_goes_after_the_grace_a_recent_one_stays():
    now = T0 + timedelta(days=1)
    old, recent = left(1, img(1), now - CONTAINER_GRACE - timedelta(seconds=1)), left(2, img(1), now - timedelta(minutes=3))
    d = {x.container.id: x for x in decide_containers([recent, old], now)}
    assert not d["c01"].keep and "was stopped before it could" in d["c01"].reasons[0]
    assert d["c02"].keep and d["c02"].reasons == ("stopped 3 min ago, under 10 min: the envkit that started it may "
                                                  "still be reading its output",)
    with pytest.raises(EnvkitError, match="box1 is running"):
        decide_containers([left(1, img(1), now, state="running")], now)


def test_gc_removes_leftover_containers_first_so_their_images_are_no_longer_kept(empty_store):
    now = T0 + timedelta(days=1)
    images = [img(n) for n in (1, 2, 3)]
    host = FakeHost(images, left=[left(1, images[0], now - timedelta(hours=2)),  # goes, and frees image 1
                                  left(2, images[0], now - timedelta(minutes=1), state="created")])  # stays
    planned = collect_garbage(host, str(empty_store), keep=2, dry_run=True, now=now)
    # a dry run plans as if the old container were gone: image 1 is held only by the recent one
    assert kept(planned.decisions)["vision-torch-01"] == ("used by container box2 (created)",)
    assert planned.to_json()["would_remove_containers"] == ["c01"] and set(host.left) == {"c01", "c02"}

    host.left["c02"] = left(2, images[0], now - timedelta(hours=1), state="created")
    result = collect_garbage(host, str(empty_store), keep=2, now=now)
    assert host.left == {} and host.removed == ["sha256:vision-torch-01"]
    doc = result.to_json()
    assert doc["removed_containers"] == ["c01", "c02"] and doc["failed_containers"] == []
    assert doc["containers"][0] | {"reasons": None} == {
        "id": "c01", "name": "box1", "role": "certify", "state": "exited", "image": "vision/torch:v1",
        "image_id": "sha256:vision-torch-01", "ended": (now - timedelta(hours=2)).isoformat(), "team": "vision",
        "keep": False, "reasons": None, "removed": True, "error": None}


def test_a_container_that_cannot_be_removed_keeps_its_image_and_fails_the_run(empty_store, monkeypatch):
    now = T0 + timedelta(days=1)
    images = [img(n) for n in (1, 2, 3)]
    host = FakeHost(images, fail={"c01"}, left=[left(1, images[0], now - timedelta(hours=2))])
    result = collect_garbage(host, str(empty_store), keep=2, now=now)
    assert [d.container.id for d in result.failed_containers] == ["c01"] and host.removed == []
    assert "box1 (exited)" in result.removals["sha256:vision-torch-01"].error  # the re-check saw it still there


def test_team_scopes_the_containers_too(empty_store):
    now = T0 + timedelta(days=1)
    mine, theirs = img(1), img(1, team="nlp")
    host = FakeHost([mine, theirs], left=[left(1, mine, now - timedelta(hours=2)), left(2, theirs, now - timedelta(hours=2))])
    collect_garbage(host, str(empty_store), team="nlp", keep=2, now=now)
    assert set(host.left) == {"c01"}


def test_cli_reports_removed_containers_and_exits_6_when_one_fails(monkeypatch, empty_store):
    now = datetime.now(timezone.utc)
    images = [img(n) for n in (1, 2, 3)]
    host = FakeHost(images, fail={"c02"}, left=[left(1, images[0], now - timedelta(hours=2)),
                                                left(2, images[1], now - timedelta(hours=3), role="fetch-debs")])
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine_of(host))
    out = CliRunner().invoke(main, ["gc", "--store", str(empty_store)])
    assert out.exit_code == 6, out.output
    rows = [" ".join(line.split()) for line in out.stdout.splitlines() if " container box" in line]
    assert rows[0].startswith("FAILED container box2 (fetch-debs, exited) ")  # the oldest first
    assert rows[0].endswith("- not removed: conflict: container is running")
    assert rows[1].startswith("removed container box1 (certify, exited) ")
    assert "removed 1 stopped container(s) a killed envkit left; 1 could not be removed" in out.output


# --- the scratch directories a killed envkit left -------------------------------------------------

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _scratch(root, kind, pid, size=0):
    path = root / f"envkit-{kind}-{socket.gethostname()}-{pid}-x1y2z3"
    path.mkdir()
    (path / "data").write_bytes(b"0" * size)
    return path


def test_gc_removes_the_scratch_directories_of_envkits_that_are_gone_whatever_the_team(scratch_dir, empty_store):
    dead = _dead_pid()
    ctx, secrets = _scratch(scratch_dir, "ctx-train", dead, 5000), _scratch(scratch_dir, "secrets", dead, 40)
    live = _scratch(scratch_dir, "verify", os.getpid())  # this process is running: in use
    planned = collect_garbage(FakeHost([]), empty_store, team="nlp", dry_run=True)
    assert planned.to_json()["would_remove_scratch"] == sorted([str(ctx), str(secrets)])
    assert ctx.exists() and secrets.exists()

    result = collect_garbage(FakeHost([]), empty_store, team="nlp")
    assert sorted(scratch_dir.iterdir()) == [live]
    doc = result.to_json()
    assert doc["removed_scratch"] == sorted([str(ctx), str(secrets)]) and doc["failed_scratch"] == []
    assert {d["kind"]: (d["bytes"], d["removed"]) for d in doc["scratch"]} == {"ctx-train": (5000, True),
                                                                               "secrets": (40, True)}


def test_a_scratch_directory_that_cannot_go_is_reported_and_fails_the_cli(scratch_dir, empty_store, monkeypatch):
    rootfs = _scratch(scratch_dir, "rootfs", _dead_pid(), 10)

    def still_mounted(path, strict=True):
        raise EngineError(f"{path}/rootfs/proc is still mounted inside envkit's scratch directory {path}",
                          hint=f"umount {path}/rootfs/proc, then rm -rf {path}")

    monkeypatch.setattr("envkit.support.scratch.remove", still_mounted)
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine_of(FakeHost([])))
    out = CliRunner().invoke(main, ["gc", "--store", empty_store])
    assert out.exit_code == 6, out.output
    row = " ".join(next(line for line in out.stdout.splitlines() if "directory" in line).split())
    assert row.startswith(f"FAILED directory {rootfs} - 10 B not removed: {rootfs}/rootfs/proc is still mounted")
    assert "removed 0 scratch director(ies) a killed envkit left (10 B); 1 could not be removed" in out.output
    doc = json.loads(CliRunner().invoke(main, ["gc", "--store", empty_store, "--json"]).stdout)
    assert doc["failed_scratch"] == [{"path": str(rootfs), "error": f"{rootfs}/rootfs/proc is still mounted inside "
                                      f"envkit's scratch directory {rootfs} (umount {rootfs}/rootfs/proc, then rm -rf {rootfs})"}]



@pytest.mark.parametrize("team", ["BAD TEAM/../x", "Vision", "a/b"])
def test_a_team_that_is_no_team_name_is_refused_not_an_empty_success(empty_store, team):
    with pytest.raises(EnvkitError, match="is not a team name"):
        collect_garbage(FakeHost([]), empty_store, team=team, dry_run=True)


@pytest.mark.parametrize("team, why", [("Bad Team", "is not a team name"), ("", "the team is empty")])
def test_gc_team_is_checked_as_the_command_line_is_read(team, why):
    result = CliRunner().invoke(main, ["gc", "--dry-run", "--team", team, "--json"])
    assert result.exit_code == 2  # a usage error, before the engine is asked
    doc = json.loads(result.stdout)
    assert doc["error"] == "UsageError" and why in doc["message"]
