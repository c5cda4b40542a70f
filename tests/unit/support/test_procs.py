"""Child processes stopped gently (envkit/procs.py). Real processes and signals; no engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envkit.support import procs
from tests.conftest import ROOT


def test_run_all_runs_at_once_and_keeps_each_output_apart(tmp_path):
    """Side by side, not one after the other: each child waits (up to 30 s) for the other to have started,
    which a one-after-the-other run never lets happen (a rendezvous, not a stopwatch)."""

    def meet(me: str, other: str) -> str:
        return (f"touch {tmp_path}/{me}; n=0; while [ ! -e {tmp_path}/{other} ] && [ $n -lt 300 ]; do sleep 0.1; "
                f"n=$((n+1)); done; [ -e {tmp_path}/{other} ] || exit 9")

    big = "python3 -c 'import sys; sys.stdout.write(\"x\" * 2_000_000); sys.stderr.write(\"e\")'"
    done = procs.run_all([["sh", "-c", f"{meet('a', 'b')}; {big}"], ["sh", "-c", f"{meet('b', 'a')}; echo two; exit 3"]])
    assert [d.returncode for d in done] == [0, 3]  # 9: one never saw the other running
    assert (len(done[0].stdout), done[0].stderr) == (2_000_000, "e")  # no pipe to fill
    assert done[1].stdout == "two\n"


def test_a_child_reads_no_stdin():
    assert procs.run(["sh", "-c", "read line || echo no-input"]).stdout == "no-input\n"


def test_a_command_that_cannot_start_raises_oserror():
    with pytest.raises(OSError):
        procs.run(["/nonexistent/envkit-no-such-tool"])


CHILDREN = """
import sys, click
from envkit.support import procs
from envkit.cli import main

@main.command("children")
@click.argument("script")
@click.argument("grace", type=float)
def children(script, grace):
    procs.run_all([["sh", script, "1"], ["sh", script, "2"]], grace=grace)

main()
"""


def _children(tmp_path: Path, trap: str, grace: float) -> tuple[subprocess.Popen, Path]:
    """envkit running two shell children; each writes its pid, then waits with ``trap`` set on SIGTERM."""
    (tmp_path / "child.sh").write_text(f"{trap}\necho $$ > {tmp_path}/pid-$1\nwhile :; do sleep 0.1; done\n")
    (tmp_path / "main.py").write_text(CHILDREN)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "main.py"), "children", str(tmp_path / "child.sh"),
                             str(grace)], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pid-{n}").is_file() and (tmp_path / f"pid-{n}").read_text().strip() for n in (1, 2)):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    return proc, tmp_path


def _gone(pid_file: Path) -> bool:
    return not Path(f"/proc/{pid_file.read_text().strip()}").exists()


def test_an_interrupted_envkit_stops_its_children_with_sigterm_so_they_clean_up(tmp_path):
    """subprocess.run would SIGKILL them: debootstrap's trap (unmount the target's /proc) would never run."""
    proc, d = _children(tmp_path, f'trap "touch {tmp_path}/cleaned-$1; exit 143" TERM', grace=30)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert (d / "cleaned-1").exists() and (d / "cleaned-2").exists()
    assert _gone(d / "pid-1") and _gone(d / "pid-2")


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    proc, d = _children(tmp_path, 'trap "" TERM', grace=1)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143 and time.monotonic() - started < 10  # one grace for both, not one each
    assert _gone(d / "pid-1") and _gone(d / "pid-2")


KILLED = """
import sys
from envkit.support import procs
procs.run(["sh", sys.argv[1]])
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_of_an_envkit_killed_outright_still_gets_sigterm(tmp_path):
    """SIGKILL runs no clean-up in envkit; the kernel sends its children SIGTERM (PR_SET_PDEATHSIG), so
    debootstrap's trap still unmounts and BuildKit's CLI still cancels its build."""
    (tmp_path / "child.sh").write_text(f'trap "touch {tmp_path}/cleaned; exit 143" TERM\n'
                                       f"echo $$ > {tmp_path}/pid\nwhile :; do sleep 0.1; done\n")
    (tmp_path / "main.py").write_text(KILLED)
    parent = subprocess.Popen([sys.executable, str(tmp_path / "main.py"), str(tmp_path / "child.sh")], cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + 30
    while not ((tmp_path / "pid").is_file() and (tmp_path / "pid").read_text().strip()):
        assert time.monotonic() < deadline and parent.poll() is None
        time.sleep(0.05)
    parent.kill()
    parent.wait()
    try:
        while not (tmp_path / "cleaned").exists():
            assert time.monotonic() < deadline + 10, "the orphaned child never got SIGTERM"
            time.sleep(0.05)
        while not _gone(tmp_path / "pid"):
            assert time.monotonic() < deadline + 10
            time.sleep(0.05)
    finally:
        if not _gone(tmp_path / "pid"):  # the test failed: no orphan left running
            os.kill(int((tmp_path / "pid").read_text()), signal.SIGKILL)



def test_the_child_before_exec_does_not_run_envkits_signal_handlers():
    """Between fork and exec the child is a copy of envkit: a SIGTERM landing there must end it by default, not
    run envkit's handler (which printed "interrupted" from the child)."""
    preexec = procs._sigterm_when_parent_dies()
    if preexec is None:
        pytest.skip("Linux only")
    old = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        pid = os.fork()
        if pid == 0:  # the child: as subprocess runs preexec_fn (never back into pytest)
            ok = False
            try:
                preexec()
                ok = signal.getsignal(signal.SIGTERM) is signal.getsignal(signal.SIGINT) is signal.SIG_DFL
            finally:
                os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        signal.signal(signal.SIGTERM, old)
