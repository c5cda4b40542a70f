"""Docker 20.10's BuildKit loses disk space for good when two builds at once make the same step (moby#46136): the
step's snapshot directory stays in the data root after its images and the whole build cache are removed. Found by
`make test` (two workers building the same stacks; 5-40 GB a run, until the disk check refused a build), and
reproduced here on an engine of its own (``second_engine``: its data root is this test's alone to count): two
`docker build`s of one context at once leave a directory behind, and envkit's BuildKit builds, which take turns
on such an engine (``BuildKitBuilder.turn_file``), leave none. Each build is a 20 MB file copied onto nothing."""

import os
import subprocess
import threading
from pathlib import Path

import pytest

from envkit.engine.buildkit import DOCKER_CLI, BuildKitBuilder
from envkit.engine.docker_engine import connect
from tests.integration.second_engine import second_engine

pytestmark = pytest.mark.integration


def _context(directory: Path) -> Path:
    directory.mkdir()
    (directory / "big").write_bytes(os.urandom(20_000_000))  # new bytes: no build of an earlier round is reused
    (directory / "Dockerfile").write_text("FROM scratch\nCOPY big /big\n")
    return directory


def _layer_dirs(data: Path) -> set[str]:
    return {p.name for p in (data / "overlay2").iterdir() if p.name != "l"}


def _clean(address: str, tags: list[str]) -> None:
    """The images gone and the whole build cache pruned: what the engine still holds is what it lost."""
    for tag in tags:
        subprocess.run([DOCKER_CLI, "-H", address, "rmi", tag], capture_output=True, check=True)
    subprocess.run([DOCKER_CLI, "-H", address, "builder", "prune", "-af"], capture_output=True, check=True)


def test_two_buildkit_builds_at_once_lose_no_disk_space(tmp_path, monkeypatch):
    with second_engine() as address:
        engine = connect(address)
        data = Path(engine.data_root() or "")
        monkeypatch.setenv("DOCKER_HOST", address)  # the CLI builds where DOCKER_HOST says
        before = _layer_dirs(data)

        # the engine's fault, shown first: two plain `docker build`s at once
        context = _context(tmp_path / "plain")
        env = dict(os.environ, DOCKER_BUILDKIT="1")
        procs = [subprocess.Popen([DOCKER_CLI, "build", "-q", "-t", f"plain:{i}", str(context)], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in (1, 2)]
        assert [p.wait(timeout=300) for p in procs] == [0, 0], [p.stderr.read() for p in procs if p.stderr]
        _clean(address, ["plain:1", "plain:2"])
        lost = _layer_dirs(data) - before
        builder = BuildKitBuilder(engine)
        if not lost:
            assert builder.turn_file() is None, "the engine lost nothing, yet envkit takes turns on it"
            pytest.skip(f"this engine ({engine.version()['version']}) loses nothing to two builds at once")
        assert builder.turn_file() is not None

        # envkit's: the same, through BuildKitBuilder
        context = _context(tmp_path / "envkit")
        said: dict[str, list] = {}

        def build(tag: str) -> None:
            said[tag] = list(builder.build(context, tag, {}))

        threads = [threading.Thread(target=build, args=(f"turns:{i}",)) for i in (1, 2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        assert sorted(said) == ["turns:1", "turns:2"], said  # both built (a failure raised in its thread)
        _clean(address, ["turns:1", "turns:2"])
        assert _layer_dirs(data) - before == lost, "envkit's two builds left a layer directory behind"
        waited = [tag for tag, events in said.items() if any("moby#46136" in e.text for e in events)]
        assert len(waited) <= 1  # the second may start after the first ended: then neither waited
