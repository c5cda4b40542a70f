"""``images.layer_diff``: two layer tars made here, compared member by member as streams; ``saved_layers``: the
layers kept from a `docker save` stream; ``app.layers.layer_rows``: which layers two images are compared by."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from envkit.app.layers import ABSENT, LayersDiff, explain, layer_rows
from envkit.engine.protocol import ImageInfo
from envkit.errors import EngineError
from envkit.images.layer_diff import CHUNK, diff_files, diff_tars
from envkit.images.layer_record import labelled_layers
from envkit.images.saved_layers import save_layers
from envkit.support.labels import LAYER_KEYS_LABEL, LAYERS_LABEL, PAYLOAD_LAYER_LABEL, REPRODUCIBLE_LAYERS

EPOCH = 315532800


def entry(name: str, data: bytes | None = b"x", **kw) -> dict:
    return {"name": name, "data": data, **kw}


BASE = [entry("opt", None), entry("opt/venv", None), entry("opt/venv/a.py", b"print(1)\n"),
        entry("opt/venv/b.py", b"print(2)\n"), entry("opt/venv/lib", None, type=tarfile.SYMTYPE, linkname="lib64"),
        entry("opt/venv/tool", b"#!/bin/sh\n", mode=0o755)]


def write_tar(path: Path, entries: list[dict], fmt: int = tarfile.PAX_FORMAT) -> Path:
    with tarfile.open(path, "w", format=fmt) as tar:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.mtime, info.uid, info.gid = e.get("mtime", EPOCH), e.get("uid", 0), e.get("gid", 0)
            info.mode, info.pax_headers = e.get("mode", 0o644), e.get("pax", {})
            if e.get("type") == tarfile.SYMTYPE:
                info.type, info.linkname = tarfile.SYMTYPE, e["linkname"]
                tar.addfile(info)
            elif e["data"] is None:
                info.type, info.mode = tarfile.DIRTYPE, e.get("mode", 0o755)
                tar.addfile(info)
            else:
                info.size = len(e["data"])
                tar.addfile(info, io.BytesIO(e["data"]))
    return path


def changed(entries: list[dict], name: str, **kw) -> list[dict]:
    return [{**e, **kw} if e["name"] == name else e for e in entries]


class OneWay(io.RawIOBase):
    """A stream that cannot seek (a pipe's), so the diff must read it once, in order."""

    def __init__(self, data: bytes):
        self.data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk = self.data.read(min(len(buffer), 4096))
        buffer[:len(chunk)] = chunk
        return len(chunk)


def diff(tmp_path: Path, a: list[dict], b: list[dict], **kw):
    pa, pb = write_tar(tmp_path / "a.tar", a, **kw), write_tar(tmp_path / "b.tar", b)
    return diff_tars(io.BufferedReader(OneWay(pa.read_bytes())), io.BufferedReader(OneWay(pb.read_bytes())))


def test_the_same_members_in_the_same_order_are_the_same(tmp_path):
    result = diff(tmp_path, BASE, BASE)
    assert result.first is None and result.differing == 0 and result.members == (6, 6)


def test_the_first_differing_file_is_named_with_its_field_and_every_difference_counted(tmp_path):
    b = changed(changed(BASE, "opt/venv/a.py", mtime=EPOCH + 7), "opt/venv/b.py", data=b"print(3)\n")
    result = diff(tmp_path, BASE, b)
    assert result.first is not None and result.differing == 2
    assert result.first.to_json() == {"path": "opt/venv/a.py", "field": "mtime", "a": str(EPOCH),
                                      "b": str(EPOCH + 7)}
    assert result.first.describe() == f"/opt/venv/a.py: mtime differs ({EPOCH} vs {EPOCH + 7})"


@pytest.mark.parametrize("name, change, field, a, b", [
    ("opt/venv/b.py", {"data": b"print(3)\n"}, "content", "sha256:" + hashlib.sha256(b"print(2)\n").hexdigest(),
     "sha256:" + hashlib.sha256(b"print(3)\n").hexdigest()),
    ("opt/venv/b.py", {"data": b"print(22)\n"}, "size", "9", "10"),
    ("opt/venv/tool", {"mode": 0o775}, "mode", "0755", "0775"),
    ("opt/venv/a.py", {"uid": 1000, "gid": 1000}, "uid/gid", "0/0", "1000/1000"),
    ("opt/venv/lib", {"linkname": "lib32"}, "link target", "lib64", "lib32"),
    ("opt/venv/a.py", {"pax": {"SCHILY.xattr.user.x": "1"}}, "pax", "", "SCHILY.xattr.user.x=1"),
    ("opt/venv/a.py", {"data": None}, "type", "file", "directory"),
])
def test_each_header_field_and_the_content(tmp_path, name, change, field, a, b):
    first = diff(tmp_path, BASE, changed(BASE, name, **change)).first
    assert first is not None and (first.path, first.field, first.a, first.b) == (name, field, a, b)


def test_a_member_in_one_tar_only_is_named_at_its_place(tmp_path):
    b = [*BASE[:3], entry("opt/venv/new.py"), *BASE[3:]]
    result = diff(tmp_path, BASE, b)
    assert result.first is not None and result.differing == 1
    assert (result.first.path, result.first.field, result.first.a, result.first.b) == \
        ("opt/venv/new.py", "present", "absent", "present")
    assert result.first.describe() == "/opt/venv/new.py: only in b"
    gone = diff(tmp_path, BASE, BASE[:-1]).first
    assert gone is not None and (gone.path, gone.a, gone.b) == ("opt/venv/tool", "present", "absent")


def test_the_same_members_in_another_order_differ_by_order(tmp_path):
    b = [*BASE[:2], BASE[3], BASE[2], *BASE[4:]]
    result = diff(tmp_path, BASE, b)
    assert result.first is not None and (result.first.path, result.first.field) == ("opt/venv/a.py", "order")
    assert (result.first.a, result.first.b) == ("#2", "#3")


def test_a_difference_after_the_first_mebibyte_of_a_large_file(tmp_path):
    big = b"\0" * (CHUNK * 2 + 5)
    result = diff(tmp_path, changed(BASE, "opt/venv/a.py", data=big),
                  changed(BASE, "opt/venv/a.py", data=big[:-1] + b"\1"))
    assert result.first is not None and (result.first.path, result.first.field) == ("opt/venv/a.py", "content")


def test_the_same_members_in_other_bytes_differ_by_their_encoding(tmp_path):
    pa = write_tar(tmp_path / "a.tar", BASE, fmt=tarfile.GNU_FORMAT)
    pb = write_tar(tmp_path / "b.tar", BASE, fmt=tarfile.PAX_FORMAT)
    assert pa.read_bytes() != pb.read_bytes()
    with open(pa, "rb") as fa, open(pb, "rb") as fb:
        result = diff_files(fa, fb, same_bytes=False)
    assert result.first is not None and result.first.field == "archive" and result.differing == 0
    with open(pa, "rb") as fa, open(pa, "rb") as fb:
        assert diff_files(fa, fb, same_bytes=True).first is None


def _archive(tmp_path: Path, layers: list[Path], podman: bool = False) -> tuple[bytes, list[str]]:
    """A docker-archive as Docker 20.10 saves one: each layer under a directory of its own id, manifest last; or as
    Podman 4.3 does: each layer first as ``<diff_id hex>.tar``, then its directory, whose layer.tar links to it."""
    ids = ["sha256:" + hashlib.sha256(p.read_bytes()).hexdigest() for p in layers]
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        names = []
        for i, p in enumerate(layers):
            if podman:
                tar.add(p, f"{ids[i][7:]}.tar")
                link = tarfile.TarInfo(f"{i:064x}/layer.tar")
                link.type, link.linkname = tarfile.SYMTYPE, f"../{ids[i][7:]}.tar"
                tar.addfile(link)
            else:
                tar.add(p, f"{i:064x}/layer.tar")
            names.append(f"{i:064x}/layer.tar")
        manifest = json.dumps([{"Config": "c.json", "RepoTags": ["x:1"], "Layers": names}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    return out.getvalue(), ids


class Saving:
    def __init__(self, data: bytes):
        self.data = data

    def save_stream(self, ref):
        return (self.data[i:i + 7] for i in range(0, len(self.data), 7))  # odd chunks


@pytest.mark.parametrize("podman", [False, True], ids=["docker", "podman"])
def test_only_the_layers_asked_for_are_kept_from_the_save_stream(tmp_path, podman):
    l0 = write_tar(tmp_path / "l0.tar", BASE[:2])
    l1 = write_tar(tmp_path / "l1.tar", BASE)
    data, ids = _archive(tmp_path, [l0, l1], podman)
    into = tmp_path / "kept"
    into.mkdir()
    kept = save_layers(Saving(data), "x:1", {ids[1]}, into)
    assert list(kept) == [ids[1]] and kept[ids[1]].read_bytes() == l1.read_bytes()
    assert list(into.iterdir()) == [kept[ids[1]]]  # the other layer went at once
    with pytest.raises(EngineError, match="holds no layer sha256:0000"):
        save_layers(Saving(data), "x:1", {"sha256:" + "0" * 64}, into)


def info(layers: tuple[str, ...], **labels: str) -> ImageInfo:
    return ImageInfo(id="sha256:i", tags=(), size=0, labels=labels, env={}, user="", layers=layers)


REPRO = {LAYERS_LABEL: REPRODUCIBLE_LAYERS, LAYER_KEYS_LABEL: "framework=k1 extra=k2"}


def test_reproducible_images_are_compared_by_their_groups_others_by_place():
    a = info(("os", "osb", "fw", "ex", "pay", "devel"), **REPRO, **{PAYLOAD_LAYER_LABEL: "pay"})
    assert labelled_layers(a.layers, a.labels) == {"framework": "fw", "extra": "ex", "payload": "pay"}
    b = info(("os", "os2", "fw", "ex2", "pay"), **REPRO)
    by_group, rows = layer_rows(a, b)
    assert by_group and [(r.name, r.same) for r in rows] == [("framework", True), ("extra", False),
                                                            ("payload", True)]
    plain = info(("os", "x"))
    assert labelled_layers(plain.layers, plain.labels) is None
    by_group, rows = layer_rows(plain, info(("os",)))
    assert not by_group and [(r.name, r.a, r.b) for r in rows] == [("#0", "os", "os"), ("#1", "x", ABSENT)]
    result = LayersDiff(("a", "b"), False, rows, None)
    assert explain(result) == f"layer #1 differs (x vs {ABSENT}); it is in one image only"
    assert result.to_json()["first_layer"] == "#1" and result.to_json()["same"] is False
