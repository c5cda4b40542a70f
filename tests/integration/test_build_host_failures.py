"""A build host that fails under a build: its disk fills up, its engine dies. A second, real engine
whose data root is a 400 MB filesystem.

The engine is Debian's dockerd, started here on a loop-mounted ext4 file with a bridge of its own (a
second daemon on the default bridge would take docker0 from the first: `--bridge=none` deletes it).
It has no way out (no NAT), which suits offline bundles: a small bundle is built on it with its disk
nearly full, and envkit must say the engine's disk is full, how much is free, what to reclaim, with
the exit code of the step that failed and nothing tagged or left running. Then its dockerd is killed
in the middle of a RUN step: envkit must say the engine stopped answering, not print a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from envkit.support import scratch
from envkit.images.base import ensure_base
from envkit.images.bundle import make_bundle
from envkit.catalog.files import load_catalog
from envkit.engine.protocol import RunOptions
from envkit.engine.buildkit import DOCKER_CLI, BuildKitBuilder
from envkit.engine.docker_engine import connect
from envkit.errors import EngineError
from envkit.support.labels import CONTAINER_LABEL, CONTEXT_LABEL, IMAGE_LABEL, LOCK_LABEL, TEAM_LABEL
from envkit.lock import write_lock
from envkit.resolve.plan import spec_digest
from envkit.spec import load_spec
from tests.integration.conftest import ROOT
from tests.integration.test_buildkit import ca_bundle, small_lock

pytestmark = [pytest.mark.integration, pytest.mark.network]

SIZE = "400M"  # the default: a module's engine; a test may want its own size
TOOLS = ("dockerd", "mkfs.ext4", "mount", "umount", "ip", "fallocate")


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


class SmallEngine:
    """dockerd on a loop-mounted filesystem of SIZE, its own bridge, its own socket."""

    made = 0

    def __init__(self, root: Path, size: str = SIZE):
        self.root, self.mnt, self.size = root, root / "mnt", size
        self.socket = root / "docker.sock"
        SmallEngine.made += 1  # several at once (a module's and a test's own): a bridge and a subnet each
        self.bridge, self.subnet = f"ekdf{os.getpid() % 100000}-{self.made}", f"172.31.{230 + self.made % 20}.1/24"
        self.proc: subprocess.Popen | None = None
        self.engine = None

    @property
    def data(self) -> Path:
        return self.mnt / "data"

    @property
    def env(self) -> dict:
        return dict(os.environ, DOCKER_HOST=f"unix://{self.socket}")

    def start(self) -> "SmallEngine":
        disk = self.root / "disk.img"
        self.mnt.mkdir()
        _sh("truncate", "-s", self.size, str(disk))
        _sh("mkfs.ext4", "-q", "-m", "0", "-O", "^has_journal", str(disk))
        _sh("mount", "-o", "loop", str(disk), str(self.mnt))
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "addr", "add", self.subnet, "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        return self.start_daemon()

    def start_daemon(self) -> "SmallEngine":
        log = open(self.root / "dockerd.log", "ab")
        self.proc = subprocess.Popen(
            ["dockerd", "--data-root", str(self.data), "--exec-root", str(self.root / "exec"),
             "--pidfile", str(self.root / "docker.pid"), "-H", f"unix://{self.socket}", f"--bridge={self.bridge}",
             "--iptables=false", "--ip-masq=false"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.engine = connect(f"unix://{self.socket}")
                return self
            except EngineError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise AssertionError("the small engine did not start:\n"
                                         + (self.root / "dockerd.log").read_text()[-3000:]) from None
                time.sleep(0.5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # A killed dockerd takes its containerd along but leaves each running container's shim: kill the
        # container (its init, and with it its pid namespace), then the shim.
        shims = subprocess.run(["pgrep", "-f", f"containerd-shim.* -address {self.root}/"], capture_output=True,
                               text=True).stdout.split()
        for pid in shims:
            subprocess.run(["pkill", "-KILL", "-P", pid], capture_output=True)
            subprocess.run(["kill", "-KILL", pid], capture_output=True)
        # then the whole directory, unmounting first what is mounted below (the data root's filesystem, and
        # a killed engine's network namespaces and container layers), as envkit removes its own scratch
        scratch.remove(self.root, strict=False)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    @contextlib.contextmanager
    def routed_out(self):
        """Its containers reach the network, as the main engine's do (NAT through this host): the engine was
        started with --iptables=false so as not to touch the main engine's chains, so the rules are added here."""
        net = self.subnet.rsplit(".", 1)[0] + ".0/24"
        rules = [["-t", "nat", "-A", "POSTROUTING", "-s", net, "!", "-o", self.bridge, "-j", "MASQUERADE"],
                 ["-I", "FORWARD", "-i", self.bridge, "!", "-o", self.bridge, "-j", "ACCEPT"],
                 ["-I", "FORWARD", "-o", self.bridge, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
                  "-j", "ACCEPT"]]
        added = []
        try:
            for rule in rules:
                _sh("iptables", *rule)
                added.append(rule)
            yield self
        finally:
            for rule in added:
                subprocess.run(["iptables", *("-D" if x in ("-A", "-I") else x for x in rule)], capture_output=True)

    def free(self) -> int:
        st = os.statvfs(self.mnt)
        return st.f_bavail * st.f_frsize

    def leave_free(self, nbytes: int) -> None:
        """Fill the filesystem until ``nbytes`` are left (a file of zeros, allocated at once)."""
        filler = self.mnt / "filler"
        filler.unlink(missing_ok=True)
        st = os.statvfs(self.mnt)
        _sh("fallocate", "-l", str(st.f_bavail * st.f_frsize - nbytes), str(filler))


@contextlib.contextmanager
def started_small_engine(size: str = SIZE):
    if os.geteuid() != 0 or not all(shutil.which(t) for t in TOOLS):
        pytest.skip(f"needs root and {', '.join(TOOLS)} (a second engine on a small loop-mounted disk)")
    root = Path(tempfile.mkdtemp(prefix="ekdf-", dir="/tmp"))  # short: containerd's socket paths live under it
    small = SmallEngine(root, size)
    try:
        yield small.start()
    finally:
        small.stop()


@pytest.fixture(scope="module")
def small_engine():
    with started_small_engine() as small:
        yield small


@pytest.fixture(scope="module")
def small_bundle(engine, tmp_path_factory):
    """The bundle of a small lock (numpy's closure; its base archive is 123 MB), made on the main engine."""
    lock, image = small_lock("diskfull")
    out = tmp_path_factory.mktemp("diskfull") / "diskfull.bundle"
    return make_bundle(engine, lock, image.name, out, ca_bundle=ca_bundle())


def bundle_build(small: SmallEngine, bundle: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envkit.cli", "bundle", "build", str(bundle), "--no-verify", *args],
                          cwd=ROOT, env=small.env, capture_output=True, text=True, timeout=600)


def test_the_second_engine_leaves_the_first_ones_bridge_alone(engine, small_engine):
    assert subprocess.run(["ip", "link", "show", "docker0"], capture_output=True).returncode == 0
    assert small_engine.engine.data_root() == str(small_engine.data)


def test_a_base_that_does_not_fit_is_an_error_that_says_whose_disk(small_engine, small_bundle):
    small_engine.leave_free(60 << 20)  # less than the base archive
    proc = bundle_build(small_engine, small_bundle, "--json")
    assert proc.returncode == 6, proc.stderr  # EngineError
    doc = json.loads(proc.stdout)
    assert doc["message"].startswith(f"cannot load {small_bundle / 'base.tar'}: the engine ran out of disk space (")
    assert f" free on {small_engine.data} now; its images hold " in doc["message"]
    assert doc["hint"].startswith("`envkit gc --dry-run` lists") and "no space left on device" in doc["hint"]
    assert "warning: only " in proc.stderr and "Traceback" not in proc.stderr
    assert small_engine.engine.client.images.list() == []


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_a_build_that_fills_the_engines_disk_says_so_and_tags_nothing(small_engine, small_bundle, builder):
    if builder == "buildkit" and not BuildKitBuilder(small_engine.engine).available():
        pytest.skip("BuildKit is not available")
    (small_engine.mnt / "filler").unlink(missing_ok=True)  # a load needs room for the archive and the layer
    base = json.loads((small_bundle / "manifest.json").read_text())["base"]
    with open(small_bundle / "base.tar", "rb") as fh:
        small_engine.engine.client.images.load(fh)  # loaded here, so the build skips the load
    small_engine.leave_free(40 << 20)  # the Debian packages (about 25 MB) and their install do not fit
    proc = bundle_build(small_engine, small_bundle, "--builder", builder)
    assert proc.returncode == 7, proc.stderr  # BuildError
    error = next(line for line in proc.stderr.splitlines() if line.startswith("error: "))
    with_what = " with BuildKit" if builder == "buildkit" else ""
    assert error.startswith("error: building vision/diskfull:") and error.endswith(")")
    assert f"{with_what} failed: the engine ran out of disk space (" in error
    assert f" free on {small_engine.data} now;" in error
    # exit 7 and "building": the load was skipped (the base is here; loading its 123 MB archive into 40 MB
    # would have failed first, with exit 6)
    assert "`envkit gc --build-cache 24` also prunes BuildKit's cache" in proc.stderr
    assert "Traceback" not in proc.stderr
    tags = [t for i in small_engine.engine.client.images.list() for t in i.tags]
    assert tags == [base["ref"]]  # nothing tagged but the base
    assert small_engine.engine.client.containers.list(all=True) == []


@pytest.fixture
def doomed_engine():
    """A small engine of its own: the test kills its daemon."""
    with started_small_engine() as small:
        yield small


def test_an_engine_killed_in_the_middle_of_a_build_is_said_to_have_stopped(doomed_engine, small_bundle):
    with open(small_bundle / "base.tar", "rb") as fh:
        doomed_engine.engine.client.images.load(fh)
    # the classic builder: its steps are "step i/n" lines, and a RUN step runs in a container of the engine's
    build = subprocess.Popen([sys.executable, "-m", "envkit.cli", "bundle", "build", str(small_bundle), "--no-verify",
                              "--no-cache", "--builder", "classic"], cwd=ROOT, env=doomed_engine.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    lines = []
    for line in build.stderr:  # the RUN step that installs the Debian packages: a container is running
        lines.append(line)
        if line.startswith("envkit: step 6/"):
            break
    time.sleep(1)
    doomed_engine.proc.kill()  # SIGKILL: no clean-up, the build's event stream breaks
    doomed_engine.proc.wait()
    rest = build.stderr.read()
    assert build.wait(60) == 7, "".join(lines) + rest  # BuildError
    error = next(line for line in rest.splitlines() if line.startswith("error: "))
    assert error.startswith("error: building vision/diskfull:") and " failed: the engine stopped answering (" in error
    assert "hint: is the engine still running (`docker info`; `make engine` starts it)?" in rest
    assert "Traceback" not in rest


def test_a_container_that_cannot_start_is_not_left_behind(engine, base):
    """Asked for GPUs on an engine without the NVIDIA runtime, the start fails: envkit says why and removes
    the container it created (docker-py's `containers.run` left one per attempt, in state Created)."""
    if engine.nvidia_runtime():
        pytest.skip("this engine has the NVIDIA runtime: a GPU container starts here")
    mine = {"label": f"{CONTAINER_LABEL}=no-start-probe"}
    with pytest.raises(EngineError) as caught:
        engine.run(base, ["true"], RunOptions(gpus=True, timeout=30, role="no-start-probe"))
    assert caught.value.message.startswith(f"cannot start {base}: could not select device driver")
    assert caught.value.hint == "for GPUs the NVIDIA Container Toolkit must be installed"
    assert engine.client.containers.list(all=True, filters=mine) == []


NIGHTLY_SPEC = """\
version: 1
team: diskfull
fleet: {min_driver: "550.54.15", gpus: [A100, H100, L40S], policy: minor}
defaults:
  base:
    bootstrap: {suite: bookworm, mirror: "http://deb.debian.org/debian"}
images:
  - {name: a, framework: "torch==2.5.*"}
  - {name: b, framework: "torch==2.5.*"}
"""


def old_build(small: SmallEngine, tmp: Path, n: int, nbytes: int) -> str:  # its image id
    """An earlier build of image a, as gc sees one (envkit's build labels, an older lock), holding ``nbytes``."""
    blob = tmp / f"old{n}.tar"
    with tarfile.open(blob, "w") as tar:
        info = tarfile.TarInfo(f"blob{n}")  # a name of its own: a layer of its own (same content, one layer)
        info.size = nbytes
        with open("/dev/zero", "rb") as zeros:
            tar.addfile(info, zeros)
    labels = {TEAM_LABEL: "diskfull", IMAGE_LABEL: "a", LOCK_LABEL: f"sha256:old{n}", CONTEXT_LABEL: f"sha256:old{n}"}
    small.engine.client.api.import_image(src=str(blob), repository="diskfull/a", tag=f"old{n}",
                                         changes=[f'LABEL "{k}"="{v}"' for k, v in labels.items()])
    blob.unlink()
    return small.engine.client.images.get(f"diskfull/a:old{n}").id


def nightly_team(engine, root: Path):
    """A team of two small images (a, b) locked in ``root``, their base in the main engine; the images."""
    root.mkdir()
    (root / "team.yaml").write_text(NIGHTLY_SPEC)
    images = tuple(small_lock(name)[1] for name in ("a", "b"))
    lock = small_lock("a")[0].model_copy(update={
        "team": "diskfull", "spec_digest": spec_digest(load_spec(root / "team.yaml")),
        "catalog_digest": load_catalog().digest, "images": images})
    write_lock(lock, root / "team.lock")
    ensure_base(engine, images[0].base, lambda _: None)
    return images


def nightly(small: SmallEngine, root: Path, *extra: str):
    proc = subprocess.run(
        [sys.executable, "-m", "envkit.cli", "nightly", str(root / "team.yaml"), "--locked", "--no-gpus",
         "--store", str(root / "history.sqlite"), "--reports", str(root / "reports"), "--out", str(root / "out"),
         "--json", *extra], cwd=ROOT, env=small.env, capture_output=True, text=True, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def copy_base(small: SmallEngine, ref: str) -> None:
    """The base, as a runner that built before has it."""
    saved = subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE)
    small.engine.client.images.load(saved.stdout)
    assert saved.wait() == 0


def buildkit_build(small: SmallEngine, tmp: Path, tag: str, nbytes: int, labels: dict | None = None) -> str:
    """Build ``tag`` with BuildKit on ``small``: one layer of ``nbytes`` (its own content), copied FROM scratch
    (nothing to pull). Its image id."""
    context = tmp / f"ctx-{tag.replace('/', '-').replace(':', '-')}"
    context.mkdir()
    with open(context / "blob", "wb") as fh:
        fh.write(tag.encode())  # content of its own: a layer (and a cache record) of its own
        fh.truncate(nbytes)
    (context / "Dockerfile").write_text("FROM scratch\nCOPY blob /blob\n"
                                        + "".join(f'LABEL "{k}"="{v}"\n' for k, v in (labels or {}).items()))
    subprocess.run([DOCKER_CLI, "build", "-q", "-t", tag, str(context)], env=dict(small.env, DOCKER_BUILDKIT="1"), check=True,
                   capture_output=True, timeout=300)
    shutil.rmtree(context)
    return small.engine.client.images.get(tag).id


def build_cache_bytes(small: SmallEngine) -> int:
    return sum(int(r.get("Size") or 0) for r in small.engine.client.df().get("BuildCache") or [])


def gc_on(small: SmallEngine, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, "-m", "envkit.cli", "gc", "--json", *args], cwd=ROOT, env=small.env,
                          capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


def test_gc_prunes_the_buildkit_cache_an_image_it_removed_held(tmp_path):
    """Removing a BuildKit build's image frees nothing while the cache keeps its layer: gc --build-cache reads
    the cache after the images went and has the engine prune what nothing uses (or shares) any more."""
    with started_small_engine("1G") as small:  # its own: the module's engine is kept nearly full by other tests
        if not BuildKitBuilder(small.engine).available():
            pytest.skip("BuildKit is not available")
        cache_gc_on(small, tmp_path)


def cache_gc_on(small_engine: SmallEngine, tmp_path: Path) -> None:
    """Two BuildKit builds of an envkit image; gc --keep 1 --build-cache 0, planned and then done."""

    def labelled(n):
        return {TEAM_LABEL: "cachegc", IMAGE_LABEL: "a", LOCK_LABEL: f"sha256:lock{n}", CONTEXT_LABEL: f"sha256:ctx{n}"}

    old = buildkit_build(small_engine, tmp_path, "cachegc/a:old", 60 << 20, labelled(1))
    time.sleep(1.1)  # a newer Created time (seconds) for the new build
    new = buildkit_build(small_engine, tmp_path, "cachegc/a:new", 60 << 20, labelled(2))
    store = tmp_path / "h.sqlite"
    subprocess.run([sys.executable, "-c",
                    f"from envkit.store.history import Store; Store.open({str(store)!r}).close()"], cwd=ROOT, check=True)
    proc, plan = gc_on(small_engine, "--team", "cachegc", "--keep", "1", "--store", str(store), "--build-cache",
                       "0", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert plan["would_remove"] == [old]
    cache = plan["build_cache"]
    shared = [r for r in cache["records"] if r["shared"] and r["size"] >= 60 << 20]
    assert len(shared) == 2 and all(r["keep"] for r in shared)  # both images are still here
    assert "the real run may prune more" in " ".join(plan["notes"])
    before, free_before = build_cache_bytes(small_engine), small_engine.free()

    proc, done = gc_on(small_engine, "--team", "cachegc", "--keep", "1", "--store", str(store), "--build-cache", "0")
    assert proc.returncode == 0, proc.stderr
    assert done["removed"] == [old]
    cache = done["build_cache"]
    assert cache["error"] is None and cache["freed_bytes"] >= 60 << 20, cache
    assert before - build_cache_bytes(small_engine) >= 60 << 20
    assert small_engine.free() - free_before >= 55 << 20  # the disk got it back (ext4 rounds)
    still = [r for r in cache["records"] if r["shared"] and r["size"] >= 60 << 20]
    assert len(still) == 1 and still[0]["keep"] and still[0]["id"] not in cache["pruned"]  # the new build's
    assert small_engine.engine.client.images.get("cachegc/a:new").id == new

    # without --build-cache the cache is never read, and the note says how
    proc, again = gc_on(small_engine, "--team", "cachegc", "--keep", "1", "--store", str(store))
    assert again["build_cache"] is None and any("--build-cache HOURS" in n for n in again["notes"])


@pytest.mark.skipif(not shutil.which("iptables"), reason="needs iptables (the second engine's way out)")
def test_a_nightly_that_fills_the_disk_stops_building_and_with_gc_reclaims_and_builds_again(engine, tmp_path):
    """Two images; the disk has room for neither. Without --gc: a fails saying the disk is full and b is not
    tried (it would download as much to fail the same way). With --gc: gc removes an old build of a, a is
    built again and b after it."""
    root = tmp_path / "team"
    images = nightly_team(engine, root)

    with started_small_engine("3G") as small, small.routed_out():
        copy_base(small, images[0].base.ref)
        old = [old_build(small, tmp_path, n, 600 << 20) for n in (1, 2)]
        # a's build needs about 510 MiB at its peak (measured: 413 MiB stay); gc can give 600 back
        small.leave_free(100 << 20)

        proc, doc = nightly(small, root, "--builder", "classic")  # (BuildKit's: the test below)
        assert proc.returncode == 11, proc.stderr[-3000:]  # build failure
        a, b = doc["images"]
        assert (a["build"], b["build"]) == ("failed", "not built")
        assert a["reasons"][0].startswith(f"building {a['tag']} failed: the engine ran out of disk space (")
        assert b["reasons"] == ["not built: the engine's disk filled up building a in this run; free space on it "
                                "(`envkit gc --dry-run` shows what gc would remove; `envkit nightly --gc` runs it) "
                                "and run the nightly again: it rebuilds only what is missing"]
        assert "[b] step" not in proc.stderr  # b was never tried
        assert doc["reclaimed"] is None and "gc" not in doc

        small.leave_free(100 << 20)  # again: the failed build's steps take some
        proc, doc = nightly(small, root, "--builder", "classic", "--gc", "--keep", "1")
        a, b = doc["images"]
        assert (a["build"], b["build"]) == ("built", "built"), proc.stderr[-3000:]
        assert a["notes"][0].startswith(f"the engine's disk filled up (building {a['tag']} failed: the engine ran "
                                        "out of disk space (")
        assert a["notes"][0].endswith("; gc removed 1 image(s), and the build was tried again")
        assert "[a] the engine's disk is full: running gc for the team now, then building it again" in proc.stderr
        assert doc["reclaimed"]["removed"] == [old[0]]  # the newer old build stays (--keep 1) while a is missing
        # the small images hold numpy, not torch: verification fails, which is not what this test is about
        assert proc.returncode == 12 and doc["outcome"] == "certification failure", proc.stderr[-3000:]
        assert doc["gc"]["removed"] == [old[1]]  # after the run: older than a's new build
        left = {i.id: i.tags for i in small.engine.client.images.list()}
        assert not set(old) & set(left) and {a["tag"], b["tag"]} <= {t for tags in left.values() for t in tags}


@pytest.mark.skipif(not shutil.which("iptables"), reason="needs iptables (the second engine's way out)")
def test_a_buildkit_nightly_that_fills_the_disk_prunes_the_cache_it_did_not_use_and_builds_again(engine, tmp_path):
    """With BuildKit, old builds' space is in the build cache, not in images gc can remove: the reclaim prunes
    the records this run has not used (older builds' layers), keeps the ones it has, and the build goes through."""
    root = tmp_path / "team"
    images = nightly_team(engine, root)
    with started_small_engine("3G") as small, small.routed_out():
        if not BuildKitBuilder(small.engine).available():
            pytest.skip("BuildKit is not available")
        copy_base(small, images[0].base.ref)
        # an earlier BuildKit build whose image is gone: its 1.2 GB layer stays in the cache, shared with nothing
        # (and so does its context: BuildKit keeps what it was sent)
        buildkit_build(small, tmp_path, "other/old:1", 1200 << 20)
        small.engine.client.images.remove("other/old:1")
        assert build_cache_bytes(small) >= 1200 << 20
        small.leave_free(100 << 20)

        proc, doc = nightly(small, root, "--builder", "buildkit", "--gc", "--keep", "1", "--build-cache", "1")
        a, b = doc["images"]
        assert (a["build"], b["build"]) == ("built", "built"), proc.stderr[-3000:]
        # (the image, or the OS stage the nightly's BuildKit build makes first: <tag>-os)
        assert re.match(rf"the engine's disk filled up \(building {re.escape(a['tag'])}(-os)? with BuildKit failed: "
                        r"the engine ran out of disk space \(", a["notes"][0]), a["notes"][0]
        assert re.search(r"; gc removed 0 image\(s\) and [1-9]\d* build cache record\(s\) \(\d+ MB\), and the "
                         r"build was tried again$", a["notes"][0]), a["notes"][0]
        cache = doc["reclaimed"]["build_cache"]
        assert cache["since"] == "this nightly run started" and cache["freed_bytes"] >= 1200 << 20
        kept = [r for r in cache["records"] if r["keep"]]
        assert kept and all("used since this nightly run started" in r["reasons"] or r["shared"] or r["in_use"]
                            for r in kept)  # what a's first try made (its base, the pip cache) stayed for the retry
        # the gc after the run (--build-cache 1) reads the cache again: all of it was used within the hour
        after = doc["gc"]["build_cache"]
        assert after["since"] == "1 h ago (--build-cache 1)" and after["pruned"] == [] and after["records"]
        assert all(r["keep"] for r in after["records"])
        assert proc.returncode == 12, proc.stderr[-3000:]  # numpy images fail verification, as above
