"""The nightly report's ``layers_built`` and its text line: an image already built (``note_built``) reused all the
engine's layers; a build's (``Outcome.moves``, from ``build_image``) are what it made on the layers the engine held
before it."""

import json

from envkit.app.nightly_publish import ImageReport, note_built
from envkit.engine.protocol import ImageInfo
from envkit.support import layer_moves

OS, ENV, PAYLOAD = (f"sha256:{c * 64}" for c in "abc")


class Engine:
    def layer_sizes(self, ref):
        return (100, 2000, 3)


def info() -> ImageInfo:
    return ImageInfo("sha256:img", ("t",), 2103, {}, {}, "", layers=(OS, ENV, PAYLOAD))


def test_a_skipped_build_reused_every_layer():
    report = ImageReport("torch25", "vision/torch25:t", build="skipped")
    note_built(Engine(), report, info())
    doc = json.loads(json.dumps(report.to_json()))["layers_built"]  # (the report's JSON, as written)
    assert [x["outcome"] for x in doc["layers"]] == ["reused"] * 3
    assert doc["built"] == 0 and doc["present_bytes"] == 2103
    assert doc["summary"] == "built 0 of 3 layers, 0 B; 3 reused, 2.10 kB"


def test_a_build_made_the_layers_the_engine_lacked():
    report = ImageReport("torch25", "vision/torch25:t", build="built")
    report.layers_built = layer_moves.built(info().layers, {(OS,)}, Engine().layer_sizes(info().id)).to_json()
    doc = report.to_json()["layers_built"]
    assert [(x["diff_id"], x["outcome"], x["bytes"]) for x in doc["layers"]] == [
        (OS, "reused", 100), (ENV, "built", 2000), (PAYLOAD, "built", 3)]
    assert doc["built_bytes"] == 2003 and doc["summary"] == "built 2 of 3 layers, 2.00 kB; 1 reused, 100 B"
