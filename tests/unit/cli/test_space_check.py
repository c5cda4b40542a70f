"""The pre-build disk check: the estimate from the lock's wheel sizes (``engine.space.build_need``), and `envkit build`
refusing (exit 17, nothing rendered or built) when the engine's disk has less free, unless --skip-space-check."""

import json

import pytest

from envkit.engine import space
from envkit.lock import load_lock, wheel_bytes
from tests.unit.cli.test_cli import ROOT, FakeEngine, example_resolved, invoke  # noqa: F401 (a fixture)

GB = 10**9


def test_the_estimate_is_the_images_kept_plus_the_largest_transient_plus_a_margin():
    assert space.build_need([]) == 0
    one = space.build_need([3 * GB])
    assert one == int(3.2 * 3 * GB) + space.BUILD_MARGIN  # one image: its peak
    two = space.build_need([3 * GB, 1 * GB])
    assert two == int(1.8 * 4 * GB + 1.4 * 3 * GB) + space.BUILD_MARGIN  # both kept, the larger's transient once
    example = wheel_bytes(load_lock(ROOT / "examples" / "team.lock").images[0].packages)
    assert 3.0 * GB < example < 3.1 * GB  # torch 2.5.1 cu124 + numpy: the measured build took 9.64 GB at its peak
    assert 9.64 * GB < space.build_need([example]) < 11.5 * GB


class Engine(FakeEngine):
    def __init__(self, root, built=None):
        self.root, self.built = root, built

    def data_root(self):
        return str(self.root)

    def find_image(self, labels):
        return self.built


@pytest.fixture
def engine_with(monkeypatch, tmp_path):
    def make(free, built=None):
        engine = Engine(tmp_path, built)
        monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: engine)
        monkeypatch.setattr(space, "free_bytes", lambda path: free if path == str(tmp_path) else None)
        return engine
    return make


@pytest.fixture
def builds(monkeypatch):
    started = []

    def build_image(engine, lock, image, *args, **kwargs):
        started.append(image.name)
        raise SystemExit(0)  # (what a build did is not this test's question)

    monkeypatch.setattr("envkit.app.build.build_image", build_image)
    return started


def test_a_build_the_disk_cannot_hold_is_refused_before_anything_is_written(example_resolved, engine_with, builds,
                                                                             tmp_path):
    engine_with(free=2 << 30)
    out = tmp_path / "out"
    result = invoke("build", "examples/team.yaml", "--no-verify", "--out", out, "--json")
    assert result.exit_code == 17, result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "DiskSpaceError"
    assert doc["message"] == f"building torch25 needs about 10.0 GiB on the engine's disk; {tmp_path} has 2.0 GiB free"
    assert "`envkit gc --dry-run`" in doc["hint"] and "--skip-space-check" in doc["hint"]
    assert builds == [] and not out.exists()  # nothing rendered, nothing built
    human = invoke("build", "examples/team.yaml", "--no-verify", "--out", out)
    assert human.exit_code == 17 and "error: " in human.stderr and "hint: `envkit gc --dry-run`" in human.stderr


def test_skip_space_check_builds_anyway(example_resolved, engine_with, builds, tmp_path):
    engine_with(free=2 << 30)
    result = invoke("build", "examples/team.yaml", "--no-verify", "--out", tmp_path / "out", "--skip-space-check")
    assert result.exit_code == 0 and builds == ["torch25"]


def test_enough_space_says_what_it_weighed(example_resolved, engine_with, builds, tmp_path):
    engine_with(free=50 << 30)
    result = invoke("build", "examples/team.yaml", "--no-verify", "--out", tmp_path / "out")
    assert builds == ["torch25"]
    assert "engine disk: 50.0 GiB free; the build needs about 10.0 GiB (from the lock's wheel sizes)" in result.stderr


def test_an_image_already_built_needs_no_space(example_resolved, engine_with, builds, tmp_path):
    engine_with(free=1 << 30, built=object())  # its lock's image exists: the build skips it
    result = invoke("build", "examples/team.yaml", "--no-verify", "--out", tmp_path / "out")
    assert builds == ["torch25"] and "engine disk" not in result.stderr


def test_each_builds_warning_uses_the_estimate_else_the_fixed_threshold(tmp_path, monkeypatch):
    class Root:
        def data_root(self):
            return str(tmp_path)

    monkeypatch.setattr(space, "free_bytes", lambda path: 5 << 30)
    assert "a CUDA framework image needs about 10 GB" in space.low_space(Root())  # a lock without sizes
    assert "this image needs about 8.0 GiB while it builds (from its lock's wheel sizes)" in space.low_space(
        Root(), 8 << 30)
    assert space.low_space(Root(), 2 << 30) is None  # a small image: no warning though under 10 GB
