"""Integration fixtures: a real engine, and the example team built once per session."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENVKIT = [sys.executable, "-m", "envkit.cli"]


@pytest.fixture(scope="session")
def engine():
    from envkit.engine.docker_engine import connect
    from envkit.errors import EngineError

    try:
        return connect()
    except EngineError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no container engine: {exc.message}")


def envkit(*args, cwd=ROOT, check=False, timeout=3600):
    proc = subprocess.run([*ENVKIT, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"envkit {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def example_build(engine):
    """`envkit build examples/team.yaml --json`, run once (a real CUDA torch image). An example image whose
    classic-builder stage images are gone (a `docker image prune` on this engine since it was built) is removed
    first, so the build runs and leaves them again: tests read those stages, and the devel and layer tests
    build on their cached layers."""
    _rebuild_when_stages_were_pruned(engine)
    proc = envkit("build", "examples/team.yaml", "--json", check=True)
    return json.loads(proc.stdout), proc


def _rebuild_when_stages_were_pruned(engine) -> None:
    import docker.errors

    from envkit.engine.docker_gc import DockerImageHost
    from envkit.support.labels import LOCK_LABEL
    from envkit.lock import load_lock

    lock = load_lock(ROOT / "examples" / "team.lock")
    stages = {(s.lock_hash, s.stage) for s in DockerImageHost(engine.client).stage_images(lock.team)}
    for image in lock.images:
        if (image.hash, "extras") in stages:
            continue
        for built in engine.client.images.list(filters={"label": f"{LOCK_LABEL}={image.hash}"}):
            try:
                engine.client.images.remove(built.id, force=True)
            except docker.errors.APIError:
                pass  # in use, or an image built on it: the build is then skipped, as before


@pytest.fixture(scope="module")
def dc(engine):
    """The engine's docker-py client."""
    return engine.client


@pytest.fixture(scope="module")
def base(dc) -> str:
    """The smallest local envkit base image (~117 MB), for registry tests: never push the
    multi-GB framework images there (compressing and pushing them takes minutes)."""
    images = [i for i in dc.images.list(name="envkit-base/debian") if i.tags]
    if not images:
        pytest.skip("no local envkit-base/debian image (build the example team once, or bootstrap a base)")
    return min(images, key=lambda i: i.attrs["Size"]).tags[0]


def empty_store(tmp_path: Path) -> Path:
    """A history store with no record (``h.sqlite`` under ``tmp_path``), for commands that read one: a store
    named with --store must exist (show, run, ls and gc refuse a name that is not there)."""
    from envkit.store.history import Store

    path = tmp_path / "h.sqlite"
    Store.open(path).close()
    return path
