"""The docker-archive envkit assembles (``images.archive``) and the layer record beside a lock
(``images.layer_record``): pure logic."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from envkit.images import archive, layer_record
from envkit.errors import LockError
from envkit.render.files import context_for, runtime_env
from envkit.render.templates import environment
from tests.unit.lockfixtures import make_image, make_lock

EPOCH = 315532800
OS_CONFIG = {
    "architecture": "amd64", "os": "linux", "created": "2026-12-06T06:00:00.123Z", "container": "abc",
    "docker_version": "20.10.24",
    "config": {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"], "Cmd": ["bash"],
               "Labels": {"io.envkit.stage": "os", "io.envkit.base": "x"}, "Image": "sha256:parent"},
    "history": [{"created": "2026-12-06T06:00:00Z", "created_by": "apt-get install"},
                {"created": "2026-12-06T06:00:01Z", "created_by": "/bin/sh -c #(nop)  LABEL io.envkit.stage=os",
                 "empty_layer": True}],
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]},
}


def _saved(tmp_path: Path) -> archive.SavedImage:
    path = tmp_path / "os.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in (("lay1/layer.tar", b"L" * 1024), ("cfg.json", json.dumps(OS_CONFIG).encode()),
                           ("manifest.json", json.dumps([{"Config": "cfg.json", "Layers": ["lay1/layer.tar"]}]).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive.read_saved(path)


def _config(layers: list[archive.NewLayer]) -> dict:
    return archive.image_config(OS_CONFIG, layers, env=(("PATH", "/opt/venv/bin:$PATH"), ("VIRTUAL_ENV", "/opt/venv")),
                                labels={"io.envkit.lock-hash": "sha256:x"}, drop_labels={"io.envkit.stage"},
                                user="1000:1000", workdir="/home/envkit", cmd=("python3", "/x"), epoch=EPOCH)


def test_the_config_is_the_os_images_plus_the_final_stage(tmp_path):
    layer = archive.NewLayer(tmp_path / "l.tar", "sha256:" + "2" * 64, "uv pip install -r cuda.txt")
    cfg = _config([layer])
    assert cfg["config"]["Env"] == ["PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
                                    "VIRTUAL_ENV=/opt/venv"]  # $PATH expanded as the engine does
    assert cfg["config"]["Labels"] == {"io.envkit.base": "x", "io.envkit.lock-hash": "sha256:x"}  # the stage's: gone
    assert (cfg["config"]["User"], cfg["config"]["WorkingDir"], cfg["config"]["Cmd"]) == \
           ("1000:1000", "/home/envkit", ["python3", "/x"])
    assert cfg["created"] == "1980-01-01T00:00:00Z" and cfg["history"][-1]["created"] == cfg["created"]
    assert "container" not in cfg and "docker_version" not in cfg and "Image" not in cfg["config"]
    assert cfg["rootfs"]["diff_ids"] == ["sha256:" + "1" * 64, layer.diff_id]
    # one entry per layer, all at the epoch; the OS stage's own label step is gone with its label
    assert [(h["created"], h["created_by"]) for h in cfg["history"]] == [
        ("1980-01-01T00:00:00Z", "apt-get install"), ("1980-01-01T00:00:00Z", "uv pip install -r cuda.txt")]
    assert archive.config_bytes(cfg) == archive.config_bytes(_config([layer]))


def test_the_archive_holds_every_layer_and_names_the_config_by_its_digest(tmp_path):
    saved = _saved(tmp_path)
    (tmp_path / "env.tar").write_bytes(b"E" * 2048)
    layer = archive.NewLayer(tmp_path / "env.tar", "sha256:" + hashlib.sha256(b"E" * 2048).hexdigest(), "env")
    cfg = _config([layer])
    with open(tmp_path / "image.tar", "wb") as out:
        archive.write_archive(out, saved, [layer], cfg, "team/img:1")
    image_id = archive.image_id(cfg)
    assert not (tmp_path / "env.tar").exists()  # copied in, then removed: on disk once
    with tarfile.open(tmp_path / "image.tar") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        config = tar.extractfile(manifest[0]["Config"]).read()
        assert image_id == "sha256:" + hashlib.sha256(config).hexdigest()
        assert manifest[0]["RepoTags"] == ["team/img:1"]
        assert manifest[0]["Layers"] == ["lay1/layer.tar", f"{layer.diff_id[7:]}/layer.tar"]
        assert tar.extractfile(manifest[0]["Layers"][1]).read() == b"E" * 2048
        assert tar.extractfile("lay1/layer.tar").read() == b"L" * 1024


def test_the_final_stage_has_one_owner(tmp_path):
    """The rendered Dockerfile's ENV, USER, WORKDIR and CMD are the render context's, which the config takes."""
    image = make_image()
    lock = make_lock(image)
    ctx = context_for(lock, image, "team.yaml")
    text = environment().get_template("runtime.Dockerfile.j2").render(**ctx.__dict__)
    env_block = text[text.index("\nENV PATH="):].split("\n# ---")[0]
    for key, value in runtime_env(image):
        assert f"{key}={value}" in env_block or f'{key}="{value}"' in env_block
    assert f"\nUSER {ctx.uid}:{ctx.uid}\nWORKDIR {ctx.workdir}\nCMD {json.dumps(list(ctx.cmd))}\n" in text


def _recorded(lock_hash: str = "sha256:" + "a" * 64) -> layer_record.Recorded:
    return layer_record.Recorded("torch25", lock_hash, {"cuda": "sha256:c", "framework": "sha256:f",
                                                        "extra": "sha256:e", "payload": "sha256:p"}, "envkit 0.1.0, uv")


def test_the_record_lives_beside_the_lock_and_round_trips(tmp_path):
    lock = tmp_path / "team.lock"
    assert layer_record.load_record(lock) == {}
    path = layer_record.write_record(lock, [_recorded()])
    assert path == tmp_path / "team.layers.json"
    assert layer_record.load_record(lock) == {"torch25": _recorded()}
    other = layer_record.Recorded("other", "sha256:" + "b" * 64, {"extra": "sha256:o"}, "m")
    layer_record.write_record(lock, [other])  # adds: the first image's entry stays
    assert set(layer_record.load_record(lock)) == {"torch25", "other"}


def test_a_broken_record_is_a_lock_error_naming_it(tmp_path):
    (tmp_path / "team.layers.json").write_text('{"version": 9}')
    with pytest.raises(LockError, match=r"team\.layers\.json is not a layer record.*version 9"):
        layer_record.load_record(tmp_path / "team.lock")


def test_compare_matches_the_environment_layers_under_the_payload():
    recorded = _recorded()
    image = ("sha256:base", "sha256:os", "sha256:c", "sha256:f", "sha256:e", "sha256:other-payload")
    check = layer_record.compare(image, {}, recorded)
    assert check.matches and check.message.startswith("environment layers match the lock exactly")
    changed = ("sha256:base", "sha256:os", "sha256:c", "sha256:F2", "sha256:e", "sha256:p")
    check = layer_record.compare(changed, {}, recorded)
    assert not check.matches and check.differs == [("framework", "sha256:f", "sha256:F2")]
    assert "the framework layer differs" in check.message and "sha256:F2" in check.message
    assert not layer_record.compare(("sha256:x",), {}, recorded).matches  # too few layers: none matches


def test_a_devel_images_environment_is_found_under_its_payload_not_at_the_top():
    from envkit.support.labels import PAYLOAD_LAYER_LABEL

    recorded = _recorded()
    devel = ("sha256:base", "sha256:os", "sha256:c", "sha256:f", "sha256:e", "sha256:p2", "sha256:apt", "sha256:nvcc")
    assert layer_record.compare(devel, {PAYLOAD_LAYER_LABEL: "sha256:p2"}, recorded).matches
    assert not layer_record.compare(devel, {}, recorded).matches  # read from the top, the devel layers are compared
    # a label naming no layer of the image: read from the top, as an image without it
    assert not layer_record.compare(devel, {PAYLOAD_LAYER_LABEL: "sha256:gone"}, recorded).matches
    assert layer_record.written(devel, {PAYLOAD_LAYER_LABEL: "sha256:p2"})[-1] == "sha256:p2"


def test_a_remote_engine_is_refused_before_any_work():
    from envkit.images.builder import build_image
    from envkit.errors import BuildError

    class RemoteEngine:
        def local(self):
            return False

        def __getattr__(self, name):
            raise AssertionError(f"the engine was asked {name}")

    image = make_image()
    with pytest.raises(BuildError, match=r"a remote engine \(DOCKER_HOST over tcp or ssh\) cannot mount"):
        build_image(RemoteEngine(), make_lock(image), image, "team.yaml", ca_bundle=None, progress=lambda *_: None,
                    reproducible=True)


def test_the_docker_engine_knows_a_local_socket():
    from envkit.engine.docker_engine import DockerEngine

    class Api:
        base_url = "http+docker://localhost"

    class Client:
        api = Api()

    assert DockerEngine(Client()).local()
    Api.base_url = "http+docker://ssh"
    assert not DockerEngine(Client()).local()
    Api.base_url = "https://10.0.0.2:2376"
    assert not DockerEngine(Client()).local()
