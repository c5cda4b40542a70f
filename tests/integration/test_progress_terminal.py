"""The build's progress as a person at a terminal sees it: `envkit build` in a pseudo-terminal (pexpect) shows a bar
whose step count advances during a real build, and the install's packages and bytes (the lock's wheel sizes) against
the lock's totals; plain lines where stderr is no terminal.

The build is real: examples/team.yaml's image under another team name, from the committed lock (its team and spec
digest rewritten), with the classic builder. The module builds it once with plain lines (`ci_build`: what a CI log
gets; its install steps built, or taken from the classic builder's cache where an earlier build left them: after
`make demo` on a fresh engine BuildKit built the example, so that cache holds part of it or nothing), which also
prepares the cache the terminal's build then takes every install step from. The images and their stage images are
removed afterwards."""

import os
import re
import subprocess
import sys

import pytest

from tests.integration.conftest import ENVKIT, ROOT

pytestmark = pytest.mark.integration
TEAM, CI_TEAM = "progressview", "progressview-ci"


def team_spec(directory, team: str):
    """examples/team.yaml and its committed lock under another team name (the lock's team and spec digest)."""
    from envkit.lock import load_lock, write_lock
    from envkit.resolve.plan import spec_digest
    from envkit.spec import load_spec

    spec = directory / "team.yaml"
    spec.write_text((ROOT / "examples" / "team.yaml").read_text().replace("team: vision", f"team: {team}"))
    lock = load_lock(ROOT / "examples" / "team.lock")
    write_lock(lock.model_copy(update={"team": team, "spec_digest": spec_digest(load_spec(spec))}),
               directory / "team.lock")
    return spec


@pytest.fixture(scope="module")
def teams(example_build, dc):
    yield
    for team in (TEAM, CI_TEAM):
        for summary in dc.api.images(filters={"label": f"io.envkit.team={team}"}):
            try:
                dc.images.remove(summary["Id"], force=True)
            except Exception:  # noqa: BLE001 - already gone (a stage image removed with its child)
                pass


@pytest.fixture(scope="module")
def ci_build(teams, tmp_path_factory):
    """The build as a CI log gets it (plain lines), under a team of its own: it leaves the classic builder's cache
    of every step up to the team's labels, which the terminal's build (under another team, so not skipped as
    unchanged) then takes."""
    tmp_path = tmp_path_factory.mktemp("ci")
    spec = team_spec(tmp_path, CI_TEAM)
    return subprocess.run([*ENVKIT, "build", str(spec), "--locked", "--no-verify", "--builder", "classic",
                           "--store", str(tmp_path / "h.sqlite"), "--out", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "CI": "1", "XDG_DATA_HOME": str(tmp_path / "data")})


def test_a_terminal_sees_the_build_bar_advance(ci_build, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40",
           "XDG_DATA_HOME": str(tmp_path / "data")}  # (the example build's CA and proxy settings: its cache)
    env.pop("CI", None)
    assert ci_build.returncode == 0, ci_build.stderr[-3000:]  # (the cache this build takes every step from)
    # the classic builder reports each cached step as it takes it (BuildKit reports cached steps at once: the bar
    # would jump to the end)
    spec = team_spec(tmp_path, TEAM)
    child = pexpect.spawn(sys.executable, ["-m", "envkit.cli", "build", str(spec), "--locked", "--no-verify",
                                           "--builder", "classic", "--store", str(tmp_path / "h.sqlite"),
                                           "--out", str(tmp_path / "out")],
                          cwd=str(ROOT), env=env, dimensions=(40, 120), timeout=900, encoding="utf-8")
    child.expect(pexpect.EOF)
    child.close()
    screen = child.before
    assert child.exitstatus == 0, screen[-3000:]
    seen = [(int(a), int(b)) for a, b in re.findall(r"\[torch25\] step: [^\r\n]*?(\d+)/(\d+)", screen)]
    done = [a for a, _ in seen]
    assert len(set(done)) >= 3 and done == sorted(done), seen  # the bar moved forward, step by step
    total = seen[-1][1]
    assert total > 5 and done[-1] == total  # and finished
    # the install's bar: packages and bytes against the lock's count and wheel sizes (each cached install step counts
    # its group at once), moving forward
    installs = [(int(a), int(b), float(x), float(y)) for a, b, x, y in
                re.findall(r"\[torch25\] install: packages (\d+)/(\d+), ([\d.]+)/([\d.]+) GB", screen)]
    moved = sorted(set(installs))
    assert len({x for _, _, x, _ in moved}) >= 2, installs  # the bytes advanced (the CUDA layer, then the rest)
    assert [x for _, _, x, _ in installs] == sorted(x for _, _, x, _ in installs), installs
    assert installs[-1][0] == installs[-1][1] and installs[-1][2] == installs[-1][3] == 3.02, installs  # all of it
    assert "\x1b[" in screen  # drawn as a terminal bar, not as plain lines
    assert f"{TEAM}/torch25:" in screen  # the outcome table


def test_a_ci_log_gets_plain_lines(ci_build):
    assert ci_build.returncode == 0, ci_build.stderr[-3000:]
    assert "\x1b[" not in ci_build.stderr
    assert re.search(r"^envkit: \[torch25\] (step \d+/\d+: |unchanged since its last build)", ci_build.stderr, re.M)
    # the install's count reaches the lock's, whether its steps were built (uv's lines, which the engine's stream
    # cuts in pieces: engine.classic_log) or taken from the cache (a group at once)
    assert re.findall(r"^envkit: \[torch25\] packages (\d+)/(\d+)", ci_build.stderr, re.M)[-1] == ("23", "23"), \
        ci_build.stderr[-3000:]
