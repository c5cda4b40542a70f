"""Loading a reproducible build's layers while the next group installs (``images.load_ahead``): what each background
load's archive carries, the tags it leaves, and how it ends. Pure logic: the engine is a fake that reads each archive;
tests/integration/test_reproducible.py builds through it on the real engine."""

from __future__ import annotations

import io
import json
import tarfile
import threading

import pytest

from envkit.errors import EngineError
from envkit.images import archive
from envkit.images.load_ahead import LoadAhead
from tests.unit.images.test_archive import EPOCH, _saved

OS_LABELS = {"io.envkit.stage": "os", "io.envkit.team": "t"}


class _Engine:
    """Reads every archive streamed into it: which members carried bytes, and the tags it was given."""

    def __init__(self, fail_on: str | None = None, gate: threading.Event | None = None):
        self.loads: list[dict] = []
        self.tags: list[str] = []
        self.untagged: list[str] = []
        self.fail_on, self.gate = fail_on, gate

    def load_stream(self, write, what):
        buf = _Gated(self.gate)
        write(buf)
        with tarfile.open(fileobj=io.BytesIO(buf.getvalue()), mode="r:") as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        manifest = json.loads(members["manifest.json"])[0]
        config = json.loads(members[manifest["Config"]])
        self.loads.append({"members": set(members) - {"manifest.json", manifest["Config"]},
                           "diff_ids": config["rootfs"]["diff_ids"], "labels": config["config"]["Labels"]})
        if self.fail_on and self.fail_on in what:
            raise EngineError(f"loading {what} failed: no space left on device")
        self.tags += manifest["RepoTags"]
        return manifest["RepoTags"]

    def untag(self, ref):
        self.untagged.append(ref)


class _Gated(io.BytesIO):
    def __init__(self, gate):
        super().__init__()
        self.gate = gate

    def write(self, data):
        if self.gate is not None:
            self.gate.wait(5)
        return super().write(data)


def _layer(tmp_path, name: str, size: int = 100) -> archive.NewLayer:
    path = tmp_path / f"{name}.tar"
    path.write_bytes(name.encode() * size)
    return archive.NewLayer(path, f"sha256:{name[0] * 64}", f"install {name}")


def test_each_group_is_loaded_in_order_with_only_its_own_bytes_and_the_older_tag_goes(tmp_path):
    engine, saved = _Engine(), _saved(tmp_path)
    ahead = LoadAhead(engine, saved, "envkit/t/x:abc", OS_LABELS, EPOCH, lambda _: None)
    built = [_layer(tmp_path, "cuda")]
    ahead.add("cuda", built)
    built.append(_layer(tmp_path, "framework"))
    ahead.add("framework", built)
    final = ahead.finish(built)
    ahead.close()

    first, second = engine.loads
    # each archive carries its newest layer's bytes only: the OS layers (saved from the engine) and the layers
    # loaded before it are named in its manifest, left out
    assert first["members"] == {f"{'c' * 64}/layer.tar"}
    assert first["diff_ids"] == ["sha256:" + "1" * 64, "sha256:" + "c" * 64]
    assert second["members"] == {f"{'f' * 64}/layer.tar"}
    assert second["diff_ids"] == [*first["diff_ids"], "sha256:" + "f" * 64]
    assert first["labels"]["io.envkit.stage"] == "layers" and first["labels"]["io.envkit.team"] == "t"
    assert engine.tags == ["envkit/t/x:abc-cuda", "envkit/t/x:abc-framework"]
    # the older tag at once, the last at close
    assert engine.untagged == ["envkit/t/x:abc-cuda", "envkit/t/x:abc-framework"]
    assert [x.path for x in final] == [None, None] and [x.diff_id for x in final] == [x.diff_id for x in built]
    assert not (tmp_path / "cuda.tar").exists() and not (tmp_path / "framework.tar").exists()  # on disk once
    assert set(ahead.seconds) == {"load cuda (beside)", "load framework (beside)", "load wait"}


def test_a_failed_load_is_raised_by_finish_and_no_later_group_is_loaded(tmp_path):
    engine = _Engine(fail_on="cuda")
    ahead = LoadAhead(engine, _saved(tmp_path), "envkit/t/x:abc", OS_LABELS, EPOCH, lambda _: None)
    built = [_layer(tmp_path, "cuda")]
    ahead.add("cuda", built)
    built.append(_layer(tmp_path, "framework"))
    ahead.add("framework", built)
    with pytest.raises(EngineError, match="no space left"):
        ahead.finish(built)
    ahead.close()
    assert len(engine.loads) == 1 and engine.tags == [] and engine.untagged == []


def test_close_cuts_a_load_under_way_and_removes_every_tag_it_made(tmp_path):
    gate = threading.Event()
    engine = _Engine(gate=gate)
    ahead = LoadAhead(engine, _saved(tmp_path), "envkit/t/x:abc", OS_LABELS, EPOCH, lambda _: None)
    ahead.add("cuda", [_layer(tmp_path, "cuda", size=2**20)])  # (the archive is written 10 KiB at a time)
    threading.Timer(0.2, gate.set).start()  # the archive's first write waits until close has asked to stop
    ahead.close()
    assert engine.loads == [] and engine.tags == [] and engine.untagged == []
