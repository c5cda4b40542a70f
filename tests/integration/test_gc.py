"""`envkit gc` against the real engine, on tiny images of its own.

Each image is built FROM the smallest local envkit base with a Dockerfile of one RUN line (1 MB of
its own, so the engine's unique sizes are worth checking), under a team name made for this run
(`gctest-<uuid>`), so nothing else on the host is ever a candidate: every real run passes --team.
A temporary store holds a certificate and a :certified push for some of them; a container uses
another. The images are removed at the end, whatever gc did.
"""

from __future__ import annotations

import json
import re
import uuid
from itertools import count
from pathlib import Path

import docker.errors
import pytest

from envkit.support.labels import CONTEXT_LABEL, IMAGE_LABEL, LOCK_LABEL, TEAM_LABEL
from envkit.engine.inventory import IDENTITY
from envkit.store.history import Store
from tests.integration.conftest import envkit

TEAM = f"gctest-{uuid.uuid4().hex[:10]}"
OTHER = f"{TEAM}-other"  # a second team: never touched by gc --team TEAM
REGISTRY_REF = f"registry.invalid:5000/{TEAM}/tiny:certified"
ROOT = Path(__file__).resolve().parents[2]


def _build(engine, tmp_path, base, name, tag, labels):
    ctx = tmp_path / f"ctx-{name}"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {base}\nRUN echo {TEAM}-{name} > /gc-id && head -c 1000000 /dev/urandom > /blob\n")
    image_id = None
    for event in engine.build(ctx, tag, labels):
        if event.kind == "done":
            image_id = event.text
    info = engine.inspect(tag)
    assert info is not None and (image_id is None or info.id == image_id)
    return info.id


def _envkit_labels(team, image, n):
    return {TEAM_LABEL: team, IMAGE_LABEL: image, LOCK_LABEL: f"sha256:{n:064x}", CONTEXT_LABEL: f"sha256:{n + 1000:064x}"}


@pytest.fixture(scope="module")
def world(engine, dc, base, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gc")
    ids, tags, containers = {}, [], []
    n = count(1)

    def build(name, team, image, tag, labels=None):
        tags.append(tag)
        ids[name] = _build(engine, tmp, base, name, tag, _envkit_labels(team, image, next(n)) if labels is None else labels)
        return ids[name]

    try:
        # the group TEAM/tiny, oldest first
        build("dangling", TEAM, "tiny", f"{TEAM}/tiny:a")   # its tag moves to the next build: left untagged
        build("old", TEAM, "tiny", f"{TEAM}/tiny:a")
        dc.api.tag(ids["old"], f"{TEAM}/tiny", "old-extra")  # two tags: both must go
        tags.append(f"{TEAM}/tiny:old-extra")
        build("cert", TEAM, "tiny", f"{TEAM}/tiny:cert")
        build("pushed", TEAM, "tiny", f"{TEAM}/tiny:pushed")
        build("used", TEAM, "tiny", f"{TEAM}/tiny:used")
        build("n1", TEAM, "tiny", f"{TEAM}/tiny:n1")
        build("n2", TEAM, "tiny", f"{TEAM}/tiny:n2")
        for i in (1, 2, 3):
            build(f"other{i}", OTHER, "tiny", f"{OTHER}/tiny:o{i}")
        build("plain", TEAM, "tiny", f"{TEAM}/plain:1", labels={})  # not envkit's: never a candidate
        step_labels = _envkit_labels(TEAM, "tiny", 99)
        del step_labels[CONTEXT_LABEL]  # as a build's step images carry them: never a candidate
        build("step", TEAM, "tiny", f"{TEAM}/step:1", labels=step_labels)
        containers.append(dc.containers.create(ids["used"], command=["true"], name=f"{TEAM}-job"))

        clock = (f"2026-12-0{d}T00:00:00Z" for d in range(1, 10))
        store_path = tmp / "history.sqlite"
        with Store.open(store_path, clock=lambda: next(clock)) as store:
            for name in ("old", "cert"):  # both certified on the same model: only the newer one keeps its image
                store.record_certificate(ids[name], "NVIDIA H200", "570.124.06", status="certified",
                                         lock_hash="sha256:x", document={"image": name})
            store.record_push(ids["old"], REGISTRY_REF, "sha256:" + "1" * 64, "certified")
            store.record_push(ids["pushed"], REGISTRY_REF, "sha256:" + "2" * 64, "certified")  # the current one
        yield {"ids": ids, "store": str(store_path), "container": containers[0]}
    finally:
        for c in containers:
            c.remove(force=True)
        for ref in [*tags, *ids.values()]:
            try:
                dc.api.remove_image(ref)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:  # e.g. still tagged: the tags go first, so rarely
                print(f"cleanup: {ref}: {exc.explanation}")


def _gc(*args, world):
    proc = envkit("gc", "--store", world["store"], "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _exists(dc, ref):
    try:
        dc.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


def test_dry_run_plans_the_removals_and_removes_nothing(world, dc):
    ids = world["ids"]
    doc = _gc("--team", TEAM, "--dry-run", world=world)
    assert sorted(doc["would_remove"]) == sorted([ids["dangling"], ids["old"]])
    assert doc["removed"] == [] and doc["dry_run"] is True
    reasons = {i["id"]: i["reasons"] for i in doc["images"]}
    assert reasons[ids["cert"]] == ["the newest image of " + TEAM + "/tiny certified on NVIDIA H200"]
    assert reasons[ids["pushed"]] == [f"the store's current {REGISTRY_REF}"]
    assert reasons[ids["used"]] == [f"used by container {TEAM}-job (created)"]
    assert reasons[ids["n2"]] == reasons[ids["n1"]] == [f"one of the 2 newest builds of {TEAM}/tiny"]
    assert set(reasons) == {ids[k] for k in ("dangling", "old", "cert", "pushed", "used", "n1", "n2")}
    assert doc["reclaimed_basis"] == "unique sizes" and doc["reclaimed_bytes"] >= 2 * 1_000_000
    assert all(_exists(dc, i) for i in ids.values())


def test_without_team_only_envkit_images_are_ever_listed(world, dc):
    """Read-only: a dry run across every team on the host lists only images with envkit's four build labels."""
    ids = world["ids"]
    doc = _gc("--dry-run", world=world)
    listed = {i["id"] for i in doc["images"]}
    assert ids["plain"] not in listed and ids["step"] not in listed
    assert {ids["other1"], ids["dangling"], ids["old"]} <= set(doc["would_remove"])
    for i in doc["images"]:
        labels = dc.images.get(i["id"]).labels
        assert all(labels.get(k) for k in IDENTITY), i
        assert not any(t.startswith("envkit-base/") for t in i["tags"]), i
    assert all(_exists(dc, i) for i in ids.values())


def test_gc_removes_exactly_the_unprotected_and_a_second_run_is_a_no_op(world, dc, base):
    ids = world["ids"]
    layers_before = dc.df()["LayersSize"]
    doc = _gc("--team", TEAM, world=world)
    layers_after = dc.df()["LayersSize"]
    assert sorted(doc["removed"]) == sorted([ids["dangling"], ids["old"]]) and doc["failed"] == []
    assert not _exists(dc, ids["dangling"]) and not _exists(dc, ids["old"])
    assert not _exists(dc, f"{TEAM}/tiny:old-extra")
    old = next(i for i in doc["images"] if i["id"] == ids["old"])
    assert sorted(old["removal"]["untagged"]) == sorted([f"{TEAM}/tiny:a", f"{TEAM}/tiny:old-extra"])
    assert ids["old"] in old["removal"]["deleted"]
    for name in ("cert", "pushed", "used", "n1", "n2", "other1", "other2", "other3", "plain", "step"):
        assert _exists(dc, ids[name]), name
    assert _exists(dc, base)
    world["container"].reload()  # the container is untouched
    # each removed image had 1 MB of its own; the engine's layer total drops by at least that
    # (other engineers' builds on this engine may move it too: printed, not asserted)
    assert 2_000_000 <= doc["reclaimed_bytes"] < 2_100_000
    print(f"gc reclaimed {doc['reclaimed_bytes']} B (unique sizes); engine layers {layers_before} -> {layers_after} "
          f"({layers_before - layers_after} B)")

    again = _gc("--team", TEAM, world=world)
    assert again["removed"] == [] and again["failed"] == [] and again["reclaimed_bytes"] == 0
    assert {i["id"] for i in again["images"]} == {ids[k] for k in ("cert", "pushed", "used", "n1", "n2")}
    assert all(i["keep"] for i in again["images"])


def test_nightly_gc_keeps_the_builds_of_the_lock_it_ran(engine, dc, base, tmp_path):
    """app.nightly_gc.NightlyGc (`nightly --gc`) on the real engine: `gc --team TEAM --keep 1` for the spec's team,
    except that the build a tag it is given names stays whatever its age; the progress line says what went."""
    from envkit.app.nightly_gc import NightlyGc

    team = f"{TEAM}-nightly"
    spec = tmp_path / "team.yaml"
    text = (ROOT / "examples" / "team.yaml").read_text()
    spec.write_text(re.sub(r"(?m)^team: .*$", f"team: {team}", text, count=1))
    tags = [f"{team}/tiny:{name}" for name in ("lock", "older", "newest")]  # oldest first
    ids = []
    try:
        for n, tag in enumerate(tags):
            ids.append(_build(engine, tmp_path, base, f"nightly-{n}", tag, _envkit_labels(team, "tiny", 200 + n)))
        store = tmp_path / "history.sqlite"
        with Store.open(store):  # the nightly made it
            pass
        lines: list[str] = []
        doc = NightlyGc(engine, spec, str(store), 1, None, "classic", lines.append).sweep([tags[0]], None)
        assert "images" in doc, (doc, lines)
        kept = {d["id"]: d["reasons"] for d in doc["images"] if d["keep"]}
        assert kept[ids[0]] == [f"the build of the lock this nightly ran ({tags[0]})"]
        assert kept[ids[2]] == [f"one of the 1 newest builds of {team}/tiny"]
        assert doc["removed"] == [ids[1]] and not _exists(dc, ids[1]) and _exists(dc, ids[0])
        assert any(re.fullmatch(rf"gc: removed 1 image\(s\) of team {team}, [\d.]+ (kB|MB)( at most)?", line)
                   for line in lines), lines
    finally:
        for ref in [*tags, *ids]:
            try:
                dc.api.remove_image(ref)
            except docker.errors.NotFound:
                pass
