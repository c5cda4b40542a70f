"""`catalog refresh` against the real package index (pypi.org) for PyTorch, JAX and
TensorFlow; skipped when unreachable.

Wheel METADATA is read by HTTP range requests and cached in ~/.cache/envkit/metadata, so
a second run makes only the listing requests.
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from envkit.catalog.files import data_dir, load_catalog
from envkit.catalog.refresh.torch import refresh
from envkit.catalog.refresh.run import refresh_catalog
from envkit.catalog.refresh.jax import refresh as refresh_jax
from envkit.catalog.refresh.tensorflow import refresh as refresh_tf
from envkit.errors import PackageIndexError
from envkit.index.client import PackageIndex
from tests.unit.refreshfake import drop_companions

pytestmark = pytest.mark.network

TODAY = "2026-12-02"


@pytest.fixture
def live_index(monkeypatch):
    monkeypatch.setattr("envkit.index.client.TIMEOUT", 20)  # an unreachable index skips in seconds, not minutes
    return PackageIndex()


@pytest.fixture
def cat_dir(tmp_path):
    out = tmp_path / "catalog"
    out.mkdir()
    for src in sorted(data_dir().glob("*.yaml")):
        shutil.copyfile(src, out / src.name)
    return out


def _refresh(directory, index, how=refresh):
    try:
        return how(load_catalog(directory), index, today=TODAY, data_dir=directory)
    except PackageIndexError as exc:
        pytest.skip(f"package index unreachable: {exc.message}")


def _drop_line(path, needle):
    lines = path.read_text().splitlines(keepends=True)
    (hit,) = [line for line in lines if needle in line]
    path.write_text("".join(line for line in lines if line is not hit))
    return hit


def _check_entries(result):
    if result.framework != "torch":
        return
    for row in result.entries:
        default = next(v for v in row["variants"] if v["tag"] == row["index_default"])
        for key in ("cuda", "cudnn", "nccl"):
            assert default[key], f"{row['version']}: no {key} in the proposed {default['tag']} variant"


def test_live_refresh_on_a_catalog_copy(cat_dir, live_index):
    """All three frameworks, as `envkit catalog refresh` runs them; what is proposed is printed."""
    result = _refresh(cat_dir, live_index, refresh_catalog)
    assert [r.framework for r in result.results] == ["torch", "jax", "tensorflow"]
    for r in result.results:
        _check_entries(r)
        for read in r.reads:
            doc = read.to_json()
            assert doc["source"].startswith("https://"), doc  # every read names the metadata's URL
    summary = result.summary()
    print(summary["diff"] or "(no change proposed)")
    for line in summary["notes"] + summary["warnings"]:
        print(line)
    if result.changed:
        result.apply(cat_dir)
        load_catalog(cat_dir)


def test_live_refresh_rederives_a_known_series(cat_dir, live_index):
    """Drop the 2.15 row (itself read live) and check refresh proposes the same pins."""
    path = cat_dir / "pytorch.yaml"
    lines = path.read_text().splitlines(keepends=True)
    start = lines.index('  - version: "2.15"\n')
    end = start + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    path.write_text("".join(lines[:start] + lines[end:]))
    drop_companions(cat_dir, "torch", "2.15")  # a companions row names a release of its framework's file
    result = _refresh(cat_dir, live_index)
    _check_entries(result)
    row = next((r for r in result.entries if r["version"] == "2.15"), None)
    assert row is not None, "the index lists torch 2.15.0; refresh should propose the 2.15 series"
    known = load_catalog().torch_release("2.15")
    assert row["index_default"] == known.index_default
    variant = row["variants"][0]
    expected = known.variant(known.index_default)
    assert (variant["cuda"], variant["cudnn"], variant["nccl"]) == (expected.cuda, expected.cudnn, expected.nccl)
    # read from the 2.15.0 wheel's libtorch_python.so (once carried over from 2.14 cu132: '...;12.0+PTX', wrong)
    assert variant["arch_list"] == expected.arch_list == "7.5;8.0;8.6;9.0;10.0;12.0"
    assert row["verified"] == "partial" and "arch_list read from torch/lib/libtorch_python.so in torch-2.15.0-" in row["note"]
    assert not [w for w in result.warnings if "carried over" in w]


def test_live_jax_rederives_a_known_version(cat_dir, live_index):
    """Drop 0.12.0.1 (on the index since before 2026-12-02) and check what the index gives for it."""
    path = cat_dir / "jax.yaml"
    path.write_text(path.read_text().replace('["0.12.0.1", "0.12.0", ', '["0.12.0", ', 1))
    drop_companions(cat_dir, "jax", "0.12.0.1")
    result = _refresh(cat_dir, live_index, refresh_jax)
    assert "0.12.0.1" in result.added_patches, result.warnings
    read = next(r for r in result.reads if r.version == "0.12.0.1").to_json()
    assert read["jaxlib"] == "0.12.0.1"
    known = load_catalog().jax
    extras = {p["extra"]: p for p in read["extras"]}
    assert set(extras) == {e.extra for e in known.extras}
    for e in known.extras:
        got = extras[e.extra]
        assert got["version"] == got["pjrt"] == "0.12.0.1"
        assert got["cuda_runtime"].split(".")[0] == e.extra.removeprefix("cuda")
    assert read["python_range"]["min"] == known.python_range("0.12.0.1").min


def test_live_tensorflow_rederives_the_2_21_row(cat_dir, live_index):
    known = _drop_line(cat_dir / "tensorflow.yaml", '{version: "2.21"')
    drop_companions(cat_dir, "tensorflow", "2.21")
    result = _refresh(cat_dir, live_index, refresh_tf)
    row = next((r for r in result.entries if r["version"] == "2.21"), None)
    assert row is not None, result.warnings
    assert row == yaml.safe_load(known.strip()[2:])  # the hand-written row, from the index's metadata
