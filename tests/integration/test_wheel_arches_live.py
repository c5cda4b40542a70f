"""Compiled arch lists read from real wheels on pypi.org by range requests; skipped when unreachable.

The readings are cached by sha256 in ~/.cache/envkit/metadata, so a second run reads no wheel.
"""

from __future__ import annotations

import pytest
from packaging.version import Version

from envkit.catalog.files import load_catalog
from envkit.catalog.refresh.arches import check_arches
from envkit.errors import PackageIndexError, WheelReadError
from envkit.index.client import PackageIndex
from envkit.index.wheel_arches import read_arches

pytestmark = pytest.mark.network


@pytest.fixture
def live_index(monkeypatch):
    monkeypatch.setattr("envkit.index.client.TIMEOUT", 20)
    return PackageIndex()


def _wheel(index, project, version, python):
    try:
        wheel = index.wheel_for(project, Version(version), python, "2.36")
    except PackageIndexError as exc:
        if isinstance(exc, WheelReadError):
            raise
        pytest.skip(f"package index unreachable: {exc.message}")
    assert wheel is not None
    return wheel


def test_torch_2_14_1_wheel_holds_no_ptx(live_index):
    """What last session read in a built image (torch._C._cuda_getArchFlags()), from the wheel alone."""
    wheel = _wheel(live_index, "torch", "2.14.1", "3.11")
    reading = read_arches(live_index, wheel, "torch")
    assert reading.flags == ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
    assert reading.arch_list == "7.5;8.0;8.6;9.0;10.0;12.0"
    assert reading.member == "torch/lib/libtorch_python.so" and reading.url.endswith(wheel.filename)
    # the catalog's 2.14 cu130 row (the index's default) says the same
    assert set(load_catalog().torch_release("2.14").variant("cu130").arches) == set(reading.flags)


def test_tensorflow_2_20_0_wheel_matches_the_image_reading(live_index):
    wheel = _wheel(live_index, "tensorflow", "2.20.0", "3.11")
    assert read_arches(live_index, wheel, "tensorflow").flags == ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90")


def test_the_packaged_catalog_agrees_with_every_readable_wheel(live_index):
    try:
        result = check_arches(load_catalog(), live_index, today="2026-12-03")
    except PackageIndexError as exc:
        pytest.skip(f"package index unreachable: {exc.message}")
    assert not result.changed, result.diff()
    assert {r["status"] for r in result.rows} == {"agrees"}, [r for r in result.rows if r["status"] != "agrees"]
