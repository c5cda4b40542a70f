"""BuildKit builds on a Docker engine before 26.1 take turns (moby#46136: two at once leak disk space for good);
later engines and Podman build at once. The CLI here is a stand-in that waits for a file the test writes; the
leak itself, and that turns prevent it, on a real engine: tests/integration/test_buildkit_turns.py."""

import sys
import threading
import time

import pytest

from envkit.engine import buildkit
from envkit.engine.buildkit import BuildKitBuilder

CLI = """#!{python}
import pathlib, sys, time
args = sys.argv[1:]
tag, iid = args[args.index("-t") + 1], pathlib.Path(args[args.index("--iidfile") + 1])
here = pathlib.Path({here!r})
(here / f"started-{{tag}}").touch()
while not (here / f"release-{{tag}}").exists():
    time.sleep(0.01)
print("#1 [1/1] RUN true", flush=True)
iid.write_text(f"sha256:{{tag}}")
"""


class _Engine:
    def __init__(self, version: str, engine: str = "docker", root: str = "/var/lib/docker"):
        self.answer, self.root = {"engine": engine, "version": version}, root

    def version(self) -> dict:
        return self.answer

    def data_root(self) -> str:
        return self.root


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setattr(buildkit, "TURNS", tmp_path / "turns")
    (tmp_path / "turns").mkdir()
    path = tmp_path / "docker"
    path.write_text(CLI.format(python=sys.executable, here=str(tmp_path)))
    path.chmod(0o755)
    return path


def _start(builder: BuildKitBuilder, context, tag: str) -> tuple[threading.Thread, list]:
    said: list = []
    thread = threading.Thread(target=lambda: said.extend(builder.build(context, tag, {})), daemon=True)
    thread.start()
    return thread, said


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_builds_on_docker_20_10_take_turns(cli, tmp_path):
    builder = BuildKitBuilder(_Engine("20.10.24+dfsg1"), cli=str(cli))  # type: ignore[arg-type]
    first, said_first = _start(builder, tmp_path, "a")
    _until((tmp_path / "started-a").exists, "the first build did not start")
    second, said_second = _start(builder, tmp_path, "b")
    _until(lambda: said_second or not second.is_alive(), "the second build said nothing")
    time.sleep(0.3)
    assert not (tmp_path / "started-b").exists()  # the second waits while the first builds
    (tmp_path / "release-a").touch()
    _until((tmp_path / "started-b").exists, "the second build did not start after the first ended")
    (tmp_path / "release-b").touch()
    first.join(30), second.join(30)
    assert [e.text for e in said_first if e.kind == "done"] == ["sha256:a"]
    assert [e.text for e in said_second if e.kind == "done"] == ["sha256:b"]
    assert "moby#46136" in said_second[0].text and not any("moby#46136" in e.text for e in said_first)


@pytest.mark.parametrize("engine", [_Engine("26.1.0"), _Engine("27.3.1"), _Engine("4.3.1", engine="podman")])
def test_later_engines_build_at_once(cli, tmp_path, engine):
    builder = BuildKitBuilder(engine, cli=str(cli))  # type: ignore[arg-type]
    assert builder.turn_file() is None
    threads = [_start(builder, tmp_path, tag)[0] for tag in ("a", "b")]
    _until(lambda: (tmp_path / "started-a").exists() and (tmp_path / "started-b").exists(), "not both started")
    for tag in ("a", "b"):
        (tmp_path / f"release-{tag}").touch()
    for thread in threads:
        thread.join(30)


def test_each_engine_has_its_own_turn(monkeypatch):
    here, there = _Engine("20.10.24"), _Engine("20.10.24", root="/var/tmp/other/data")
    turn = BuildKitBuilder(here).turn_file()  # type: ignore[arg-type]
    assert turn is not None and turn.parent == buildkit.TURNS
    assert turn != BuildKitBuilder(there).turn_file()  # type: ignore[arg-type]
    monkeypatch.setenv("DOCKER_HOST", "ssh://builder.example")
    assert turn != BuildKitBuilder(here).turn_file()  # type: ignore[arg-type]


def test_a_turn_file_that_cannot_be_opened_is_named(cli, tmp_path):
    (tmp_path / "elsewhere").touch()
    builder = BuildKitBuilder(_Engine("20.10.24"), cli=str(cli))  # type: ignore[arg-type]
    builder.turn_file().symlink_to(tmp_path / "elsewhere")  # not followed
    with pytest.raises(buildkit.BuildError) as err:
        list(builder.build(tmp_path, "a", {}))
    assert str(builder.turn_file()) in err.value.message and "remove" in err.value.hint
