"""`envkit layers diff` against the real engine, on two tiny images loaded from archives made here (a few KB: an
OS layer, a framework group and a payload, labelled as `build --reproducible` labels its images). Image B's
framework layer has one file's mtime and another file's content changed; the command, reading both images through
the engine's save stream, names the framework layer and, in it, the first file (the mtime) and two differing
members. The images are removed."""

import hashlib
import io
import json
import tarfile
import uuid

import pytest

from envkit.support.labels import LAYER_KEYS_LABEL, LAYERS_LABEL, PAYLOAD_LAYER_LABEL, REPRODUCIBLE_LAYERS
from tests.integration.conftest import envkit

pytestmark = pytest.mark.integration

EPOCH = 315532800


def layer(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A layer tar as envkit writes one: sorted paths, uid/gid 0; each file with its (content, mtime)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)})
        for name in sorted([*dirs, *files]):
            info = tarfile.TarInfo(name)
            info.mtime = files[name][1] if name in files else EPOCH
            if name in files:
                info.size, info.mode = len(files[name][0]), 0o644
                tar.addfile(info, io.BytesIO(files[name][0]))
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    return out.getvalue()


def archive(tag: str, layers: list[bytes]) -> bytes:
    """A docker-archive of an image with ``layers`` and the labels of a reproducible build (one group: framework)."""
    diff_ids = ["sha256:" + hashlib.sha256(x).hexdigest() for x in layers]
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": diff_ids},
                         "config": {"Labels": {LAYERS_LABEL: REPRODUCIBLE_LAYERS, LAYER_KEYS_LABEL: "framework=k",
                                               PAYLOAD_LAYER_LABEL: diff_ids[-1]}}}).encode()
    names = [f"{d[7:]}/layer.tar" for d in diff_ids]
    manifest = json.dumps([{"Config": "config.json", "RepoTags": [tag], "Layers": names}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in [*zip(names, layers), ("config.json", config), ("manifest.json", manifest)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_layers_diff_names_the_first_differing_file_and_field(engine, tmp_path):
    os_layer = layer({"etc/os-release": (b"ID=tiny\n", EPOCH)})
    payload = layer({"opt/envkit/check.py": (b"ok\n", EPOCH)})
    same = {"opt/venv/lib/a.py": (b"a = 1\n", EPOCH), "opt/venv/lib/b.py": (b"b = 1\n", EPOCH),
            "opt/venv/lib/c.py": (b"c = 1\n", EPOCH)}
    other = {**same, "opt/venv/lib/a.py": (b"a = 1\n", EPOCH + 3600), "opt/venv/lib/c.py": (b"c = 2\n", EPOCH)}
    run = uuid.uuid4().hex[:8]
    tag_a, tag_b = f"envkit-test/layers-diff:a-{run}", f"envkit-test/layers-diff:b-{run}"
    try:
        for tag, framework in ((tag_a, same), (tag_b, other)):
            path = tmp_path / f"{tag[-10:]}.tar"
            path.write_bytes(archive(tag, [os_layer, layer(framework), payload]))
            engine.load(path)
        proc = envkit("layers", "diff", tag_a, tag_b, "--engine-b", "unix:///var/run/docker.sock", "--json")
        assert proc.returncode == 18, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["compared"] == "environment layer groups"
        assert [(x["layer"], x["same"]) for x in doc["layers"]] == [("framework", False), ("payload", True)]
        assert doc["first_layer"] == "framework"
        assert doc["first_file"] == {"path": "opt/venv/lib/a.py", "field": "mtime", "a": str(EPOCH),
                                     "b": str(EPOCH + 3600)}
        assert doc["differing_files"] == 2
        human = envkit("layers", "diff", tag_a, tag_b)
        assert human.returncode == 18 and "/opt/venv/lib/a.py: mtime differs" in human.stdout, human.stdout
        again = envkit("layers", "diff", tag_a, tag_a, "--json")
        assert again.returncode == 0 and json.loads(again.stdout)["same"] is True, again.stderr
        missing = envkit("layers", "diff", tag_a, f"envkit-test/layers-diff:none-{run}", "--json")
        assert missing.returncode == 6 and "no image" in json.loads(missing.stdout)["message"]
    finally:
        for tag in (tag_a, tag_b):
            engine.untag(tag)
    assert engine.inspect(tag_a) is None and engine.inspect(tag_b) is None
