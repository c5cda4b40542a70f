"""The committed example lock, build contexts and compose file match what envkit produces."""

from pathlib import Path

from envkit.lock import load_lock
from envkit.app.resolve import check_lock
from envkit.render.files import render
from tests.conftest import ROOT

SPEC = ROOT / "examples" / "team.yaml"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_example_lock_is_current():
    assert check_lock(SPEC) == [], "examples/team.lock is stale: run `envkit resolve examples/team.yaml`"


def test_committed_dockerfiles_and_compose_match_render(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    lock = load_lock(SPEC.with_suffix(".lock"))
    render(lock, tmp_path, "examples/team.yaml")
    for image in lock.images:
        fresh = _tree(tmp_path / "dockerfiles" / image.name)
        committed = _tree(ROOT / "dockerfiles" / image.name)
        assert committed == fresh, f"dockerfiles/{image.name} drifted: run `envkit render examples/team.yaml`"
    compose = f"compose/{lock.team}.yaml"
    assert (ROOT / compose).read_bytes() == (tmp_path / compose).read_bytes(), f"{compose} drifted"
