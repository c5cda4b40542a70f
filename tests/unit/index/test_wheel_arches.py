"""Compiled arch lists read from the wheels themselves: ``PackageIndex.member`` (range requests
against the local index server of test_index.py), ``envkit.index.wheel_arches`` (the parsers and the
notation), the refresh reading new rows' lists, and ``envkit catalog check-arches`` on recorded
index answers (tests/unit/refreshfake.py). No network but 127.0.0.1.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from unittest import mock

import pytest
import yaml
from click.testing import CliRunner

from envkit.catalog.files import CATALOG_ENV, load_catalog
from envkit.catalog.refresh.torch import refresh
from envkit.catalog.refresh.arches import check_arches
from envkit.catalog.refresh.tensorflow import refresh as tf_refresh
from envkit.errors import CatalogError, PackageIndexError, WheelReadError
from envkit.index.wheel_arches import CACHE_KIND, read_arches, tf_flags, to_arch_list, torch_flags

from tests.unit.refreshfake import TODAY, FakeIndex, copy_catalog, snapshot
from tests.unit.index.test_index import Wheel, _loopback_only, make_index, server  # noqa: F401 - fixtures

TORCH_SO = "torch/lib/libtorch_python.so"
TF_INFO = "tensorflow/python/platform/build_info.py"
FLAGS_2_14 = b"sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"


def so_bytes(*strings: bytes, size: int = 1 << 20) -> bytes:
    """A shared object's worth of random bytes with ``strings`` embedded as NUL-terminated C strings."""
    body = bytearray(os.urandom(size).replace(b"sm_", b"xx_").replace(b"compute_", b"xxxxxxx_"))
    for i, s in enumerate(strings):
        at = (i + 1) * size // (len(strings) + 1)
        body[at: at + len(s) + 2] = b"\0" + s + b"\0"
    return bytes(body)


def build_info(caps: list[str], ordered: bool = True) -> bytes:
    items = [("cpu_compiler", "clang"), ("cuda_compute_capabilities", caps), ("cuda_version", "12.5.1")]
    value = f"collections.OrderedDict({items!r})" if ordered else repr(dict(items))
    return f'"""Auto-generated."""\nimport collections\n\nbuild_info = {value}\n'.encode()


def wheel_with(filename: str, members: dict[str, bytes], *, zip64: bool = False) -> Wheel:
    def build() -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr(zipfile.ZipInfo("torch/__init__.py"), "", compress_type=zipfile.ZIP_DEFLATED)
            for name, data in members.items():
                zf.writestr(zipfile.ZipInfo(name), data, compress_type=zipfile.ZIP_DEFLATED)
            zf.writestr(zipfile.ZipInfo("torch-2.14.1.dist-info/METADATA"), "Name: torch\nVersion: 2.14.1\n")
        return buf.getvalue()

    if zip64:  # zip64 extras and end records, as a >4 GiB wheel has them
        with mock.patch.object(zipfile, "ZIP64_LIMIT", 1 << 16):
            data = bytearray(build())
        eocd = data.rfind(b"PK\x05\x06")
        data[eocd + 16: eocd + 20] = (0xFFFFFFFF).to_bytes(4, "little")
        data = bytes(data)
    else:
        data = build()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert all(zf.read(n) == d for n, d in members.items())
    return Wheel(filename, data, "", 0)


WHEEL = "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"


# --- the parsers and the notation ------------------------------------------------------------
def test_torch_flags_is_the_one_run_of_arch_tokens():
    blob = so_bytes(b"ipc_handle", b"CUDA error: no kernel image for sm_80", FLAGS_2_14)
    assert torch_flags(blob) == tuple(FLAGS_2_14.decode().split())
    # not NUL-bounded on the left (torch 2.8.0's .rodata: '...ipc_hsm_70 sm_75 ...'), still read
    assert torch_flags(b"std::string ipc_h" + FLAGS_2_14 + b"\0\0") == tuple(FLAGS_2_14.decode().split())
    # the same string twice is one candidate
    assert torch_flags(so_bytes(FLAGS_2_14, FLAGS_2_14)) == tuple(FLAGS_2_14.decode().split())


def test_torch_flags_refuses_two_candidates_and_none():
    with pytest.raises(WheelReadError, match="2 different strings look like CUDA arch flags"):
        torch_flags(so_bytes(FLAGS_2_14, b"sm_50 sm_60 compute_60"))
    with pytest.raises(WheelReadError, match="no CUDA arch flags string"):
        torch_flags(so_bytes(b"sm_90"))  # a lone token is never taken for the list


@pytest.mark.parametrize("ordered", [True, False])
def test_tf_flags_from_build_info(ordered):
    caps = ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"]
    assert tf_flags(build_info(caps, ordered)) == tuple(caps)


@pytest.mark.parametrize("source,match", [
    (b"build_info = {'cuda_version': '12'}\n", "no one non-empty"),
    (b"x = 1\n", "0 assignments"),
    (b"build_info = dict(a=f())\n", "not a literal"),
    (build_info(["sm_60", "gfx90a"]), "'gfx90a'"),
    (b"def (:\n", "not Python source"),
])
def test_tf_flags_refuses_what_it_cannot_read(source, match):
    with pytest.raises(WheelReadError, match=match):
        tf_flags(source)


@pytest.mark.parametrize("flags,text", [
    (("sm_75", "sm_80", "sm_120"), "7.5;8.0;12.0"),
    (("sm_75", "sm_120", "compute_120"), "7.5;12.0+PTX"),
    (("sm_90a", "sm_100f", "compute_100f"), "9.0a;10.0f+PTX"),  # arch-specific suffixes kept
    (("sm_60", "sm_80", "compute_90"), None),  # PTX without its SASS: no TORCH_CUDA_ARCH_LIST spelling
])
def test_to_arch_list(flags, text):
    from envkit.catalog.models import arches_of

    assert to_arch_list(flags) == text
    if text is not None:
        assert set(arches_of(text)) == set(flags)  # and the catalog reads it back to the same targets


# --- one member by range requests ------------------------------------------------------------
@pytest.mark.parametrize("zip64", [False, True])
def test_member_reads_only_the_directory_and_the_member(server, tmp_path, zip64):
    so = so_bytes(FLAGS_2_14, size=3 << 20)
    w = wheel_with(WHEEL, {TORCH_SO: so, "torch/lib/libtorch_cuda.so": os.urandom(2 << 20)}, zip64=zip64)
    server.add("torch", w)
    idx = make_index(server, tmp_path / "cache")
    wheel = idx.wheels("torch")[0]
    assert idx.member(wheel, TORCH_SO) == so
    hits = server.file_hits(WHEEL)
    assert all(h.status == 206 for h in hits) and len(hits) <= 3
    assert sum(h.sent for h in hits) < len(so) + 200_000  # not the 2 MiB neighbour, not the wheel


def test_read_arches_is_cached_by_sha256(server, tmp_path):
    server.add("torch", wheel_with(WHEEL, {TORCH_SO: so_bytes(FLAGS_2_14)}))
    idx = make_index(server, tmp_path / "cache")
    wheel = idx.wheels("torch")[0]
    first = read_arches(idx, wheel, "torch")
    assert first.flags == tuple(FLAGS_2_14.decode().split()) and first.arch_list == "7.5;8.0;8.6;9.0;10.0;12.0"
    assert first.url == wheel.url.split("#")[0] and first.member == TORCH_SO
    hits, fetched = len(server.hits), idx.bytes_fetched
    again = read_arches(make_index(server, tmp_path / "cache"), wheel, "torch")
    assert again == first and len(server.hits) == hits  # no request at all
    assert json.loads((tmp_path / "cache" / f"{wheel.sha256}.{CACHE_KIND}").read_text())["flags"] == list(first.flags)
    assert fetched > 0


def test_a_missing_member_is_a_wheel_read_error_and_not_cached(server, tmp_path):
    server.add("torch", wheel_with(WHEEL, {"torch/lib/libc10.so": b"\0" * 100}))
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(WheelReadError, match=f"has no member {TORCH_SO}"):
        read_arches(idx, idx.wheels("torch")[0], "torch")
    assert not list((tmp_path / "cache").glob(f"*.{CACHE_KIND}"))


def test_an_ambiguous_string_is_refused(server, tmp_path):
    server.add("torch", wheel_with(WHEEL, {TORCH_SO: so_bytes(FLAGS_2_14, b"sm_50 sm_60")}))
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(WheelReadError, match="refusing to guess"):
        read_arches(idx, idx.wheels("torch")[0], "torch")


def test_a_member_over_the_cap_is_refused_before_it_is_fetched(server, tmp_path):
    server.add("torch", wheel_with(WHEEL, {TORCH_SO: so_bytes(FLAGS_2_14)}))
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(WheelReadError, match="over the cap of 1,000"):
        idx.member(idx.wheels("torch")[0], TORCH_SO, max_bytes=1000)
    assert len(server.file_hits(WHEEL)) == 1  # only the tail with the directory


def test_a_server_without_ranges_is_a_wheel_read_error(server, tmp_path):
    server.add("torch", wheel_with(WHEEL, {TORCH_SO: so_bytes(FLAGS_2_14)}))
    server.ignore_range = True
    idx = make_index(server, tmp_path / "cache")
    with pytest.raises(WheelReadError, match="does not serve byte ranges"):
        read_arches(idx, idx.wheels("torch")[0], "torch")


def test_an_unreachable_index_is_not_a_wheel_read_error(tmp_path):
    from envkit.index.client import PackageIndex, WheelFile
    from packaging.version import Version

    idx = PackageIndex("http://127.0.0.1:9/simple", cache_dir=tmp_path)
    wheel = WheelFile(WHEEL, "http://127.0.0.1:9/files/" + WHEEL, "ab" * 32, Version("2.14.1"), frozenset(), False, False)
    with pytest.raises(PackageIndexError) as exc:
        read_arches(idx, wheel, "tensorflow")
    assert not isinstance(exc.value, WheelReadError)


# --- the refresh reads new rows' lists -----------------------------------------------------------
W216 = "torch-2.16.0-cp312-cp312-manylinux_2_28_x86_64.whl"


def test_refresh_reads_a_new_series_arch_list_from_its_wheel(tmp_path):
    cat = copy_catalog(tmp_path)
    index = FakeIndex(members={(W216, TORCH_SO): so_bytes(b"sm_75 sm_80 sm_90 sm_100 sm_120 compute_120")})
    result = refresh(load_catalog(cat), index, today=TODAY, data_dir=cat)
    (row,) = [e for e in result.entries if e["version"] == "2.16"]
    assert row["variants"][0]["arch_list"] == "7.5;8.0;9.0;10.0;12.0+PTX"
    assert f"arch_list read from {TORCH_SO} in {W216} (https://" in row["note"]
    assert not any("carried over" in w for w in result.warnings)
    assert (W216, TORCH_SO) in index.member_reads


def test_tf_refresh_reads_a_new_series_arches_from_its_wheel(tmp_path):
    cat = copy_catalog(tmp_path)
    w = "tensorflow-2.22.0-cp312-cp312-manylinux_2_27_x86_64.whl"
    index = FakeIndex(members={(w, TF_INFO): build_info(["sm_70", "sm_80", "sm_90", "compute_100"])})
    result = tf_refresh(load_catalog(cat), index, today=TODAY, data_dir=cat)
    result.apply()
    release = next(r for r in load_catalog(cat).tensorflow.releases if r.version == "2.22")
    assert release.arches == ("sm_70", "sm_80", "sm_90", "compute_100")
    assert f"arches read from {TF_INFO} in {w}" in (cat / "tensorflow.yaml").read_text()
    assert not result.warnings


# --- envkit catalog check-arches -----------------------------------------------------------------
W2141 = "torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"
W2150 = "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl"
TF2210 = "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl"


def recorded_index(over: dict | None = None):
    members = {(W2141, TORCH_SO): so_bytes(FLAGS_2_14),  # agrees with the 2.14 cu130 row
               (W2150, TORCH_SO): so_bytes(b"sm_80 sm_90 sm_100 sm_120 compute_120"),  # 2.15 cu132 row differs
               (TF2210, TF_INFO): build_info(["sm_70", "sm_80", "sm_89", "compute_90"])}  # the 2.21 row differs
    return FakeIndex(members={**members, **(over or {})})


def test_check_arches_proposes_corrections_with_sources(tmp_path):
    cat = copy_catalog(tmp_path)
    before = snapshot(cat)
    result = check_arches(load_catalog(cat), recorded_index(), today=TODAY, data_dir=cat)
    assert snapshot(cat) == before  # reads only
    status = {(r["framework"], r["version"]): r["status"] for r in result.summary()["rows"]}
    assert status[("torch", "2.14.1")] == "agrees" and status[("torch", "2.15.0")] == "corrected"
    assert status[("torch", "2.13.0")] == "unread"  # the recorded listing has no 2.13 wheel
    assert status[("tensorflow", "2.21.0")] == "corrected" and status[("tensorflow", "2.20.0")] == "unread"
    diff = result.diff()
    assert '+      - {tag: cu132, cuda: "13.2", status: stable, cudnn: "9.26.0.51", nccl: "2.30.7", ' \
           'arch_list: "8.0;9.0;10.0;12.0+PTX"}' in diff
    assert "+  wheel_arches_torch_2_15_0: " in diff and "+  wheel_arches_tensorflow_2_21_0: " in diff
    assert any("left unconfirmed: 2.0 cu118" in n for n in result.notes)

    written = result.apply()
    assert sorted(p.name for p in written) == ["pytorch.yaml", "sources.yaml", "tensorflow.yaml"]
    catalog = load_catalog(cat)  # validates: every source key exists
    assert catalog.torch_release("2.15").variant("cu132").arches == ("sm_80", "sm_90", "sm_100", "sm_120", "compute_120")
    assert "wheel_arches_torch_2_15_0" in catalog.torch_release("2.15").sources
    tf = next(r for r in catalog.tensorflow.releases if r.version == "2.21")
    assert tf.arches == ("sm_70", "sm_80", "sm_89", "compute_90")
    assert W2150 in catalog.source("wheel_arches_torch_2_15_0") and "libtorch_python.so" in \
        catalog.source("wheel_arches_torch_2_15_0")
    # a second check finds nothing to change
    again = check_arches(catalog, recorded_index(), today=TODAY, data_dir=cat)
    assert not again.changed and again.diff() == ""


def test_check_arches_refuses_a_file_changed_since_it_was_read(tmp_path):
    cat = copy_catalog(tmp_path)
    result = check_arches(load_catalog(cat), recorded_index(), today=TODAY, data_dir=cat, frameworks=("torch",))
    (cat / "pytorch.yaml").write_text((cat / "pytorch.yaml").read_text() + "# edited\n")
    with pytest.raises(CatalogError, match="changed since the refresh read it"):
        result.apply()


def test_check_arches_leaves_an_unspellable_torch_list_to_a_human(tmp_path):
    cat = copy_catalog(tmp_path)
    index = recorded_index({(W2150, TORCH_SO): so_bytes(b"sm_80 sm_90 compute_100")})
    result = check_arches(load_catalog(cat), index, today=TODAY, data_dir=cat, frameworks=("torch",))
    assert not result.changed
    assert any("cannot spell" in w for w in result.warnings)


def test_check_arches_cli_applies_to_the_team_catalog(tmp_path, monkeypatch):
    from envkit.cli import main

    cat = copy_catalog(tmp_path)
    monkeypatch.setenv(CATALOG_ENV, str(cat))
    monkeypatch.setattr("envkit.app.catalog.PackageIndex", lambda *a, **k: recorded_index())
    out = CliRunner().invoke(main, ["catalog", "check-arches", "--framework", "torch", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["changed"] and doc["files"] == [str(cat / "pytorch.yaml"), str(cat / "sources.yaml")]
    assert "torch" in {r["framework"] for r in doc["rows"]} and "tensorflow" not in {r["framework"] for r in doc["rows"]}
    assert load_catalog(cat).torch_release("2.15").variant("cu132").arch_list == "7.5;8.0;8.6;9.0;10.0;12.0"  # not yet
    out = CliRunner().invoke(main, ["catalog", "check-arches", "--framework", "torch", "--apply"])
    assert out.exit_code == 0, out.output
    assert load_catalog(cat).torch_release("2.15").variant("cu132").arch_list == "8.0;9.0;10.0;12.0+PTX"
    assert yaml.safe_load((cat / "sources.yaml").read_text())["sources"]["wheel_arches_torch_2_15_0"]


def test_every_arch_listed_framework_has_its_catalog_files_check():
    from envkit.catalog.refresh.arches import CATALOG_FILE_CHECKS
    from envkit.frameworks import ARCH_LISTED

    assert set(CATALOG_FILE_CHECKS) == set(ARCH_LISTED)
