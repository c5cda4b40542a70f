"""`envkit gc` and the classic builder's stage images, on the real engine.

Two builds of one image (two locks) in the shape of envkit's template (tests/unit/render/test_render.py checks
the template itself): an ``os`` stage, a ``builder`` stage whose 3 MB layer stands for the framework's
venv (the same instruction in both builds, so the classic cache shares it), an ``extras`` stage with
1 MB of each lock's own and envkit's stage label last, and a final stage that copies from both. The
classic builder leaves each build's extras stage image behind, untagged. gc must remove a stage image
only once no build of its lock stays, and the engine must then free the layers only that stage used:
the shared builder layer goes with the last stage image that uses it, not before.

The team name is made for this run (`gcstage-<uuid>`); everything is removed at the end.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import docker.errors
import pytest

from envkit.engine.docker_gc import DockerImageHost
from envkit.ops.gc_plan import STAGE_GRACE
from envkit.ops.gc import collect_garbage
from envkit.support.labels import CONTEXT_LABEL, IMAGE_LABEL, LOCK_LABEL, STAGE_LABEL, TEAM_LABEL
from tests.integration.conftest import envkit

pytestmark = pytest.mark.integration

TEAM = f"gcstage-{uuid.uuid4().hex[:10]}"


def later() -> datetime:
    """A clock past the grace of every stage built so far (read when asked: collection may be long before)."""
    return datetime.now(timezone.utc) + STAGE_GRACE + timedelta(minutes=5)


def _lock(n: int) -> str:
    return f"sha256:{n:064x}"


def _dockerfile(base: str, n: int) -> str:
    stage_label = " ".join(f'{k}="{v}"' for k, v in ((STAGE_LABEL, "extras"), (TEAM_LABEL, TEAM),
                                                     (IMAGE_LABEL, "staged"), (LOCK_LABEL, _lock(n))))
    return "\n".join([
        f"FROM {base} AS os",
        f"RUN echo {TEAM} > /os-id",
        "FROM os AS builder",
        f"RUN head -c 3000000 /dev/urandom > /venv-{TEAM}",  # the same in both builds: one cached layer
        "FROM builder AS extras",
        f"RUN head -c 1000000 /dev/urandom > /extras-{n}",
        f"LABEL {stage_label}",
        "FROM os AS runtime",
        f"COPY --from=builder /venv-{TEAM} /opt/venv",
        f"COPY --from=extras /extras-{n} /opt/extras",
        "",
    ])


def _exists(dc, ref) -> bool:
    try:
        dc.images.get(ref)
        return True
    except docker.errors.ImageNotFound:
        return False


@pytest.fixture(scope="module")
def builds(engine, dc, base, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gcstages")
    made: dict[str, str] = {}
    try:
        for n in (1, 2):
            ctx = tmp / f"ctx{n}"
            ctx.mkdir()
            (ctx / "Dockerfile").write_text(_dockerfile(base, n))
            tag = f"{TEAM}/staged:{n}"
            labels = {TEAM_LABEL: TEAM, IMAGE_LABEL: "staged", LOCK_LABEL: _lock(n), CONTEXT_LABEL: _lock(100 + n)}
            list(engine.build(ctx, tag, labels))
            made[f"build{n}"] = dc.images.get(tag).id
        host = DockerImageHost(dc)
        stages = {s.lock_hash: s for s in host.stage_images(TEAM)}
        assert set(stages) == {_lock(1), _lock(2)}, "the classic builder left no labelled extras stage image"
        for n in (1, 2):
            made[f"stage{n}"] = stages[_lock(n)].id
            made[f"extras{n}"] = dc.api.inspect_image(made[f"stage{n}"])["Parent"]  # the lock's own 1 MB
        made["venv"] = dc.api.inspect_image(made["extras1"])["Parent"]  # the shared builder layer
        assert made["venv"] == dc.api.inspect_image(made["extras2"])["Parent"], "the builder stage was not shared"
        yield made
    finally:
        for ref in (f"{TEAM}/staged:1", f"{TEAM}/staged:2", *made.values()):
            try:
                dc.api.remove_image(ref)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                print(f"cleanup: {ref}: {exc.explanation}")


def test_stage_images_are_listed_with_their_build_and_kept_while_young(builds, dc, tmp_path):
    """The CLI, now: build 1 goes (--keep 1), its stage image is too young to go."""
    from envkit.store.history import Store

    Store.open(tmp_path / "empty.sqlite").close()  # a store with no history: nothing is protected by it
    proc = envkit("gc", "--team", TEAM, "--keep", "1", "--store", str(tmp_path / "empty.sqlite"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["removed"] == [builds["build1"]]
    stages = {s["id"]: s for s in doc["stages"]}
    assert set(stages) == {builds["stage1"], builds["stage2"]} and all(s["keep"] for s in stages.values())
    assert stages[builds["stage1"]]["stage"] == "extras" and stages[builds["stage1"]]["lock_hash"] == _lock(1)
    assert "a build may still be using it" in stages[builds["stage1"]]["reasons"][0]
    assert f"its build of {TEAM}/staged (lock {_lock(2)[:19]}) stays" in stages[builds["stage2"]]["reasons"]
    assert {"before", "after", "freed"} <= set(doc["engine_layers_bytes"])  # (other builds here move it: not compared)
    assert not _exists(dc, builds["build1"]) and _exists(dc, builds["stage1"])


def test_a_stage_goes_once_no_build_of_its_lock_stays_and_the_shared_layer_with_the_last(builds, dc):
    host = DockerImageHost(dc)
    first = collect_garbage(host, None, team=TEAM, keep=1, now=later())
    assert [d.image.id for d in first.removed] == [builds["stage1"]] and first.failed == []
    assert not _exists(dc, builds["stage1"]) and not _exists(dc, builds["extras1"])  # its own 1 MB went with it
    assert _exists(dc, builds["venv"]) and _exists(dc, builds["stage2"])  # still used by build 2's stage
    assert first.reclaimed()[0] >= 1_000_000

    dc.api.remove_image(f"{TEAM}/staged:2")  # build 2 gone too (as a --keep 1 gc would once build 3 exists)
    second = collect_garbage(host, None, team=TEAM, keep=1, now=later())
    assert [d.image.id for d in second.removed] == [builds["stage2"]]
    assert not _exists(dc, builds["extras2"]) and not _exists(dc, builds["venv"])  # the shared layer, last
    before, after = second.layers
    print(f"stage gc: reported {second.reclaimed()[0]} B (unique sizes); engine layers {before} -> {after} "
          f"({before - after} B freed)")
    assert not DockerImageHost(dc).stage_images(TEAM)
