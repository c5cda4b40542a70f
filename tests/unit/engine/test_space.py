"""A full disk, said plainly (envkit/engine/space.py): which texts mean one, and the errors made of them.

The texts are what a real engine and its builds printed when their disk filled up (a 400 MB data root
here, tests/integration/test_build_host_failures.py); the engine is faked for its disk usage only.
"""

from __future__ import annotations

import errno
import os
from types import SimpleNamespace

import pytest

from envkit.engine import space
from envkit.errors import BuildError, EngineError, EnvkitError, Location

# what the engine said, verbatim, when its disk filled up
SAID = [
    # `docker load` of a bundle's base (docker-py's ImageLoadError)
    "Error processing tar file(exit status 1): write /usr/lib/x86_64-linux-gnu/libp11-kit.so.0.3.0: no space left "
    "on device",
    # a classic build's COPY
    "failed to copy files: failed to copy directory: Error processing tar file(exit status 1): write "
    "/libgssapi-krb5-2_1.20.1-2+deb12u5_amd64.deb: no space left on device",
    # dpkg inside a RUN step (classic and BuildKit alike)
    "cannot copy extracted data for './usr/lib/python3.11/wsgiref/handlers.py' to "
    "'/usr/lib/python3.11/wsgiref/handlers.py.dpkg-new': failed to write (No space left on device)",
    # pip inside a RUN step, and pip download on the host
    "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device",
]
NOT = ["no such file or directory", "the space left in the queue", "returned a non-zero code: 100", "", None]


@pytest.mark.parametrize("text", SAID)
def test_what_a_full_disk_says(text):
    assert space.says_no_space(text)


@pytest.mark.parametrize("text", NOT)
def test_what_it_does_not(text):
    assert not space.says_no_space(text)


def test_sizes_for_people():
    assert space.size(39 << 20) == "39 MiB"
    assert space.size(space.GIB) == "1.0 GiB" and space.size(int(43.24 * space.GIB)) == "43.2 GiB"


class Engine:
    def __init__(self, root, *, images=121 << 20, cache=39 << 20, fails=False):
        self.root, self.images, self.cache, self.fails = root, images, cache, fails

    def disk_usage(self):
        if self.fails:
            raise RuntimeError("engine gone")
        return {"root": str(self.root), "images_bytes": self.images, "build_cache_bytes": self.cache}

    def data_root(self):
        if self.fails:
            raise RuntimeError("engine gone")
        return str(self.root)


@pytest.fixture
def free(monkeypatch):
    """Pretend the filesystems here have ``free["bytes"]`` free."""
    state = {"bytes": 39 << 20}
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_bavail=state["bytes"] // 4096, f_frsize=4096))
    return state


def test_a_build_that_filled_the_engines_disk_says_so_where_and_what_to_reclaim(tmp_path, free):
    tail = "last output:\n    Step 5/29 : COPY debs/os/ /tmp/envkit/debs/"
    exc = BuildError(f"building vision/x:1 failed: {SAID[1]}", hint=tail, location=Location("team.yaml", 7))
    error = space.engine_out_of_space(exc, Engine(tmp_path))
    assert type(error) is BuildError and error.exit_code == 7 and error.location == exc.location
    assert error.message == (f"building vision/x:1 failed: the engine ran out of disk space (39 MiB free on "
                             f"{tmp_path} now; its images hold 121 MiB)")
    assert error.hint.startswith("`envkit gc --dry-run` lists the old envkit builds")
    assert "`envkit gc --build-cache 24` also prunes BuildKit's cache (39 MiB) not used in a day" in error.hint
    assert error.hint.endswith(f"then run it again\n  {exc.message}\n  {tail}")  # the engine's words kept


def test_the_no_space_may_be_only_in_the_steps_output(tmp_path, free):
    exc = BuildError("building vision/x:1 failed: The command '/bin/bash -o pipefail -c apt-get install' returned "
                     "a non-zero code: 100", hint=f"last output:\n    {SAID[2]}\n    E: Sub-process dpkg returned 1")
    assert space.engine_out_of_space(exc, Engine(tmp_path)).message.startswith(
        "building vision/x:1 failed: the engine ran out of disk space (39 MiB free on")


def test_other_failures_are_left_as_they_are(tmp_path, free):
    exc = EngineError("cannot load b.tar: unexpected EOF")
    assert space.engine_out_of_space(exc, Engine(tmp_path)) is exc


def test_an_engine_that_cannot_say_or_is_elsewhere(tmp_path, free):
    exc = EngineError(f"cannot load b.tar: {SAID[0]}")
    assert space.engine_out_of_space(exc, Engine(tmp_path, fails=True)).message == (
        "cannot load b.tar: the engine ran out of disk space (it did not say where)")
    remote = space.engine_out_of_space(exc, Engine(tmp_path / "on-another-host"))
    assert f"its data root {tmp_path / 'on-another-host'} is not on this host" in remote.message


def test_a_warning_before_a_build_only_when_space_is_short(tmp_path, free):
    warning = space.low_space(Engine(tmp_path))
    assert warning.startswith(f"warning: only 39 MiB free on {tmp_path}, where the engine builds")
    free["bytes"] = space.DISK_FAIL
    assert space.low_space(Engine(tmp_path)) is None
    assert space.low_space(Engine(tmp_path / "elsewhere")) is None  # not measurable here: no warning
    assert space.low_space(Engine(tmp_path, fails=True)) is None


def test_a_full_disk_on_this_host(tmp_path, free):
    exc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out.bundle" / "base.tar"))
    error = space.host_out_of_space(exc, "envkit bundle make")
    assert type(error) is EnvkitError
    assert error.message == (f"envkit bundle make: this host ran out of disk space writing "
                             f"{tmp_path / 'out.bundle' / 'base.tar'}")  # that directory is gone: not measured
    assert "--out or TMPDIR" in error.hint
    there = space.host_out_of_space(OSError(errno.ENOSPC, "No space", str(tmp_path / "f")), "x")
    assert there.message.endswith("(39 MiB free there now)")
    assert space.host_out_of_space(OSError(errno.EIO, "I/O error"), "x") is None



def test_debootstrap_that_fills_tmpdir_says_it_was_this_hosts_disk(tmp_path, free, monkeypatch):
    import subprocess

    from envkit.images import base as base_mod
    from envkit.lock import BaseImage

    said = ("W: Failure trying to run: chroot \"/tmp/envkit-rootfs-vm-1-x/rootfs\" dpkg --force-depends --install "
            "/var/cache/apt/archives/base-files_12.4+deb12u8_amd64.deb\n"
            "dpkg: error processing archive base-files: cannot copy extracted data for './etc/issue' to "
            "'/etc/issue.dpkg-new': failed to write (No space left on device)\n")
    def run_lines(cmd, on_line):  # debootstrap's output, stdout and stderr as one stream
        for line in said.splitlines():
            on_line(line)
        return subprocess.CompletedProcess(cmd, 1, said, "")

    monkeypatch.setattr(base_mod.procs, "run_lines", run_lines)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(base_mod.shutil, "which", lambda name: "/usr/sbin/debootstrap")  # never run (procs.run_lines)
    recipe = {"suite": "bookworm", "variant": "minbase", "mirror": "http://deb.debian.org/debian"}
    image = BaseImage(ref="envkit-base/debian:bookworm-minbase-x", digest=None, distro="debian", suite="bookworm",
                      bootstrap=recipe)
    with pytest.raises(EngineError) as caught:
        base_mod.bootstrap(object(), image, lambda _: None)
    message = caught.value.message
    assert message.startswith("debootstrap of bookworm failed: this host ran out of disk space in "
                              f"{tmp_path}/envkit-rootfs-")
    assert message.endswith("(39 MiB free there now)")
    assert caught.value.hint.startswith("the rootfs and its archive need about 350 MB there: free space, or "
                                        "point TMPDIR")
    assert list(tmp_path.iterdir()) == []  # its scratch directory went with it


def test_wheel_downloads_that_fill_the_out_disk_say_it_was_this_hosts(tmp_path, free, monkeypatch):
    import subprocess

    from envkit.images import wheelhouse
    from tests.unit.lockfixtures import make_image

    said = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n"
    monkeypatch.setattr(wheelhouse.procs, "run_all",
                        lambda cmds, env=None: [subprocess.CompletedProcess(c, 1, "", said) for c in cmds])
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dest = tmp_path / "staging" / "wheelhouse"
    with pytest.raises(BuildError) as caught:
        wheelhouse.download_wheels(make_image(), dest, ca_bundle=None)
    assert caught.value.message == (f"downloading the wheels of torch25 failed: this host ran out of disk space in "
                                    f"{dest} (39 MiB free there now)")
    assert caught.value.hint.startswith("a CUDA framework's wheels take GBs (TensorFlow 2.20's: 3.66 GB)")
    assert said.strip() in caught.value.hint
