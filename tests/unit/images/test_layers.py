"""The deterministic layer tar (``images.layers``), the bytecode step (``images.pycompile``): pure logic on files."""

from __future__ import annotations

import hashlib
import os
import sys
import tarfile
from pathlib import Path

import pytest

from envkit.images import layers
from envkit.render import pycompile
from envkit.errors import BuildError

EPOCH = 315532800


def _tree(root: Path, *, mtime: int, mode: int = 0o644) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "lib" / "pkg").mkdir(parents=True)
    (root / "lib" / "pkg" / "__init__.py").write_text("x = 1\n")
    (root / "lib" / "pkg" / "data.bin").write_bytes(b"\0" * 5000)
    (root / "lib" / "pkg" / "data.bin").chmod(mode)
    os.link(root / "lib" / "pkg" / "data.bin", root / "lib" / "pkg" / "same.bin")
    (root / "bin" / "python").symlink_to("/usr/bin/python3")
    for path in [*root.rglob("*"), root]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)


def _write(root: Path, out: Path) -> layers.Layer:
    return layers.write_layer(root, sorted(layers.snapshot(root)), out, epoch=EPOCH, prefix="opt/venv/")


def test_the_same_files_give_the_same_layer_whenever_and_however_written(tmp_path):
    _tree(tmp_path / "a", mtime=1_000_000_000)
    _tree(tmp_path / "b", mtime=1_700_000_000)
    first, second = _write(tmp_path / "a", tmp_path / "a.tar"), _write(tmp_path / "b", tmp_path / "b.tar")
    assert first.diff_id == second.diff_id
    assert first.diff_id == "sha256:" + hashlib.sha256((tmp_path / "a.tar").read_bytes()).hexdigest()
    assert first.size == (tmp_path / "a.tar").stat().st_size
    # and a mode is part of what a layer is
    _tree(tmp_path / "c", mtime=1_000_000_000, mode=0o600)
    assert _write(tmp_path / "c", tmp_path / "c.tar").diff_id != first.diff_id


def test_the_entries_are_sorted_with_fixed_times_owners_and_links(tmp_path):
    _tree(tmp_path / "a", mtime=1_000_000_000)
    _write(tmp_path / "a", tmp_path / "a.tar")
    with tarfile.open(tmp_path / "a.tar") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert names[:3] == ["opt", "opt/venv", "opt/venv/bin"]  # the directories above the tree, then the tree
    assert {(m.mtime, m.uid, m.gid, m.uname, m.gname) for m in members} == {(EPOCH, 0, 0, "", "")}
    assert all(not m.pax_headers for m in members)  # no atime/ctime, nothing of the host's
    by_name = {m.name: m for m in members}
    assert by_name["opt/venv/bin/python"].issym() and by_name["opt/venv/bin/python"].linkname == "/usr/bin/python3"
    assert by_name["opt/venv/lib/pkg/data.bin"].isfile() and by_name["opt/venv/lib/pkg/data.bin"].size == 5000
    assert by_name["opt/venv/lib/pkg/same.bin"].islnk()  # a hardlink stays one, to the first path written
    assert by_name["opt/venv/lib/pkg/same.bin"].linkname == "opt/venv/lib/pkg/data.bin"
    assert by_name["opt"].mode == 0o755 and by_name["opt"].isdir()


def test_a_long_path_is_still_deterministic(tmp_path):
    deep = tmp_path / "a" / ("d" * 90) / ("e" * 90)
    deep.mkdir(parents=True)
    (deep / "f.py").write_text("")
    first = _write(tmp_path / "a", tmp_path / "1.tar")
    os.utime(deep / "f.py", (5, 5))
    assert _write(tmp_path / "a", tmp_path / "2.tar").diff_id == first.diff_id
    with tarfile.open(tmp_path / "1.tar") as tar:
        assert any(m.name.endswith("/f.py") and len(m.name) > 100 for m in tar.getmembers())


def test_changed_holds_what_a_group_added_or_rewrote(tmp_path):
    root = tmp_path / "venv"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "old.py").write_text("a")
    (root / "lib" / "kept.py").write_text("k")
    before = layers.snapshot(root)
    (root / "lib" / "new.py").write_text("b")
    (root / "lib" / "old.py").write_text("aa")  # rewritten: in the new layer too
    assert layers.changed(before, layers.snapshot(root), "extra") == ["lib/new.py", "lib/old.py"]  # not lib/ itself


def test_a_group_that_removes_a_lower_groups_file_is_refused(tmp_path):
    root = tmp_path / "venv"
    root.mkdir()
    (root / "a.py").write_text("a")
    before = layers.snapshot(root)
    (root / "a.py").unlink()
    with pytest.raises(BuildError, match=r"installing the extra layer group removed 1 path\(s\).*a\.py"):
        layers.changed(before, layers.snapshot(root), "the extra layer group")


def test_a_files_layer_is_deterministic(tmp_path):
    files = {"expect.json": b"{}\n", "envkit_check/__main__.py": b"print(1)\n"}
    one = layers.write_files_layer(files, tmp_path / "1.tar", epoch=EPOCH, prefix="opt/envkit/")
    two = layers.write_files_layer(dict(reversed(files.items())), tmp_path / "2.tar", epoch=EPOCH, prefix="opt/envkit/")
    assert one.diff_id == two.diff_id
    with tarfile.open(tmp_path / "1.tar") as tar:
        assert [(m.name, m.mode) for m in tar.getmembers()] == [
            ("opt", 0o755), ("opt/envkit", 0o755), ("opt/envkit/envkit_check", 0o755),
            ("opt/envkit/envkit_check/__main__.py", 0o644), ("opt/envkit/expect.json", 0o644)]


def test_bytecode_has_no_mtime_and_skips_what_is_compiled(tmp_path, monkeypatch):
    src = tmp_path / "lib" / "m.py"
    src.parent.mkdir()
    src.write_text("X = frozenset({'a', 'b', 'c'})\n")
    (tmp_path / "lib" / "bad.py").write_text("def (:\n")
    assert pycompile.pending(str(tmp_path)) == [str(tmp_path / "lib" / "bad.py"), str(src)]
    pycompile.main(str(tmp_path))
    pyc = Path(pycompile.importlib.util.cache_from_source(str(src)))
    first = pyc.read_bytes()
    assert int.from_bytes(first[4:8], "little") == 0b01  # hash-based, unchecked: no mtime in the header
    assert pycompile.pending(str(tmp_path)) == [str(tmp_path / "lib" / "bad.py")]  # (it does not compile)
    pyc.unlink()
    os.utime(src, (7, 7))
    pycompile.main(str(tmp_path))
    assert pyc.read_bytes() == first


def test_the_bytecode_program_runs_alone(tmp_path):
    """The container runs the module's text with `python -I -c`: it needs nothing of envkit."""
    import subprocess

    (tmp_path / "m.py").write_text("Y = 2\n")
    text = Path(pycompile.__file__).read_text()
    subprocess.run([sys.executable, "-I", "-c", text, str(tmp_path)], check=True, env={"PYTHONHASHSEED": "0"})
    assert list((tmp_path / "__pycache__").glob("m.*.pyc"))
