"""The committed example lock, build contexts and compose file match what envkit produces.

A committed context holds what render writes less the payload's copy (``envkit/envkit_check/``, gitignored: render
writes it, as `make demo` does); its ``payload.sha256`` names the payload it was rendered with, so a payload edit
that the committed context does not reflect fails here by its digest."""

import subprocess
from pathlib import Path

import pytest

from envkit.lock import load_lock
from envkit.app.resolve import check_lock
from envkit.payload.contents import PAYLOAD_NAME, payload_sha256
from envkit.render.files import PAYLOAD_DIGEST, render
from tests.conftest import ROOT

SPEC = ROOT / "examples" / "team.yaml"
PAYLOAD_COPY = f"envkit/{PAYLOAD_NAME}/"


def _tree(root: Path) -> dict[str, bytes]:
    """A context's files less its payload copy (present in a checkout where render or `make demo` ran)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not str(p.relative_to(root)).startswith(PAYLOAD_COPY)}


def test_example_lock_is_current():
    assert check_lock(SPEC) == [], "examples/team.lock is stale: run `envkit resolve examples/team.yaml`"


def test_committed_dockerfiles_and_compose_match_render(tmp_path, monkeypatch):
    """The committed contexts are BuildKit's: what `envkit render` writes by default, and what `make demo` (`envkit
    build`, which writes the contexts it builds) writes wherever BuildKit can build."""
    monkeypatch.chdir(ROOT)
    lock = load_lock(SPEC.with_suffix(".lock"))
    render(lock, tmp_path, "examples/team.yaml", buildkit=True)
    for image in lock.images:
        fresh = _tree(tmp_path / "dockerfiles" / image.name)
        committed = _tree(ROOT / "dockerfiles" / image.name)
        assert committed == fresh, f"dockerfiles/{image.name} drifted: run `envkit render examples/team.yaml`"
        digest = committed[PAYLOAD_DIGEST].decode().split()[0]
        assert digest == payload_sha256(), f"dockerfiles/{image.name}/{PAYLOAD_DIGEST} names another payload"
    compose = f"compose/{lock.team}.yaml"
    assert (ROOT / compose).read_bytes() == (tmp_path / compose).read_bytes(), f"{compose} drifted"


def test_no_copy_of_the_payload_is_committed():
    """The payload lives once, in envkit/payload/envkit_check/: a build context's copy is render's output."""
    try:
        tracked = subprocess.run(["git", "ls-files", "dockerfiles"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert tracked, "git lists no file under dockerfiles/"
    assert not [p for p in tracked if f"/{PAYLOAD_COPY}" in p], "a copy of the payload is committed under dockerfiles/"
