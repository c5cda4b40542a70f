"""Child processes that an interruption stops gently.

``subprocess.run`` answers an exception while it waits (Ctrl-C, or envkit's SIGTERM, see
``cli.common.signals_unwind``) by SIGKILLing the child, which then cleans up nothing: a debootstrap
killed in its second stage leaves the host's /proc and /sys mounted inside the target, under a
temporary directory about to be deleted. Here the child gets SIGTERM first, and SIGKILL only if it
is still running ``grace`` seconds later. ``run_all`` runs several at once (the bundle's parallel
wheel downloads) without threads: an interruption stops them all, rather than waiting for each.

A child ``popen`` started is also stopped and reaped when a command is interrupted (``stop_started``, called by
``cli.common.EnvkitGroup``), even where its owner would stop it only when collected: a generator suspended in the
frames the interruption unwound (BuildKit's ``docker build``, read line by line) is closed when the garbage
collector frees it, which may be after envkit has exited and left the child to finish on its own.

An envkit that is killed outright (SIGKILL, the OOM killer) runs no clean-up at all; on Linux its children
are then sent SIGTERM by the kernel (``popen``: ``PR_SET_PDEATHSIG``), so they still clean up after
themselves (debootstrap unmounts the /proc it mounted in its target, BuildKit's ``docker build`` cancels
the build) instead of running on as orphans.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

GRACE = 30.0  # seconds a child has to finish after SIGTERM (debootstrap unmounts after its dpkg step ends)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _sigterm_when_parent_dies() -> Callable[[], None] | None:
    """A ``preexec_fn`` for Linux: the child is sent SIGTERM when the thread that started it ends, however
    envkit ends (a child started from a thread must be waited for on that thread, as everything here is).
    None where prctl is not available."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent, sigterm = os.getpid(), int(signal.SIGTERM)

    def set_deathsig() -> None:  # runs in the child between fork and exec: nothing that may take a lock
        # The child is a copy of envkit until it execs, with envkit's handlers: a SIGTERM or Ctrl-C meant for the
        # process group that lands here now must end this child, not run envkit's handler in it (which printed
        # "interrupted" from a child that then reported a failed start). exec would reset them anyway.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        prctl(_PR_SET_PDEATHSIG, sigterm)
        if os.getppid() != parent:  # envkit died before the prctl took effect: no one would send it
            os.kill(os.getpid(), sigterm)

    return set_deathsig


_STARTED: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()  # what ``popen`` started (until collected)


def popen(cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """``subprocess.Popen`` whose child gets SIGTERM if envkit dies first, even by SIGKILL (Linux), and is stopped
    by ``stop_started`` when the command is interrupted."""
    proc = subprocess.Popen(list(cmd), preexec_fn=_sigterm_when_parent_dies(), **kwargs)
    _STARTED.add(proc)
    return proc


def stop_started(grace: float = GRACE) -> None:
    """An interrupted command's last clean-up: every child ``popen`` started that still runs is stopped (``stop``)
    and reaped before envkit exits."""
    stop(list(_STARTED), grace)


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


def run(
    cmd: Sequence[str], *, env: Mapping[str, str] | None = None, grace: float = GRACE
) -> subprocess.CompletedProcess:
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
                procs.append(popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                                   env=None if env is None else dict(env)))
            done = []
            for proc, (out, err), cmd in zip(procs, outputs, cmds):
                code = proc.wait()
                out.seek(0)
                err.seek(0)
                done.append(subprocess.CompletedProcess(list(cmd), code, out.read(), err.read()))
            return done
        finally:
            stop(procs, grace)  # a no-op for those that ended


def run_lines(cmd: Sequence[str], on_line: Callable[[str], None], *, env: Mapping[str, str] | None = None,
              grace: float = GRACE, poll: float = 0.1) -> subprocess.CompletedProcess:
    """``run`` for a child whose output is read as it comes (debootstrap's phases): stdout and stderr as one
    stream, each whole line to ``on_line`` (without its newline) and all of it in the result's ``stdout``.

    The child writes to a file, as with ``run``, which is read as it grows (every ``poll`` seconds), never to a
    pipe: a child whose reader is gone (envkit SIGKILLed) would get SIGPIPE on its next line, and debootstrap, told
    by the kernel to stop, says what it unmounts. Interrupted (or ``on_line`` raising), the child is stopped
    gently, as ``run`` does."""
    fd, path = tempfile.mkstemp(prefix="envkit-output-")
    try:  # a reader of its own (the child's offset moves with its writes), and no name left behind, even if killed
        reader = open(path, errors="replace")
    finally:
        os.unlink(path)
    text: list[str] = []
    partial = ""
    with reader:
        try:
            proc = popen(cmd, stdout=fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                         env=None if env is None else dict(env))
        finally:
            os.close(fd)
        try:
            while True:
                ended = proc.poll() is not None  # (read once more after it ended: its last lines)
                chunk = reader.read()
                if chunk:
                    text.append(chunk)
                    *whole, partial = (partial + chunk).split("\n")
                    for line in whole:
                        on_line(line)
                if ended:
                    break
                time.sleep(poll)
            if partial:
                on_line(partial)
            code = proc.wait()
        finally:
            stop([proc], grace)
    return subprocess.CompletedProcess(list(cmd), code, "".join(text), "")
