"""What each layer did in a push, a pull and a build: the engine's streams as recorded (``tests/unit/data/streams/``,
by its ``record.py``: a tiny two-layer image pushed to a local registry twice, pulled into an engine without it and
into one with its layers), read as ``registry.publish._stream`` reads them."""

import json
from pathlib import Path

import pytest

from envkit.registry.publish import _stream
from envkit.support.layer_moves import LayerMoves, StreamStatuses, built, chains, present, pulled, pushed, short_id

STREAMS = Path(__file__).parents[1] / "data" / "streams"


def recorded(name: str) -> tuple[dict, StreamStatuses, str | None]:
    doc = json.loads((STREAMS / f"{name}.json").read_text())
    statuses = StreamStatuses()
    digest = _stream(doc["events"], None, statuses=statuses)
    return doc, statuses, digest


def blobs(doc: dict) -> list[tuple[str, int]]:
    return [(d, s) for d, s in doc["blobs"]]


def test_a_first_push_uploads_every_layer_with_the_manifests_compressed_bytes():
    doc, statuses, digest = recorded("push_first")
    moves = pushed(statuses.last, doc["diff_ids"], blobs(doc))
    assert digest and digest.startswith("sha256:")
    assert [x.outcome for x in moves.layers] == ["uploaded", "uploaded"]
    assert [x.diff_id for x in moves.layers] == doc["diff_ids"]  # the stream's ids are the diff_ids' (truncated)
    assert [(x.digest, x.bytes) for x in moves.layers] == blobs(doc)
    out = moves.to_json()
    assert out["pushed"] == 2 and out["pushed_bytes"] == sum(s for _, s in blobs(doc))
    assert out["present"] == 0 and out["present_bytes"] == 0
    assert out["summary"].startswith("pushed 2 of 2 layers, ")


def test_a_second_push_finds_every_layer_present_and_uploads_nothing():
    doc, statuses, _ = recorded("push_again")
    moves = pushed(statuses.last, doc["diff_ids"], blobs(doc))
    assert [x.outcome for x in moves.layers] == ["present", "present"]
    assert moves.moved_bytes == 0 and moves.kept_bytes == sum(s for _, s in blobs(doc))
    assert moves.words() == f"pushed 0 of 2 layers, 0 B; 2 present, {moves.to_json()['summary'].split(', ')[-1]}"


def test_a_pull_into_an_engine_with_the_layers_pulls_none():
    doc, statuses, _ = recorded("pull_present")
    moves = pulled(statuses.last, doc["diff_ids"], blobs(doc))
    assert [x.outcome for x in moves.layers] == ["present", "present"]
    assert moves.to_json()["pulled"] == 0 and moves.to_json()["pulled_bytes"] == 0
    assert moves.kept_bytes == sum(s for _, s in blobs(doc))


def test_a_pull_into_an_engine_without_them_pulls_every_layer_matched_by_its_blob_digest():
    doc, statuses, _ = recorded("pull_fetched")
    assert set(statuses.last) == {short_id(d) for d, _ in blobs(doc)}  # the pull's ids are the blobs' (truncated)
    moves = pulled(statuses.last, doc["diff_ids"], blobs(doc))
    assert [x.outcome for x in moves.layers] == ["pulled", "pulled"]
    assert [(x.diff_id, x.digest, x.bytes) for x in moves.layers] == [
        (d, b, s) for d, (b, s) in zip(doc["diff_ids"], blobs(doc))]
    assert moves.to_json()["pulled_bytes"] == sum(s for _, s in blobs(doc))


def test_a_pull_of_an_image_the_engine_has_says_nothing_of_its_layers_all_present():
    # (Docker 20.10 returns at once when it has the manifest's config: no layer is named)
    moves = pulled({}, ["sha256:" + "a" * 64], [("sha256:" + "b" * 64, 10)])
    assert [x.outcome for x in moves.layers] == ["present"] and moves.kept_bytes == 10


def test_mounted_layers_and_unreadable_manifests():
    d1, d2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    moves = pushed({short_id(d1): "Mounted from team/other", short_id(d2): "Pushed"}, [d1, d2], None)
    assert [(x.outcome, x.bytes, x.digest) for x in moves.layers] == [("mounted", None, None), ("uploaded", None, None)]
    assert [x.outcome for x in pushed({}, [d1], None).layers] == ["unknown"]  # the stream said nothing of it
    assert [x.outcome for x in pulled({}, [d1], None).layers] == ["unknown"]
    assert [x.outcome for x in present([d1, d2], [("sha256:b1", 5), ("sha256:b2", 7)]).layers] == ["present"] * 2
    # a manifest whose layers are not this image's list: no bytes rather than wrong ones
    assert [x.bytes for x in pushed({}, [d1, d2], [("sha256:b1", 5)]).layers] == [None, None]


def test_a_builds_layers_are_reused_when_the_engine_had_the_same_chain_before_it():
    os1, os2, env, payload = (f"sha256:{c * 64}" for c in "abcd")
    before = chains([(os1, os2), (os1, os2, env, "sha256:" + "e" * 64)])
    moves = built([os1, os2, env, payload], before, (100, 200, 3000, 4))
    assert [x.outcome for x in moves.layers] == ["reused", "reused", "reused", "built"]
    assert moves.words() == "built 1 of 4 layers, 4 B; 3 reused, 3.30 kB"
    # the same layer on other layers below it is a new chain: built
    assert [x.outcome for x in built([env], before, None).layers] == ["built"]
    assert [x.bytes for x in built([os1], before, (1, 2)).layers] == [None]


@pytest.mark.parametrize("moves, line", [
    (LayerMoves("pushed", ()), "pushed 0 of 0 layers, 0 B; 0 present, 0 B"),
])
def test_words_of_nothing(moves, line):
    assert moves.words() == line


def test_a_layer_sent_by_a_failed_attempt_stays_sent_when_the_retry_finds_it():
    statuses = StreamStatuses()
    layer = "0123456789ab"
    for status in ("Preparing", "Pushed", "Preparing", "Layer already exists"):  # attempt 1 failed after it, 2 ran
        statuses.feed({"status": status, "id": layer})
    assert statuses.last == {layer: "Pushed"}
