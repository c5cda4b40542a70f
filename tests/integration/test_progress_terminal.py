"""The build's progress as a person at a terminal sees it: `envkit build` in a pseudo-terminal (pexpect) shows a bar
whose step count advances during a real build, and the install's packages and bytes (the lock's wheel sizes) against
the lock's totals; plain lines where stderr is no terminal.

The build is real, with the classic builder, of a small lock of its own: examples/team.yaml under another team name,
its image's closure numpy, typing-extensions and the CUDA runtime wheel (one package per install group, so the bar's
bytes move three times; pins no other test's image has), with their wheel sizes as the index lists them. The module
builds it once with plain lines (`ci_build`: what a CI log gets), which also prepares the classic builder's cache the
terminal's build (under another team, so not skipped as unchanged) then takes every step from. The images and their
stage images are removed afterwards. (Until 2026-12-07 this built the example's whole 3 GB torch closure, 2-3
minutes of a cold suite, for a bar that shows the same with three packages.)"""

import os
import re
import subprocess
import sys

import pytest

from tests.integration.conftest import ENVKIT, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.network]  # (its closure and wheel sizes: uv asks PyPI)
TEAM, CI_TEAM = "progressview", "progressview-ci"
# name -> (version, the lock's group); the nvidia-* wheel of the framework group gets a layer of its own (render.files)
PINS = {"nvidia-cuda-runtime-cu12": ("12.4.99", "framework"), "numpy": ("1.25.2", "framework"),
        "typing-extensions": ("4.4.0", "extra")}


def small_closure():
    """PINS as the lock's packages, with their hashes and wheel sizes (uv's answers for the image's platform)."""
    from envkit.index.closure import compile_closure, locked_wheels
    from envkit.lock import Package

    pins = compile_closure([f"{n}=={v}" for n, (v, _) in PINS.items()], python="3.11", glibc="2.36",
                           index_url="https://pypi.org/simple")
    sizes = {w.name: w.size for w in locked_wheels([(p.name, p.version) for p in pins], python="3.11", glibc="2.36",
                                                   index_url="https://pypi.org/simple")}
    assert sorted(p.name for p in pins) == sorted(PINS) and all(sizes.values()), (pins, sizes)
    return tuple(Package(name=p.name, version=p.version, hashes=p.hashes, group=PINS[p.name][1], size=sizes[p.name])
                 for p in pins)


def team_spec(directory, team: str, packages):
    """examples/team.yaml under another team name, and its lock: the committed one's image with ``packages`` (the
    lock's team and spec digest rewritten)."""
    from envkit.lock import load_lock, sealed, write_lock
    from envkit.resolve.plan import spec_digest
    from envkit.spec import load_spec

    spec = directory / "team.yaml"
    spec.write_text((ROOT / "examples" / "team.yaml").read_text().replace("team: vision", f"team: {team}"))
    lock = load_lock(ROOT / "examples" / "team.lock")
    image = sealed(lock.images[0].model_copy(update={"packages": packages}))
    write_lock(lock.model_copy(update={"team": team, "spec_digest": spec_digest(load_spec(spec)), "images": (image,)}),
               directory / "team.lock")
    return spec


@pytest.fixture(scope="module")
def packages(dc):
    yield small_closure()
    for team in (TEAM, CI_TEAM):
        for summary in dc.api.images(filters={"label": f"io.envkit.team={team}"}):
            try:
                dc.images.remove(summary["Id"], force=True)
            except Exception:  # noqa: BLE001 - already gone (a stage image removed with its child)
                pass


@pytest.fixture(scope="module")
def ci_build(packages, tmp_path_factory):
    """The build as a CI log gets it (plain lines), under a team of its own: it leaves the classic builder's cache
    of every step up to the team's labels, which the terminal's build (under another team, so not skipped as
    unchanged) then takes."""
    tmp_path = tmp_path_factory.mktemp("ci")
    spec = team_spec(tmp_path, CI_TEAM, packages)
    return subprocess.run([*ENVKIT, "build", str(spec), "--locked", "--no-verify", "--builder", "classic",
                           "--store", str(tmp_path / "h.sqlite"), "--out", str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "CI": "1", "XDG_DATA_HOME": str(tmp_path / "data")})


def test_a_terminal_sees_the_build_bar_advance(ci_build, packages, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40",
           "XDG_DATA_HOME": str(tmp_path / "data")}  # (the CI build's CA and proxy settings: its cache)
    env.pop("CI", None)
    assert ci_build.returncode == 0, ci_build.stderr[-3000:]  # (the cache this build takes every step from)
    # the classic builder reports each cached step as it takes it (BuildKit reports cached steps at once: the bar
    # would jump to the end)
    spec = team_spec(tmp_path, TEAM, packages)
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
                re.findall(r"\[torch25\] install: packages (\d+)/(\d+), ([\d.]+)/([\d.]+) MB", screen)]
    moved = sorted(set(installs))
    assert len({x for _, _, x, _ in moved}) >= 3, installs  # the bytes advanced, a group at a time
    assert [x for _, _, x, _ in installs] == sorted(x for _, _, x, _ in installs), installs
    megabytes = round(sum(p.size for p in packages) / 1e6, 2)
    assert installs[-1][:2] == (3, 3) and installs[-1][2] == installs[-1][3] == megabytes, installs  # all of it
    assert "\x1b[" in screen  # drawn as a terminal bar, not as plain lines
    assert f"{TEAM}/torch25:" in screen  # the outcome table


def test_a_ci_log_gets_plain_lines(ci_build, packages):
    assert ci_build.returncode == 0, ci_build.stderr[-3000:]
    assert "\x1b[" not in ci_build.stderr
    assert re.search(r"^envkit: \[torch25\] (step \d+/\d+: |unchanged since its last build)", ci_build.stderr, re.M)
    # the install's count reaches the lock's, whether its steps were built (uv's lines, which the engine's stream
    # cuts in pieces: engine.classic_log) or taken from the cache (a group at once)
    assert re.findall(r"^envkit: \[torch25\] packages (\d+)/(\d+)", ci_build.stderr, re.M)[-1] == ("3", "3"), \
        ci_build.stderr[-3000:]
