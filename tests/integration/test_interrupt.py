"""Stopping envkit while it certifies, on the real engine.

SIGTERM (a cancelled CI job) unwinds `envkit certify`: the certification container is removed, the
payload's temporary directory deleted, nothing is reported or recorded, and it exits 143 with an error
document. SIGKILL leaves the (labelled) container behind, stopped once its payload ends, and the payload's
scratch directory; `envkit gc` removes both. envkit's own children still get SIGTERM from the kernel when
it is SIGKILLed (`procs.popen`): BuildKit's `docker build` cancels its build, debootstrap unmounts. The
image certified is the example's build relabelled for a team made for this run, so gc here touches nothing
of any other test's; it is removed at the end.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import docker.errors
import pytest

from envkit.engine.docker_gc import DockerImageHost
from envkit.ops.gc_plan import CONTAINER_GRACE
from envkit.ops.gc import collect_garbage
from envkit.support.labels import CONTAINER_LABEL, TEAM_LABEL
from envkit.store.history import Store
from tests.integration.conftest import ENVKIT, ROOT

pytestmark = pytest.mark.integration

TEAM = f"interrupt-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def image(example_build, dc):
    """The example's image with this run's team label (a LABEL step: no layer of its own)."""
    doc, _ = example_build
    tag = f"{TEAM}/torch25:test"
    dc.images.build(fileobj=io.BytesIO(f'FROM {doc["images"][0]["tag"]}\nLABEL {TEAM_LABEL}="{TEAM}"\n'.encode()),
                    tag=tag, rm=True)
    yield tag
    for c in dc.containers.list(all=True, filters={"label": f"{TEAM_LABEL}={TEAM}"}):
        c.remove(force=True)
    try:
        dc.images.remove(tag)
    except docker.errors.ImageNotFound:
        pass


def certify(tmp_path: Path, tag: str) -> tuple[subprocess.Popen, Path]:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen([*ENVKIT, "certify", tag, "--no-gpus", "--lock", "examples/team.lock", "--reports",
                             str(tmp_path / "r"), "--store", str(tmp_path / "h.sqlite"), "--json"], cwd=ROOT,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, TMPDIR=str(tmpdir)))
    return proc, tmpdir


def payload_container(dc, tmpdir: Path, proc, timeout=120):
    """The certification container whose payload is mounted from ``tmpdir`` (this test's), once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        for c in dc.containers.list(filters={"label": f"{CONTAINER_LABEL}=certify"}):
            if any(m.get("Source", "").startswith(str(tmpdir)) for m in c.attrs.get("Mounts") or ()):
                return c
        time.sleep(0.2)
    raise AssertionError("the certification container never ran")


def test_sigterm_during_certification_removes_the_container_and_the_payload_directory(image, dc, tmp_path):
    proc, tmpdir = certify(tmp_path, image)
    container = payload_container(dc, tmpdir, proc)
    assert container.labels[CONTAINER_LABEL] == "certify" and container.labels[TEAM_LABEL] == TEAM
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert json.loads(out)["error"] == "Interrupted" and "error: interrupted by SIGTERM" in err
    with pytest.raises(docker.errors.NotFound):
        dc.containers.get(container.id)
    assert list(tmpdir.iterdir()) == []  # the payload's copy and expect.json are gone
    assert not (tmp_path / "r").exists() or list((tmp_path / "r").iterdir()) == []  # no report of a run cut short


def test_a_container_left_by_a_killed_envkit_is_removed_by_gc(image, dc, tmp_path):
    proc, tmpdir = certify(tmp_path, image)
    container = payload_container(dc, tmpdir, proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 300
    while container.status == "running":  # the payload runs to its end, its container stays
        assert time.monotonic() < deadline, "the orphaned payload never ended"
        time.sleep(1)
        container.reload()
    assert container.status == "exited"
    [payload_dir] = tmpdir.iterdir()  # the killed envkit's scratch directory, named for its process
    assert payload_dir.name.startswith(f"envkit-verify-{socket.gethostname()}-{proc.pid}-")
    host = DockerImageHost(dc)
    now = datetime.now(timezone.utc)
    Store.open(tmp_path / "h.sqlite").close()  # the team's (empty) history: gc refuses a named store that is not there
    soon = collect_garbage(host, str(tmp_path / "h.sqlite"), team=TEAM, dry_run=True, now=now, scratch_root=tmpdir)
    assert [(d.container.id, d.keep) for d in soon.containers] == [(container.id, True)]  # in its grace
    assert soon.decisions[0].reasons[-1].startswith(f"used by container {container.name} (exited)")
    assert soon.to_json()["would_remove_scratch"] == [str(payload_dir)] and payload_dir.exists()

    result = collect_garbage(host, str(tmp_path / "h.sqlite"), team=TEAM, now=now + CONTAINER_GRACE + timedelta(minutes=1),
                             scratch_root=tmpdir)
    doc = result.to_json()
    assert doc["removed_containers"] == [container.id] and doc["failed_containers"] == []
    assert doc["removed_scratch"] == [str(payload_dir)] and list(tmpdir.iterdir()) == []
    assert doc["containers"][0]["role"] == "certify" and doc["containers"][0]["image"] == image
    with pytest.raises(docker.errors.NotFound):
        dc.containers.get(container.id)
    assert [d.keep for d in result.decisions] == [True]  # the image itself: the newest build of its group


CLASSIC = """
import sys
from pathlib import Path
import click
from envkit.cli import main

@main.command("classic")
@click.argument("context")
@click.argument("tag")
def classic(context, tag):
    from envkit.engine.docker_engine import connect
    for event in connect().build(Path(context), tag, {}):
        print(event.kind, event.text, flush=True)

main()
"""


def test_sigterm_during_a_classic_build_stops_its_running_step(dc, base, tmp_path):
    """SIGTERM mid-RUN: the step's container goes and no image is made. (envkit kills the step itself;
    the engine usually cancels a classic build whose client went away too, but once here it did not.)"""
    marker = uuid.uuid4().hex
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {base}\nRUN echo {marker} && sleep 120\n")
    (tmp_path / "classic.py").write_text(CLASSIC)
    tag = f"{TEAM}/classic:{marker[:8]}"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "classic.py"), "classic", str(tmp_path / "ctx"), tag],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    step = None
    for line in proc.stdout:
        if line.startswith("log  ---> Running in "):
            step = line.split()[-1]
        if line.strip() == f"log {marker}":  # the RUN step is under way
            break
    assert step, proc.communicate()[1][-2000:]
    assert dc.containers.get(step).status == "running"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    deadline = time.monotonic() + 30
    while True:  # killed, then removed by the builder (forcerm)
        try:
            dc.containers.get(step)
        except docker.errors.NotFound:
            break
        assert time.monotonic() < deadline, "the build's RUN step is still there"
        time.sleep(0.2)
    with pytest.raises(docker.errors.ImageNotFound):
        dc.images.get(tag)  # the build stopped at that step: no image


BUILDKIT = """
import sys
from pathlib import Path
from envkit.engine.buildkit import BuildKitBuilder
from envkit.engine.docker_engine import connect

for event in BuildKitBuilder(connect()).build(Path(sys.argv[1]), sys.argv[2], {}):
    print(event.kind, event.text, flush=True)
"""


def test_a_buildkit_build_of_an_envkit_killed_outright_is_cancelled(dc, base, tmp_path):
    """SIGKILL runs no clean-up in envkit, but the kernel sends its `docker build` SIGTERM
    (PR_SET_PDEATHSIG): the CLI cancels the build instead of finishing it as an orphan and tagging it."""
    from envkit.support import scratch
    from envkit.engine.buildkit import BuildKitBuilder
    from envkit.engine.docker_engine import connect

    if BuildKitBuilder(connect()).unavailable() is not None:
        pytest.skip("no BuildKit-capable docker CLI here")
    marker = uuid.uuid4().hex
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {base}\nRUN echo {marker} && sleep 20\n")
    (tmp_path / "bk.py").write_text(BUILDKIT)
    tag = f"{TEAM}/buildkit:{marker[:8]}"
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen([sys.executable, str(tmp_path / "bk.py"), str(tmp_path / "ctx"), tag], cwd=ROOT,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmpdir)))
    try:
        for line in proc.stdout:
            if marker in line and "echo" not in line:  # the RUN step is under way
                break
        else:
            raise AssertionError(proc.communicate()[1][-2000:])
        assert _commands_under(tmp_path / "ctx"), "no docker build is running"
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 15
        while _commands_under(tmp_path / "ctx"):  # the orphaned CLI got SIGTERM and stopped
            assert time.monotonic() < deadline, f"still running: {_commands_under(tmp_path / 'ctx')}"
            time.sleep(0.2)
        time.sleep(25)  # past the step's end: an orphaned build would have tagged its image by now
        with pytest.raises(docker.errors.ImageNotFound):
            dc.images.get(tag)
        [left] = scratch.leftovers(tmpdir)  # the CLI's image-id directory: no clean-up ran in envkit
        assert left.kind == "buildkit" and left.pid == proc.pid
        scratch.remove(left.path)
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            dc.images.remove(tag, force=True)  # only there when the test failed
        except docker.errors.ImageNotFound:
            pass


BOOTSTRAP = """
import sys
from envkit.images.base import bootstrap
from envkit.cli import main
from envkit.engine.docker_engine import connect
from envkit.lock import BaseImage

@main.command("bootstrap")
def run():
    recipe = {"suite": "bookworm", "variant": "minbase", "mirror": "http://deb.debian.org/debian"}
    bootstrap(connect(), BaseImage(ref="envkit-test/interrupted:never", digest=None, distro="debian",
                                   suite="bookworm", bootstrap=recipe), print)

main()
"""


@pytest.mark.network
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_while_debootstrap_has_proc_mounted_in_its_target_leaves_no_mount(engine, tmp_path, sig):
    """debootstrap's second stage mounts /proc and /sys in the target. envkit stopped with SIGTERM stops
    debootstrap with SIGTERM too (not subprocess.run's SIGKILL), so it unmounts them; envkit then deletes its
    directory, never through a mount. envkit SIGKILLed runs no clean-up, but the kernel still sends
    debootstrap SIGTERM (PR_SET_PDEATHSIG): it unmounts, and what stays is an unmounted scratch directory
    `envkit gc` removes."""
    from envkit.support import scratch
    from envkit.support.scratch import mounts_under

    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmp_path / "bootstrap.py").write_text(BOOTSTRAP)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "bootstrap.py"), "bootstrap"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmpdir)))
    try:
        deadline = time.monotonic() + 600
        while not any(m.endswith("/rootfs/proc") for m in mounts_under(tmpdir)):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "debootstrap never mounted /proc in its target"
            time.sleep(0.1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, err
        assert mounts_under(tmpdir) == [] and list(tmpdir.iterdir()) == []
    else:
        assert proc.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 120  # the orphaned debootstrap unmounts once its dpkg step ends
        while mounts_under(tmpdir):
            assert time.monotonic() < deadline, f"still mounted: {mounts_under(tmpdir)}"
            time.sleep(0.2)
        while _commands_under(tmpdir):  # debootstrap's trap, then its exit
            assert time.monotonic() < deadline, f"still running: {_commands_under(tmpdir)}"
            time.sleep(0.2)
        [left] = scratch.leftovers(tmpdir)
        assert left.kind == "rootfs" and left.pid == proc.pid and left.mounts == ()
        # stopped, not finished: debootstrap deletes its own directory in the target only when it completes
        assert (left.path / "rootfs" / "debootstrap").is_dir()
        scratch.remove(left.path)
        assert list(tmpdir.iterdir()) == []
    with pytest.raises(docker.errors.ImageNotFound):
        engine.client.images.get("envkit-test/interrupted:never")


def _commands_under(directory: Path) -> list[str]:
    """The command lines of running processes that name a path under ``directory``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.startswith(str(directory).encode()) for a in args):
            found.append(" ".join(a.decode(errors="replace") for a in args))
    return found

