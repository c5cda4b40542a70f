"""The build's progress as a person at a terminal sees it: `envkit build` in a pseudo-terminal (pexpect) shows a bar
whose step count advances during a real build, and the install's packages and bytes (the lock's wheel sizes) against
the lock's totals; plain lines where stderr is no terminal.

The build is small and real: examples/team.yaml's image under another team name, from the committed lock (its
team and spec digest rewritten), so every step up to the labels comes from the example build's cache and the rest is
built by the engine; the image and its stage images are removed afterwards."""

import os
import re
import subprocess
import sys

import pytest

from tests.integration.conftest import ENVKIT, ROOT

pytestmark = pytest.mark.integration
TEAM = "progressview"


@pytest.fixture
def small_spec(tmp_path, example_build, dc):
    from envkit.lock import load_lock, write_lock
    from envkit.resolve.plan import spec_digest
    from envkit.spec import load_spec

    spec = tmp_path / "team.yaml"
    spec.write_text((ROOT / "examples" / "team.yaml").read_text().replace("team: vision", f"team: {TEAM}"))
    lock = load_lock(ROOT / "examples" / "team.lock")
    write_lock(lock.model_copy(update={"team": TEAM, "spec_digest": spec_digest(load_spec(spec))}),
               tmp_path / "team.lock")
    yield spec
    for summary in dc.api.images(filters={"label": f"io.envkit.team={TEAM}"}):
        try:
            dc.images.remove(summary["Id"], force=True)
        except Exception:  # noqa: BLE001 - already gone (a stage image removed with its child)
            pass


def test_a_terminal_sees_the_build_bar_advance(small_spec, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40",
           "XDG_DATA_HOME": str(tmp_path / "data")}  # (the example build's CA and proxy settings: its cache)
    env.pop("CI", None)
    # the classic builder reports each step of the cached build as it takes it (BuildKit reports cached steps at
    # once: the bar would jump to the end)
    child = pexpect.spawn(sys.executable, ["-m", "envkit.cli", "build", str(small_spec), "--locked", "--no-verify",
                                           "--builder", "classic", "--store", str(tmp_path / "h.sqlite"), "--out", str(tmp_path / "out")],
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
    # the install's bar: packages and bytes against the lock's count and wheel sizes (its install steps come from
    # the example build's cache here, each counting its packages and their bytes as installed), moving forward
    installs = [(int(a), int(b), float(x), float(y)) for a, b, x, y in
                re.findall(r"\[torch25\] install: packages (\d+)/(\d+), ([\d.]+)/([\d.]+) GB", screen)]
    moved = sorted(set(installs))
    assert len({x for _, _, x, _ in moved}) >= 2, installs  # the bytes advanced (the CUDA layer, then the rest)
    assert [x for _, _, x, _ in installs] == sorted(x for _, _, x, _ in installs), installs
    assert installs[-1][0] == installs[-1][1] and installs[-1][2] == installs[-1][3] == 3.02, installs  # all of it
    assert "\x1b[" in screen  # drawn as a terminal bar, not as plain lines
    assert f"{TEAM}/torch25:" in screen  # the outcome table


def test_a_ci_log_gets_plain_lines(small_spec, tmp_path):
    proc = subprocess.run([*ENVKIT, "build", str(small_spec), "--locked", "--no-verify", "--store",
                           str(tmp_path / "h.sqlite"), "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "CI": "1", "XDG_DATA_HOME": str(tmp_path / "data")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\x1b[" not in proc.stderr
    assert re.search(r"^envkit: \[torch25\] (step \d+/\d+: |unchanged since its last build)", proc.stderr, re.M)
