"""Which lower environment layers a reproducible build may reuse (``images.layer_reuse``), the archive that names
them without holding them, and which engines load such an archive: pure logic (the real engine loading it is
tests/integration/test_reproducible.py)."""

from __future__ import annotations

import hashlib
import json
import tarfile

from envkit.images import archive
from envkit.images.layer_reuse import Reuse, find_reusable, group_key, keys_label, lost, parse_keys
from envkit.engine.docker_registry import loads_known_layers
from envkit.engine.protocol import ImageInfo
from envkit.support.labels import LAYER_KEYS_LABEL, LAYERS_LABEL, REPRODUCIBLE_LAYERS
from tests.unit.images.test_archive import _config, _saved

OS = ("sha256:os1", "sha256:os2")
MARK = b"uv 0.13.9; epoch 315532800\n..."


def key(group: str, text: str) -> str:
    return group_key(MARK, group, text.encode())


class Engine:
    def __init__(self, *images: ImageInfo, graph: bool = True):
        self.images, self.graph, self.asked = images, graph, []

    def loads_known_layers(self) -> bool:
        return self.graph

    def find_images(self, labels):
        self.asked.append(labels)
        return iter(self.images)


def image(id_: str, layers: tuple[str, ...], keys: dict[str, str]) -> ImageInfo:
    return ImageInfo(id=id_, tags=(), size=0, env={}, user="", layers=layers,
                     labels={LAYERS_LABEL: REPRODUCIBLE_LAYERS, LAYER_KEYS_LABEL: keys_label(keys)})


CUDA, FW, EXTRA = key("cuda", "nvidia==1"), key("framework", "torch==2.5.1"), key("extra", "numpy==2.1.3")


def test_a_group_key_changes_with_its_packages_its_group_and_how_layers_are_made():
    assert key("extra", "numpy==2.1.3") == EXTRA
    assert len({EXTRA, key("extra", "numpy==2.0.2"), key("framework", "numpy==2.1.3"),
                group_key(b"uv 0.14.0", "extra", b"numpy==2.1.3")}) == 4
    assert parse_keys(keys_label({"cuda": CUDA, "extra": EXTRA})) == {"cuda": CUDA, "extra": EXTRA}


def test_the_image_sharing_the_most_lowest_groups_on_the_same_os_layers_is_reused():
    ours = {"cuda": CUDA, "framework": FW, "extra": key("extra", "numpy==2.0.2")}
    engine = Engine(
        image("sha256:a", (*OS, "sha256:c", "sha256:p"), {"cuda": CUDA}),  # the cuda group only
        image("sha256:b", (*OS, "sha256:c", "sha256:f", "sha256:e", "sha256:p"), {"cuda": CUDA, "framework": FW,
                                                                                "extra": EXTRA}),
        image("sha256:x", ("sha256:other-os", "sha256:c2", "sha256:f2", "sha256:p"), {"cuda": CUDA, "framework": FW}),
    )
    found = find_reusable(engine, OS, ours)
    assert found is not None and found.image == "sha256:b"
    assert found.layers == {"cuda": "sha256:c", "framework": "sha256:f"}  # not the extra: its numpy differs
    assert engine.asked == [{LAYERS_LABEL: REPRODUCIBLE_LAYERS}]


def test_nothing_is_reused_past_a_changed_group_nor_on_other_os_layers_nor_by_an_engine_that_wants_every_file():
    ours = {"cuda": key("cuda", "nvidia==2"), "framework": FW}
    assert find_reusable(Engine(image("sha256:b", (*OS, "sha256:c", "sha256:f", "sha256:p"),
                                      {"cuda": CUDA, "framework": FW})), OS, ours) is None  # lowest group differs
    same = {"cuda": CUDA, "framework": FW}
    on_other_os = image("sha256:b", ("sha256:os1", "sha256:osX", "sha256:c", "sha256:f"), same)
    assert find_reusable(Engine(on_other_os), OS, same) is None
    here = image("sha256:b", (*OS, "sha256:c", "sha256:f", "sha256:p"), same)
    assert find_reusable(Engine(here), OS, same).layers == {"cuda": "sha256:c", "framework": "sha256:f"}
    assert find_reusable(Engine(here, graph=False), OS, same) is None
    no_label = ImageInfo(id="sha256:n", tags=(), size=0, env={}, user="", layers=(*OS, "sha256:c"),
                         labels={LAYERS_LABEL: REPRODUCIBLE_LAYERS})  # made before groups had keys
    assert find_reusable(Engine(no_label), OS, same) is None


def test_the_archive_names_a_reused_layer_and_leaves_its_file_out(tmp_path):
    saved = _saved(tmp_path)
    (tmp_path / "extra.tar").write_bytes(b"X" * 512)
    reused = archive.NewLayer(None, "sha256:" + "c" * 64, "cuda")
    new = archive.NewLayer(tmp_path / "extra.tar", "sha256:" + hashlib.sha256(b"X" * 512).hexdigest(), "extra")
    cfg = _config([reused, new])
    with open(tmp_path / "image.tar", "wb") as out:
        archive.write_archive(out, saved, [reused, new], cfg, "team/img:1")
    with tarfile.open(tmp_path / "image.tar") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        assert manifest[0]["Layers"] == ["lay1/layer.tar", f"{'c' * 64}/layer.tar", f"{new.diff_id[7:]}/layer.tar"]
        assert f"{'c' * 64}/layer.tar" not in tar.getnames()
        assert tar.extractfile(manifest[0]["Layers"][2]).read() == b"X" * 512


def test_only_dockers_graph_driver_stores_load_an_archive_without_the_layers_they_have():
    assert loads_known_layers({"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]})
    assert loads_known_layers({"Driver": "vfs", "DriverStatus": None})
    assert not loads_known_layers({"Driver": "overlayfs", "DriverStatus": [["driver-type",
                                                                            "io.containerd.snapshotter.v1"]]})
    assert not loads_known_layers({"Driver": "overlay", "DriverStatus": [["Backing Filesystem", "xfs"]]})  # podman
    assert not loads_known_layers({})


def test_a_load_that_lacked_a_reused_layer_is_told_from_any_other_failure():
    reuse = Reuse("sha256:b", {"cuda": "sha256:" + "ab" * 32})
    said = ("cannot load the image archive of t: open /var/lib/docker/tmp/docker-import-2463453093/"
            + "ab" * 32 + "/layer.tar: no such file or directory")  # as Docker 20.10 said it here
    assert lost(said, reuse)
    assert not lost("cannot load the image archive of t: no space left on device", reuse)
    assert not lost(said.replace("ab" * 32, "cd" * 32), reuse)  # another layer's file: not the reuse's doing
