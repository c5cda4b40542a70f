"""What a researcher's commands say about images that are not what envkit expects, with the real engine:
an image without python3 (verify), and `envkit run` streaming a job's output as it runs."""

import json

import pytest

from tests.integration.conftest import envkit
from tests.integration.published import LOCK_A, STACK_A, label_image, labels_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def no_python(dc, base):
    """An image with envkit's labels on the bare Debian base: no python3 in it."""
    ref = f"envkit-test-nopython/torch25:{STACK_A}"
    label_image(dc, base, ref, labels_for(LOCK_A, STACK_A), {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0"})
    yield ref
    dc.images.remove(ref, force=True)


def test_verify_of_an_image_without_python3_is_a_verification_failure(no_python):
    proc = envkit("verify", no_python, "--json", timeout=300)
    assert proc.returncode == 8, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["error"] == "VerificationError" and doc["message"].startswith(f"{no_python} has no python3")
    assert "cannot start" not in doc["message"] and "Traceback" not in proc.stderr


def test_run_streams_the_jobs_output_as_it_comes_and_says_when_its_time_ran_out(base, tmp_path):
    """stdout to stdout and stderr to stderr while the job runs (the first line long before the job ends); the
    --timeout limit stops it with exit 124 and a sentence; --json still collects the output into its document."""
    import subprocess
    import time

    from tests.integration.conftest import ENVKIT, ROOT

    proc = subprocess.Popen([*ENVKIT, "run", base, "--no-gpus", "--", "sh", "-c", "echo first; echo oops >&2; sleep 4; "
                             "echo second"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    seen_first = time.monotonic()
    rest, err = proc.communicate(timeout=60)
    assert first == "first\n" and time.monotonic() - seen_first > 3, "the first line came only at the end"
    assert proc.returncode == 0 and rest == "second\n" and "oops\n" in err
    stopped = envkit("run", base, "--no-gpus", "--timeout", "2", "--", "sleep", "30", timeout=60)
    assert stopped.returncode == 124 and "ran past --timeout 2s and was stopped" in stopped.stderr
    doc = json.loads(envkit("run", base, "--no-gpus", "--json", "--", "sh", "-c", "echo a; echo b >&2; exit 3").stdout)
    assert (doc["stdout"], doc["stderr"], doc["exit_code"], doc["timed_out"]) == ("a\n", "b\n", 3, False)


def test_run_interactive_passes_stdin_to_the_job_and_closes_it_at_its_end(base, tmp_path):
    """-i: envkit's stdin is the job's, byte for byte, and its end is the job's end-of-file (a job reading to
    the end finishes); without -i the job's stdin is closed at once; a job that stops reading early ends."""
    import hashlib
    import os
    import subprocess

    from tests.integration.conftest import ENVKIT, ROOT

    blob = os.urandom(3 * 2**20)
    fed = subprocess.run([*ENVKIT, "run", "-i", base, "--no-gpus", "--", "sha256sum"], cwd=ROOT, input=blob,
                         capture_output=True, timeout=120)
    assert fed.returncode == 0 and fed.stdout.split()[0].decode() == hashlib.sha256(blob).hexdigest(), fed.stderr
    closed = subprocess.run([*ENVKIT, "run", base, "--no-gpus", "--", "wc", "-c"], cwd=ROOT, input=b"ignored",
                            capture_output=True, timeout=120)
    assert closed.returncode == 0 and closed.stdout.strip() == b"0"
    early = subprocess.run([*ENVKIT, "run", "-i", base, "--no-gpus", "--json", "--", "head", "-c", "5"], cwd=ROOT,
                           input=b"abcdefgh" * 2**18, capture_output=True, timeout=120)
    assert early.returncode == 0 and json.loads(early.stdout)["stdout"] == "abcde"


def test_run_it_gives_the_job_a_terminal_and_leaves_this_one_as_it_was(base):
    """-it on a terminal: the job gets a pseudo-terminal of this terminal's size (and its new size when the window
    is resized), keys typed here reach it through
    envkit's raw-mode terminal (its own echo and line editing), and the terminal's mode is restored afterwards;
    -t alone makes the job's stdout and stderr one terminal stream."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import termios
    import time

    from tests.integration.conftest import ENVKIT, ROOT

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    before = termios.tcgetattr(slave)
    proc = subprocess.Popen([*ENVKIT, "run", "-it", base, "--no-gpus", "--", "sh", "-c",
                             "sleep 1; stty size; read x; echo got:$x; sleep 2; stty size"], cwd=ROOT, stdin=slave,
                            stdout=slave, stderr=slave)
    seen = b""

    def until(text: bytes, seconds: float = 60) -> None:
        nonlocal seen
        end = time.monotonic() + seconds
        while text not in seen and time.monotonic() < end:
            if select.select([master], [], [], 0.2)[0]:
                seen += os.read(master, 4096)
        assert text in seen, seen[-500:]

    try:
        until(b"40 120\r\n")
        os.write(master, b"hello\r")
        until(b"got:hello\r\n")
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 100, 0, 0))  # the window is resized
        until(b"50 100\r\n")
        assert proc.wait(timeout=60) == 0
        assert termios.tcgetattr(slave) == before  # cooked again, echo on
    finally:
        if proc.poll() is None:  # SIGTERM: envkit unwinds and removes the job's container (a SIGKILL would leave it)
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        os.close(master)
        os.close(slave)

    merged = subprocess.run([*ENVKIT, "run", "-t", base, "--no-gpus", "--", "sh", "-c", "echo out; echo err >&2"],
                            cwd=ROOT, capture_output=True, timeout=120)
    assert merged.returncode == 0 and merged.stdout == b"out\r\nerr\r\n" and b"err" not in merged.stderr
