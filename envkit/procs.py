"""Child processes that an interruption stops gently.

``subprocess.run`` answers an exception while it waits (Ctrl-C, or envkit's SIGTERM, see
``cli.common.signals_unwind``) by SIGKILLing the child, which then cleans up nothing: a debootstrap
killed in its second stage leaves the host's /proc and /sys mounted inside the target, under a
temporary directory about to be deleted. Here the child gets SIGTERM first, and SIGKILL only if it
is still running ``grace`` seconds later. ``run_all`` runs several at once (the bundle's parallel
wheel downloads) without threads: an interruption stops them all, rather than waiting for each.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack

GRACE = 30.0  # seconds a child has to finish after SIGTERM (debootstrap unmounts after its dpkg step ends)


def stop(procs: Sequence[subprocess.Popen], grace: float = GRACE) -> None:
    """SIGTERM to each child still running, then SIGKILL to any still running ``grace`` seconds later;
    returns once every child is reaped."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in running:
        try:
            p.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, grace: float = GRACE) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, stdin=DEVNULL)``, stopped gently when interrupted."""
    return run_all([cmd], env=env, grace=grace)[0]


def run_all(cmds: Sequence[Sequence[str]], *, env: Mapping[str, str] | None = None,
            grace: float = GRACE) -> list[subprocess.CompletedProcess]:
    """Run ``cmds`` at the same time; each one's output (stdout, stderr) goes to a temporary file, so
    no pipe fills while another is waited for. stdin is /dev/null: a child that asks (pip prompting
    for a login) fails instead of waiting unseen. Raises OSError when a command cannot start."""
    procs: list[subprocess.Popen] = []
    with ExitStack() as files:
        try:
            outputs = []
            for cmd in cmds:
                out, err = (files.enter_context(tempfile.TemporaryFile("w+", errors="replace")) for _ in range(2))
                outputs.append((out, err))
                procs.append(subprocess.Popen(list(cmd), stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                              text=True, env=None if env is None else dict(env)))
            done = []
            for proc, (out, err), cmd in zip(procs, outputs, cmds):
                code = proc.wait()
                out.seek(0)
                err.seek(0)
                done.append(subprocess.CompletedProcess(list(cmd), code, out.read(), err.read()))
            return done
        finally:
            stop(procs, grace)  # a no-op for those that ended
