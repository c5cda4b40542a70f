"""index/wheel_needed.py: DT_NEEDED of a wheel's shared objects, over ELF files gcc builds in the test (stub CUDA
libraries with the real sonames, an extension module linking them) packed in a wheel read member by member."""

from __future__ import annotations

import io
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from envkit.errors import WheelReadError
from envkit.index.client import WheelFile
from envkit.index.wheel_needed import MAX_MEMBERS, needed, read_needed

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the test's shared objects")


def shared_object(tmp: Path, name: str, *, soname: str | None = None, links: tuple[str, ...] = ()) -> bytes:
    """A shared object built by gcc, with ``soname`` and a DT_NEEDED entry for each of ``links`` (stubs built
    beside it, each with that soname)."""
    src = tmp / "empty.c"
    src.write_text("int envkit_test_symbol(void) { return 0; }\n")
    args = []
    for lib in links:
        stub = tmp / lib
        if not stub.exists():
            subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{lib}", "-o", str(stub), str(src)], check=True)
        args += [f"-l:{lib}"]
    out = tmp / name
    subprocess.run(["gcc", "-shared", "-fPIC", *([f"-Wl,-soname,{soname}"] if soname else []), "-o", str(out),
                    str(src), f"-L{tmp}", "-Wl,--no-as-needed", *args], check=True)
    return out.read_bytes()


class ZipIndex:
    """A MembersIndex over wheels held in memory (what PackageIndex reads by range requests)."""

    def __init__(self, wheels: dict[str, bytes]):
        self.wheels, self.reads, self.cache = wheels, [], {}

    def members(self, wheel):
        return [(i.filename, i.file_size) for i in zipfile.ZipFile(io.BytesIO(self.wheels[wheel.filename])).infolist()]

    def member(self, wheel, name, *, max_bytes=0, what=None):
        self.reads.append(name)
        return zipfile.ZipFile(io.BytesIO(self.wheels[wheel.filename])).read(name)

    def cached(self, wheel, kind, compute):
        if (wheel.sha256, kind) not in self.cache:
            self.cache[wheel.sha256, kind] = compute()
        return self.cache[wheel.sha256, kind]


def wheel(filename: str, members: dict[str, bytes]) -> tuple[WheelFile, bytes]:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    from packaging.version import Version
    return WheelFile(filename, "https://x/" + filename, "ab" * 32, Version("1.0"),
                     frozenset({"cp311-cp311-manylinux_2_28_x86_64"}), False, False), buf.getvalue()


def test_needed_reads_the_sonames_a_shared_object_links(tmp_path):
    blob = shared_object(tmp_path, "ext.so", links=("libcudart.so.11.0", "libcublas.so.11"))
    libs = needed(blob)
    assert "libcudart.so.11.0" in libs and "libcublas.so.11" in libs
    assert not [x for x in needed(shared_object(tmp_path, "plain.so")) if x.startswith("libcu")]
    with pytest.raises(WheelReadError, match="not a readable ELF"):
        needed(b"\x7fELF" + b"\0" * 10, "pkg/x.so")


def test_a_wheels_smallest_shared_objects_are_read_and_cached(tmp_path):
    ext = shared_object(tmp_path, "runtime.so", links=("libcudart.so.11.0",))
    big = shared_object(tmp_path, "big.so", links=("libcudnn.so.8",)) + b"\0" * 100_000  # padding: still an ELF
    w, data = wheel("pkg-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                    {"pkg/runtime.cpython-311-x86_64-linux-gnu.so": ext, "pkg/libs/libbig.so.1": big,
                     "pkg/__init__.py": b"", "pkg-1.0.dist-info/METADATA": b"Name: pkg\n"})
    index = ZipIndex({w.filename: data})
    found = read_needed(index, w)
    assert set(found) == {"pkg/runtime.cpython-311-x86_64-linux-gnu.so", "pkg/libs/libbig.so.1"}
    assert "libcudart.so.11.0" in found["pkg/runtime.cpython-311-x86_64-linux-gnu.so"]
    assert "libcudnn.so.8" in found["pkg/libs/libbig.so.1"]
    assert index.reads[0] == "pkg/runtime.cpython-311-x86_64-linux-gnu.so"  # smallest first
    assert read_needed(index, w) == found and len(index.reads) == 2  # the second reading is the cache's


def test_at_most_max_members_are_read(tmp_path):
    so = shared_object(tmp_path, "m.so")
    w, data = wheel("many-1.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                    {f"many/m{i:02d}.so": so for i in range(MAX_MEMBERS + 3)})
    index = ZipIndex({w.filename: data})
    assert len(read_needed(index, w)) == MAX_MEMBERS == len(index.reads)
