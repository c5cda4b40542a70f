"""Signals: SIGTERM (a CI job cancelled) and SIGHUP unwind a command as Ctrl-C does, so its clean-up
runs, and every interruption ends with 128 + the signal, a message and (--json) an error document.

Real processes and real signals; the commands are small ones registered on envkit's own group. The
certification container stopped by SIGTERM on the real engine: tests/integration/test_interrupt.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.signals import as_from_a_terminal

HOLD = """
import sys, tempfile, time, click
from envkit.cli import main
from envkit.cli.common import _ctx, json_option

@main.command("hold")
@json_option
@click.option("--slow-cleanup", is_flag=True)
@click.pass_context
def hold(click_ctx, json_out, slow_cleanup):
    _ctx(click_ctx, json_out)
    with tempfile.TemporaryDirectory(prefix="envkit-hold-") as tmp:
        try:
            print(tmp, flush=True)
            time.sleep(120)
        finally:
            print("cleaning up", file=sys.stderr, flush=True)
            if slow_cleanup:
                time.sleep(120)

@main.command("buildkit")
@click.argument("fake_cli")
@click.argument("context")
def buildkit(fake_cli, context):
    from envkit.engine.buildkit import BuildKitBuilder
    for event in BuildKitBuilder(cli=fake_cli).build(__import__("pathlib").Path(context), "t:1", {}):
        print(event.kind, flush=True)

KEPT = []

@main.command("unowned-child")
def unowned_child():
    from envkit.support import procs
    KEPT.append(procs.popen(["sleep", "300"]))  # no owner stops it (as a generator nothing closes)
    print(KEPT[0].pid, flush=True)
    time.sleep(120)

main()
"""


def start(tmp_path: Path, *args: str) -> subprocess.Popen:
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    return subprocess.Popen([sys.executable, str(script), *args], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path)),
                            preexec_fn=as_from_a_terminal)


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_a_signal_runs_the_clean_up_and_exits_128_plus_its_number(tmp_path, sig, code):
    proc = start(tmp_path, "hold")
    held = Path(proc.stdout.readline().strip())
    assert held.is_dir()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    assert not held.exists()  # the `with` block's clean-up ran
    name = signal.Signals(sig).name
    assert "cleaning up" in err and f"error: interrupted by {name}\n" in err
    assert "run the same command again" in err and "Aborted!" not in err and "Traceback" not in err


def test_json_mode_prints_an_error_document(tmp_path):
    proc = start(tmp_path, "hold", "--json")
    held = Path(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143 and not held.exists()
    doc = json.loads(out)
    assert doc["error"] == "Interrupted" and doc["signal"] == "SIGTERM" and doc["message"] == "interrupted by SIGTERM"
    assert "`envkit nightly` resumes its run" in doc["hint"]


def test_a_second_signal_during_the_clean_up_ends_the_process_at_once(tmp_path):
    proc = start(tmp_path, "hold", "--slow-cleanup")
    held = Path(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGTERM)
    assert proc.stderr.readline().strip() == "cleaning up"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM  # the default action: no second unwinding
    assert time.monotonic() - started < 30 and held.is_dir()  # ended before its clean-up


def test_sigterm_to_envkit_alone_stops_the_buildkit_cli_it_started(tmp_path):
    """A CI runner may signal only envkit's process, not its group: the `docker build` it started must
    not build on as an orphan. (The fake CLI is a shell script; nothing here claims to build.)"""
    pidfile = tmp_path / "cli.pid"
    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/sh\necho $$ > {pidfile}\necho '#1 [internal] load build definition'\nexec sleep 300\n")
    fake.chmod(0o755)
    proc = start(tmp_path, "buildkit", str(fake), str(tmp_path))
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    cli_pid = int(pidfile.read_text())
    assert Path(f"/proc/{cli_pid}").exists()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert not Path(f"/proc/{cli_pid}").exists()  # terminated and reaped


def test_a_signal_the_process_was_started_ignoring_stays_ignored(tmp_path):
    """`nohup envkit nightly …` must survive the terminal closing."""
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    proc = subprocess.Popen([sys.executable, str(script), "hold"], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path)),
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    held = Path(proc.stdout.readline().strip())
    proc.send_signal(signal.SIGHUP)
    time.sleep(1)
    assert proc.poll() is None and held.is_dir()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143 and not held.exists()


def test_an_interrupted_command_exits_only_once_every_child_it_started_has_ended(tmp_path):
    """A child no owner stops (a generator whose frames a reference cycle keeps until after exit: once, in a cold
    suite, the BuildKit CLI above was still there when envkit had exited 143) is stopped and reaped by the
    interruption's last clean-up (``procs.stop_started``), not left to the kernel's parent-death signal."""
    proc = start(tmp_path, "unowned-child")
    child = int(proc.stdout.readline())
    assert Path(f"/proc/{child}").exists()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert not Path(f"/proc/{child}").exists()  # terminated and reaped before envkit exited
