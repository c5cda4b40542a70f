"""The CLI's contract for bad input: clear message, non-zero exit, nothing written."""

import contextlib
import errno
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from envkit.images import bundle as bundle_mod
from envkit.images.builder import Outcome
from envkit.images.layer_record import load_record
from envkit.engine.protocol import BuildEvent
from envkit.cli import main
from envkit.lock import load_lock
from envkit.app.resolve import Resolved
from envkit.spec import load_spec
from tests.conftest import MINIMAL
from tests.unit.images.test_bundle_frameworks import fake_fetch_pinned
from tests.unit.lockfixtures import make_lock


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_misspelt_key_fails_before_anything_is_written(write_spec, tmp_path):
    spec = write_spec(MINIMAL.replace("min_driver", "min_drivr"))
    result = invoke("render", spec, "--out", tmp_path / "out")
    assert result.exit_code == 2
    assert f"{spec}:4:3" in result.output
    assert "min_drivr" in result.output
    assert not (tmp_path / "out").exists()
    assert not spec.with_suffix(".lock").exists()


def test_unknown_gpu_fails_with_line_in_json(write_spec):
    spec = write_spec(MINIMAL.replace("H100]", "Z9000]"))
    result = invoke("resolve", spec, "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"] == "SpecError"
    assert doc["location"] == f"{spec}:5:16"
    assert "Z9000" in doc["message"]
    assert not spec.with_suffix(".lock").exists()


def test_malformed_version(write_spec):
    spec = write_spec(MINIMAL + '    python: "three"\n')
    result = invoke("build", spec, "--json")
    assert result.exit_code == 2
    assert "'three' is not a valid Python version" in result.output


def test_missing_spec_file(tmp_path):
    result = invoke("resolve", tmp_path / "nope.yaml")
    assert result.exit_code == 2
    assert "cannot read" in result.output


@pytest.mark.parametrize("how", ["--lock the spec", "a spec named *.lock", "--lock a hard link to it"])
def test_the_lock_never_replaces_the_spec(write_spec, tmp_path, how):
    """Before anything is resolved or written: the spec is the user's source, the lock is envkit's output."""
    spec = write_spec(MINIMAL, name="team.lock" if how == "a spec named *.lock" else "team.yaml")
    args = ["resolve", spec, "--json"]
    if how == "--lock the spec":
        args += ["--lock", spec]
    elif how == "--lock a hard link to it":
        (tmp_path / "linked.lock").hardlink_to(spec)
        args += ["--lock", tmp_path / "linked.lock"]
    before = sorted(tmp_path.iterdir())
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "SpecError" and f"{spec} would be its own lock" in doc["message"]
    assert "give --lock another path" in doc["hint"]
    assert spec.read_text() == MINIMAL.lstrip() and sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("lock, reason", [("/proc/x.lock", "cannot hold files"), ("a" * 250 + ".lock", "too long")])
def test_a_lock_path_the_kernel_refuses_is_named_not_a_traceback(write_spec, monkeypatch, tmp_path, lock, reason):
    monkeypatch.chdir(tmp_path)
    result = invoke("resolve", write_spec(MINIMAL), "--lock", lock)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception  # not a crash
    assert "cannot use" in result.output and reason in result.output


@pytest.fixture
def example_copy(tmp_path):
    """examples/team.yaml and its committed lock, copied: the lock matches (no index is asked)."""
    for name in ("team.yaml", "team.lock"):
        (tmp_path / name).write_bytes((ROOT / "examples" / name).read_bytes())
    return tmp_path / "team.yaml"


@pytest.mark.parametrize("command", [["render"], ["build", "--no-verify"], ["nightly", "--no-gpus"]])
@pytest.mark.parametrize("lock_state", ["stale", "missing"])
def test_locked_never_resolves_nor_writes_the_lock(engine, example_copy, tmp_path, command, lock_state):
    """--locked: a stale or missing lock fails with exit 5 before anything is resolved, rendered or written (a
    nightly --locked used to re-resolve and rewrite a stale lock, then fail)."""
    lock = example_copy.with_suffix(".lock")
    if lock_state == "stale":
        example_copy.write_text(example_copy.read_text().replace('"numpy==2.1.*"', '"numpy==2.0.*"'))
    else:
        lock.unlink()
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    out = tmp_path / "out"
    result = invoke(command[0], example_copy, *command[1:], "--locked", "--out", out, "--json",
                    *(["--store", out / "h.sqlite", "--reports", out / "reports"] if command[0] == "nightly" else []))
    assert result.exit_code == 5, result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "LockError"
    assert ("is stale for" in doc["message"] and "the spec changed since the lock was written" in doc["message"]
            if lock_state == "stale" else "--locked needs a lock at" in doc["message"])
    assert "resolving" not in result.stderr
    assert {p: p.read_bytes() for p in tmp_path.iterdir() if p != out} == before
    assert not (out / "dockerfiles").exists() and not (out / "compose").exists()


def test_render_says_when_it_re_resolved_the_lock(example_copy, tmp_path, monkeypatch):
    from envkit.app import resolve as pipeline

    out = tmp_path / "out"
    result = invoke("render", example_copy, "--out", out, "--locked", "--json")  # a matching lock: used as it is
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["lock_reused"] is True and doc["lock"] == str(example_copy.with_suffix(".lock"))
    example_copy.write_text(example_copy.read_text().replace('"numpy==2.1.*"', '"numpy==2.0.*"'))
    resolved = load_lock(example_copy.with_suffix(".lock"))
    monkeypatch.setattr(pipeline, "resolve", lambda *a, **k: resolved)  # no index: "re-resolved" to the same pins
    result = invoke("render", example_copy, "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"wrote {example_copy.with_suffix('.lock')} (re-resolved)"


def test_schema_command_prints_json_schema():
    result = invoke("schema")
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["additionalProperties"] is False
    assert "images" in schema["properties"]


# --- builders, bundles: the CLI's wiring (the heavy functions are replaced) -------------------------

ROOT = Path(__file__).resolve().parents[3]


class FakeEngine:
    """Answers what the CLI asks before any build: the API version (BuildKit's check)."""

    def version(self):
        return {"engine": "docker", "version": "20.10.24", "api": "1.41"}

    def find_image(self, labels):  # no image of the lock yet: the pre-build disk check weighs every image
        return None

    def data_root(self):  # not on this host: the disk check has nothing to measure
        return None

    def layer_chains(self):  # what a build may reuse (its report of the layers it made): nothing
        return set()

    def layer_sizes(self, ref):
        return None


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine()
    monkeypatch.setattr("envkit.engine.docker_engine.connect", lambda: fake)
    return fake


@pytest.fixture
def no_buildkit_cli(monkeypatch, tmp_path):
    """BuildKit's CLI (/usr/bin/docker, Debian's docker.io) is not installed."""
    missing = tmp_path / "no-such" / "docker"
    monkeypatch.setattr("envkit.engine.buildkit.DOCKER_CLI", str(missing))
    return missing


def test_builders_offered_are_the_renderers():
    from envkit import cli
    from envkit.engine.protocol import AUTO, BUILDER_CHOICES, BUILDERS

    assert cli.BUILDER_CHOICES == BUILDER_CHOICES == (AUTO, *BUILDERS)


@pytest.mark.parametrize("command", [["build", "team.yaml"], ["nightly", "team.yaml"], ["bundle", "build", "dir"]])
def test_unknown_builder_is_a_usage_error(command):
    result = invoke(*command, "--builder", "kaniko")
    assert result.exit_code == 2
    assert "'kaniko' is not one of 'auto', 'classic', 'buildkit'" in result.output


@pytest.mark.parametrize("args, builder", [([], "auto"), (["--builder", "buildkit"], "buildkit")])
def test_build_passes_the_builder_through(engine, monkeypatch, args, builder):
    seen = {}

    def build_spec(spec, out_root, eng, **kwargs):
        seen.update(kwargs, engine=eng)
        lock = make_lock()
        outcome = Outcome("torch25", "vision/torch25:x", "built", "sha256:1", 2**30, 3.0)
        return Resolved(None, lock, Path("team.lock"), True), [outcome]

    monkeypatch.setattr("envkit.app.build.build_spec", build_spec)
    result = invoke("build", "team.yaml", "--no-verify", *args, "--json")
    assert result.exit_code == 0, result.output
    assert seen["builder"] == builder and seen["verify"] is False and seen["engine"] is engine
    doc = json.loads(result.stdout)
    assert doc["builder"] == builder and doc["images"][0]["tag"] == "vision/torch25:x"


@pytest.mark.parametrize("args", [["--reproducible"], ["--reproducible", "--record"], ["--reproducible", "--no-cache"]])
def test_build_passes_reproducible_through_with_its_layers(engine, monkeypatch, args):
    seen = {}

    def build_spec(spec, out_root, eng, **kwargs):
        seen.update(kwargs)
        outcome = Outcome("torch25", "vision/torch25:x", "built", "sha256:1", 2**30, 3.0,
                          layers={"extra": "sha256:e", "payload": "sha256:p"}, phases={"install extra": 1.5},
                          reused=("extra",))
        return Resolved(None, make_lock(), Path("team.lock"), True), [outcome]

    monkeypatch.setattr("envkit.app.build.build_spec", build_spec)
    result = invoke("build", "team.yaml", *args, "--json")
    assert result.exit_code == 0, result.output
    assert seen["reproducible"] is True and seen["record_layers"] is ("--record" in args)
    assert seen["no_cache"] is ("--no-cache" in args)
    doc = json.loads(result.stdout)
    assert doc["reproducible"] is True
    assert doc["images"][0]["layers"] == {"extra": "sha256:e", "payload": "sha256:p"}
    assert doc["images"][0]["phases_seconds"] == {"install extra": 1.5} and doc["images"][0]["reused"] == ["extra"]
    human = invoke("build", "team.yaml", *args)
    assert "  torch25 layers: extra sha256:e (reused), payload sha256:p" in human.output


def test_record_without_reproducible_is_a_usage_error(engine, monkeypatch):
    monkeypatch.setattr("envkit.app.build.build_spec", lambda *a, **k: pytest.fail("built"))
    result = invoke("build", "team.yaml", "--record")
    assert result.exit_code == 2
    assert "--record writes the layer digests of a reproducible build: add --reproducible" in result.output


def test_buildkit_without_its_cli_fails_before_resolving(engine, no_buildkit_cli, write_spec):
    spec = write_spec(MINIMAL)
    result = invoke("build", spec, "--builder", "buildkit", "--json")
    assert result.exit_code == 7
    doc = json.loads(result.stdout)
    assert doc["error"] == "BuildError"
    assert f"needs the docker CLI at {no_buildkit_cli}, which is missing" in doc["message"]
    assert "apt-get install docker.io" in doc["hint"] and "--builder classic" in doc["hint"]
    assert "hint: install Debian's docker.io" in result.stderr
    assert not spec.with_suffix(".lock").exists()  # nothing resolved, nothing written


def test_auto_is_buildkit_where_it_can_build_else_classic(engine, no_buildkit_cli, monkeypatch):
    """The default builder: BuildKit wherever its CLI can build here, the classic builder elsewhere (never an error);
    BuildKit named where it cannot build is refused, with the way out."""
    from envkit.images.builder import pick_builder
    from envkit.errors import BuildError

    assert pick_builder(engine, "auto") == "classic" and pick_builder(engine, "classic") == "classic"
    with pytest.raises(BuildError, match="--builder classic"):
        pick_builder(engine, "buildkit")
    monkeypatch.setattr("envkit.engine.buildkit.BuildKitBuilder.unavailable", lambda self: None)
    assert pick_builder(engine, "auto") == "buildkit" and pick_builder(engine, "classic") == "classic"


def test_nightly_passes_the_builder_through(engine, monkeypatch, tmp_path):
    from envkit.app.nightly import NightlyResult

    seen = {}

    def run_nightly(spec, eng, store, **kwargs):
        seen.update(kwargs)
        return NightlyResult(1, 10, [], {}, 0.1, False)

    monkeypatch.setattr("envkit.app.nightly.run_nightly", run_nightly)
    monkeypatch.setattr("envkit.store.history.Store.open", lambda *a, **k: contextlib.nullcontext())
    result = invoke("nightly", "team.yaml", "--builder", "buildkit", "--json")
    assert result.exit_code == 10, result.output
    assert seen["builder"] == "buildkit"
    assert json.loads(result.stdout)["outcome"] == "nothing to do"


def test_nightly_gc_also_reclaims_when_a_build_fills_the_disk(engine, monkeypatch):
    """--gc hands the run a reclaim step (gc for the team, keeping the tags it is given); without --gc, none."""
    from envkit.app.nightly import NightlyResult

    seen, swept = {}, []

    def run_nightly(spec, eng, store, **kwargs):
        seen.update(kwargs)
        return NightlyResult(1, 10, [], {}, 0.1, False)

    monkeypatch.setattr("envkit.app.nightly.run_nightly", run_nightly)
    monkeypatch.setattr("envkit.store.history.Store.open", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr("envkit.app.nightly_gc.NightlyGc.sweep", lambda self, tags, cache=None:
                        swept.append((tags, self.keep, cache)) or {"removed": []})
    assert invoke("nightly", "team.yaml", "--json").exit_code == 10
    assert seen["reclaim"] is None and swept == []
    result = invoke("nightly", "team.yaml", "--gc", "--keep", "1", "--builder", "classic", "--json")
    assert result.exit_code == 10, result.output
    assert seen["reclaim"](["vision/a:1"]) == {"removed": []}
    assert swept == [([], 1, None), (["vision/a:1"], 1, None)]  # after the run (no image), then the reclaim called here
    assert json.loads(result.stdout)["reclaimed"] is None

    # with BuildKit the reclaim also prunes the build cache this run has not used; the gc after the run does not
    swept.clear()
    monkeypatch.setattr("envkit.images.builder.require_builder", lambda *a: None)
    monkeypatch.setattr("envkit.engine.buildkit.BuildKitBuilder.require", lambda self: None)
    before = datetime.now(timezone.utc)
    assert invoke("nightly", "team.yaml", "--gc", "--builder", "buildkit", "--json").exit_code == 10
    seen["reclaim"](["vision/a:1"])
    (_, _, after_run), (_, _, reclaim) = swept
    assert after_run is None
    assert reclaim.what == "this nightly run started" and before <= reclaim.since <= datetime.now(timezone.utc)

    # --build-cache HOURS: the gc after the run prunes the cache too, by age; it needs --gc
    swept.clear()
    assert invoke("nightly", "team.yaml", "--gc", "--build-cache", "48", "--json").exit_code == 10
    (_, _, after_run), = swept
    assert after_run.what == "48 h ago (--build-cache 48)"
    assert abs((datetime.now(timezone.utc) - after_run.since).total_seconds() - 48 * 3600) < 60
    refused = invoke("nightly", "team.yaml", "--build-cache", "48")
    assert refused.exit_code == 2 and "--build-cache says what the gc after the run prunes; give --gc too" in refused.output


def test_nightly_gc_runs_even_when_the_run_fails(engine, monkeypatch):
    """README: `nightly --gc` keeps each runner's disk in check whatever the run's outcome; a run that failed
    (here an index that does not answer, exit 3) used to exit before its gc."""
    from envkit.errors import PackageIndexError

    swept = []

    def run_nightly(spec, eng, store, **kwargs):
        raise PackageIndexError("the package index https://pypi.example/simple does not answer")

    monkeypatch.setattr("envkit.app.nightly.run_nightly", run_nightly)
    monkeypatch.setattr("envkit.store.history.Store.open", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr("envkit.app.nightly_gc.NightlyGc.sweep", lambda self, tags, cache=None:
                        swept.append((tags, self.keep)) or {"removed": []})
    result = invoke("nightly", "team.yaml", "--gc", "--json")
    assert result.exit_code == 3 and json.loads(result.stdout)["error"] == "PackageIndexError"
    assert swept == [([], 2)]
    assert invoke("nightly", "team.yaml", "--json").exit_code == 3 and swept == [([], 2)]  # no --gc: no gc

    from envkit.errors import RunInProgressError

    def held(spec, eng, store, **kwargs):
        raise RunInProgressError("the nightly run of team 'vision' is running (pid 4242)")

    monkeypatch.setattr("envkit.app.nightly.run_nightly", held)
    result = invoke("nightly", "team.yaml", "--gc", "--json")
    assert result.exit_code == 15 and swept == [([], 2)]  # never beside the team's running nightly


def test_nightly_with_buildkit_missing_fails_before_the_run(engine, no_buildkit_cli, monkeypatch):
    monkeypatch.setattr("envkit.store.history.Store.open", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr("envkit.app.nightly.load", lambda *_: pytest.fail("the spec was loaded"))
    result = invoke("nightly", "team.yaml", "--builder", "buildkit")
    assert result.exit_code == 7
    assert "missing here" in result.stderr and "docker.io" in result.stderr


# --- envkit bundle make -----------------------------------------------------------------------------

@pytest.fixture
def example_resolved(monkeypatch):
    """resolve_spec answers with the committed example lock (no index, no resolver)."""
    calls = []

    def resolve_spec(spec_path, **kwargs):
        calls.append(spec_path)
        stem = ROOT / "examples" / Path(spec_path).stem
        return Resolved(load_spec(stem.with_suffix(".yaml")), load_lock(stem.with_suffix(".lock")),
                        stem.with_suffix(".lock"), True)

    # envkit.app.build first: patching it imports it where no test did yet, and an import after app.resolve's patch
    # would bind the fake as its own resolve_spec, which monkeypatch would then "restore" for every later test
    monkeypatch.setattr("envkit.app.build.resolve_spec", resolve_spec)  # render, build and bundle make resolve first
    monkeypatch.setattr("envkit.app.resolve.resolve_spec", resolve_spec)
    return calls


@pytest.fixture
def offline_parts(monkeypatch):
    """make_bundle's network and engine parts, replaced by small files; ``fail`` makes the wheels fail."""
    state = {"fail": False}

    class Base:
        id = "sha256:" + "b" * 64

    def download_wheels(image, dest, *, ca_bundle, extra_index_url=None):
        state["extra_index_url"] = extra_index_url  # the spec's index, as the resolver used it
        if state["fail"]:
            raise bundle_mod.BuildError("downloading the wheels of torch25 failed (pip exit 1)",
                                        hint="is it reachable?")
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "numpy-2.1.3-cp311-cp311-manylinux_2_17_x86_64.whl").write_bytes(b"wheel")

    def fetch_debs(engine, lock, image, dest):
        (dest / "os").mkdir(parents=True)
        (dest / "os" / "python3_3.11.2-1_amd64.deb").write_bytes(b"deb")

    monkeypatch.setattr(bundle_mod, "ensure_base", lambda engine, base, progress, phases=None: Base())
    monkeypatch.setattr(bundle_mod, "download_wheels", download_wheels)
    monkeypatch.setattr(bundle_mod, "fetch_debs", fetch_debs)
    monkeypatch.setattr(bundle_mod, "fetch_pinned", fake_fetch_pinned)
    monkeypatch.setattr(bundle_mod, "save_image", lambda engine, ref, path: path.write_bytes(b"tar"))
    return state


def test_bundle_make_writes_a_bundle(engine, example_resolved, offline_parts, tmp_path):
    out = tmp_path / "out" / "torch25.bundle"
    result = invoke("bundle", "make", "examples/team.yaml", "--bundle", out, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    lock = load_lock(ROOT / "examples" / "team.lock")
    assert doc["bundle"] == str(out) and doc["image"] == "torch25" and doc["lock_hash"] == lock.images[0].hash
    assert doc["tag"].startswith("vision/torch25:") and doc["wheels"] == 1 and doc["size_bytes"] > 0
    assert offline_parts["extra_index_url"] == "https://pypi.org/simple"  # the spec's index (none set: PyPI)
    manifest = bundle_mod.verify_bundle(out)
    assert manifest["image"] == "torch25" and "base.tar" in manifest["files"]
    # the lock's layer record for the image, beside the bundle's lock (`verify --lock DIR/envkit.lock` reads it)
    assert "envkit.layers.json" in manifest["files"] and doc["layer_record"] is True
    carried = load_record(out / "envkit.lock")
    assert list(carried) == ["torch25"] and carried["torch25"] == load_record(ROOT / "examples" / "team.lock")["torch25"]
    assert "envkit: downloading" in result.stderr  # progress on stderr, stdout is the JSON alone
    assert sorted(p.name for p in out.parent.iterdir()) == ["torch25.bundle"]  # no staging left


def test_bundle_make_replaces_an_old_bundle_only_when_the_new_one_is_whole(engine, example_resolved,
                                                                          offline_parts, tmp_path):
    out = tmp_path / "torch25.bundle"
    first = invoke("bundle", "make", "examples/team.yaml", "--bundle", out)
    assert first.exit_code == 0
    assert f"build it with no network: envkit bundle build {out}\n  (--reproducible:" in first.stdout
    assert f"--lock {out}/envkit.lock` then compares them with the lock's layer record" in first.stdout
    before = bundle_mod.file_hashes(out)
    offline_parts["fail"] = True
    result = invoke("bundle", "make", "examples/team.yaml", "--bundle", out)
    assert result.exit_code == 7
    assert "downloading the wheels of torch25 failed" in result.stderr and "hint: is it reachable?" in result.stderr
    assert bundle_mod.file_hashes(out) == before  # the old bundle, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["torch25.bundle"]  # no half-written staging dir
    offline_parts["fail"] = False
    (out / "context" / "wheelhouse" / "stray.whl").write_bytes(b"old")
    assert invoke("bundle", "make", "examples/team.yaml", "--bundle", out).exit_code == 0
    assert not (out / "context" / "wheelhouse" / "stray.whl").exists()  # replaced as a whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["torch25.bundle"]



def test_a_full_disk_on_this_host_is_an_error_not_a_traceback(engine, example_resolved, offline_parts, tmp_path,
                                                              monkeypatch):
    def save_image(engine, ref, path):  # what bundle.save_image raises when a write fills the disk
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(bundle_mod, "save_image", save_image)
    result = invoke("bundle", "make", "examples/team.yaml", "--bundle", tmp_path / "torch25.bundle", "--json")
    assert result.exit_code == 1 and "Traceback" not in result.output
    doc = json.loads(result.stdout)
    assert doc["error"] == "EnvkitError" and "/base.tar (" in doc["message"]
    assert doc["message"].endswith(" free there now)")
    assert doc["message"].startswith(f"making the bundle {tmp_path / 'torch25.bundle'} failed: this host ran out "
                                     "of disk space writing ")
    assert doc["hint"].startswith(f"nothing was written to {tmp_path / 'torch25.bundle'}; free space on that disk")
    assert list(tmp_path.iterdir()) == []  # the staging directory went with the failure


def test_a_full_disk_anywhere_else_is_an_error_not_a_traceback(engine, example_resolved, monkeypatch, tmp_path):
    def build_image(*args, **kwargs):  # e.g. the base's rootfs archive, written under TMPDIR
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/envkit-rootfs-vm-1-x/rootfs.tar")

    monkeypatch.setattr("envkit.app.build.build_image", build_image)
    result = invoke("build", "examples/team.yaml", "--no-verify", "--out", tmp_path)  # (not the checkout's dockerfiles/)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert ("error: envkit build: this host ran out of disk space writing /tmp/envkit-rootfs-vm-1-x/rootfs.tar"
            in result.stderr)
    assert "point --out or TMPDIR" in result.stderr

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr("envkit.app.build.build_image", broken)
    with pytest.raises(OSError):  # any other OSError is a bug to see whole
        CliRunner().invoke(main, ["build", "examples/team.yaml", "--no-verify", "--out", str(tmp_path)],
                           catch_exceptions=False)


@pytest.mark.parametrize("raised, said", [
    ("requests", "envkit build: the engine stopped answering (('Connection aborted.', ConnectionRefusedError(111, "
                 "'Connection refused')))"),
    ("urllib3", "envkit build: the engine stopped answering (Connection broken: IncompleteRead(0 bytes read))"),
    ("docker", "envkit build: the engine refused: Error processing tar file(exit status 1): unexpected EOF")])
def test_an_engine_that_goes_away_is_an_error_not_a_traceback(engine, example_resolved, monkeypatch, raised, said,
                                                               tmp_path):
    import docker.errors
    import requests
    import urllib3.exceptions

    errors = {"requests": requests.exceptions.ConnectionError(("Connection aborted.", ConnectionRefusedError(
                  111, "Connection refused"))),
              "urllib3": urllib3.exceptions.ProtocolError("Connection broken: IncompleteRead(0 bytes read)"),
              "docker": docker.errors.ImageLoadError("Error processing tar file(exit status 1): unexpected EOF")}

    def build_image(*args, **kwargs):  # what a docker-py call raises when the engine stops mid-command
        raise errors[raised]

    monkeypatch.setattr("envkit.app.build.build_image", build_image)
    result = invoke("build", "examples/team.yaml", "--no-verify", "--json", "--out", tmp_path)
    assert result.exit_code == 6 and "Traceback" not in result.output  # EngineError
    doc = json.loads(result.stdout)
    assert (doc["error"], doc["message"]) == ("EngineError", said)
    if raised != "docker":
        assert doc["hint"].startswith("is the engine still running (`docker info`; `make engine` starts it)?")

def test_bundle_make_refuses_to_replace_what_is_not_a_bundle(engine, example_resolved, tmp_path):
    out = tmp_path / "results"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = invoke("bundle", "make", "examples/team.yaml", "--bundle", out, "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["message"] == f"{out} exists and is not an envkit bundle; refusing to replace it"
    assert "--out" in doc["hint"]
    assert (out / "keep.txt").read_text() == "mine"
    assert example_resolved == []  # refused before resolving


def test_bundle_make_refuses_the_working_directory(engine, example_resolved, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.yaml").write_text("")
    result = invoke("bundle", "make", "team.yaml", "--bundle", ".")
    assert result.exit_code == 1
    assert "is the working directory" in result.stderr and "hint: choose a new directory" in result.stderr
    assert (tmp_path / "team.yaml").exists()


def test_bundle_make_needs_image_when_the_spec_has_several(engine, example_resolved, tmp_path):
    result = invoke("bundle", "make", "examples/frameworks.yaml", "--bundle", tmp_path / "b", "--json")
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert "a bundle holds one" in doc["message"] and doc["hint"] == "choose it with --image NAME"
    result = invoke("bundle", "make", "examples/frameworks.yaml", "--bundle", tmp_path / "b", "--image", "nope")
    assert result.exit_code == 2 and "no image named 'nope'" in result.stderr
    assert not (tmp_path / "b").exists()


def test_bundle_make_refuses_images_envkit_cannot_bundle(engine, example_resolved, tmp_path, monkeypatch):
    """Every framework bundles today; the refusal is shown on TensorFlow with its bundles switched off."""
    import dataclasses

    from envkit import frameworks

    monkeypatch.setitem(frameworks.FRAMEWORKS, "tensorflow", dataclasses.replace(frameworks.TENSORFLOW, bundles=False))
    result = invoke("bundle", "make", "examples/frameworks.yaml", "--bundle", tmp_path / "b", "--image", "tf")
    assert result.exit_code == 7 and "only PyTorch and JAX images" in result.stderr
    assert not (tmp_path / "b").exists()


def test_bundle_make_needs_its_bundle_directory():
    result = invoke("bundle", "make", "examples/team.yaml")
    assert result.exit_code == 2 and "Missing option '--bundle'" in result.output


# --- envkit bundle build ----------------------------------------------------------------------------

@pytest.mark.parametrize("args, builder", [([], "auto"), (["--builder", "buildkit"], "buildkit"),
                                           (["--reproducible"], "auto")])
def test_bundle_build_passes_its_options_through(engine, monkeypatch, tmp_path, args, builder):
    monkeypatch.delenv("ENVKIT_TRUSTED_KEYS", raising=False)
    seen = {}

    def build_from_bundle(eng, path, **kwargs):
        seen.update(kwargs, path=path)
        kwargs["progress"](BuildEvent("step", "FROM envkit-base/debian:bookworm", 1, 9))
        kwargs["progress"](BuildEvent("log", " ---> 0123456789ab"))  # build log: only with -v
        kwargs["progress"]("loading envkit-base/debian:bookworm from base.tar")  # envkit's own: always
        return Outcome("torch25", "vision/torch25:x", "built", "sha256:1", 2**30, 3.0)

    monkeypatch.setattr(bundle_mod, "build_from_bundle", build_from_bundle)
    result = invoke("bundle", "build", tmp_path, "--no-verify", "--no-cache", *args, "--json")
    assert result.exit_code == 0, result.output
    assert seen["builder"] == builder and seen["verify"] is False and seen["no_cache"] is True
    reproducible = "--reproducible" in args
    assert seen["path"] == tmp_path and seen["reproducible"] is reproducible
    doc = json.loads(result.stdout)
    assert doc == {"bundle": str(tmp_path), "builder": builder, "reproducible": reproducible,
                   "images": [doc["images"][0]],
                   "signature": {"checked": False, "why": "not checked: no trusted key given", "signed": False},
                   "carried": {"checked": False, "documents": []}}  # (a bundle made without --registry)
    assert seen["signed_manifest"] is None
    assert "the bundle's signature was not checked (no trusted key given" in result.stderr
    assert doc["images"][0]["tag"] == "vision/torch25:x" and doc["images"][0]["action"] == "built"
    assert "envkit: step 1/9: FROM" in result.stderr and "0123456789ab" not in result.stderr
    assert "envkit: loading envkit-base/debian:bookworm from base.tar" in result.stderr
    verbose = CliRunner().invoke(main, ["-v", "bundle", "build", str(tmp_path)])
    assert verbose.exit_code == 0 and "0123456789ab" in verbose.stderr
    assert "vision/torch25:x" in verbose.stdout  # the human table


def test_bundle_build_of_a_directory_that_is_no_bundle(engine, tmp_path):
    result = invoke("bundle", "build", tmp_path / "missing", "--json")
    assert result.exit_code == 7
    doc = json.loads(result.stdout)
    assert doc["message"].startswith(f"{tmp_path / 'missing'} is not an envkit bundle")
    assert "envkit bundle make" in doc["hint"]


def test_bundle_build_with_buildkit_missing_fails_before_loading_anything(engine, no_buildkit_cli, monkeypatch,
                                                                          tmp_path):
    monkeypatch.setattr(bundle_mod, "verify_bundle", lambda *_: pytest.fail("the bundle was read"))
    result = invoke("bundle", "build", tmp_path, "--builder", "buildkit")
    assert result.exit_code == 7
    assert f"needs the docker CLI at {no_buildkit_cli}" in result.stderr
    assert "apt-get install docker.io" in result.stderr


def test_catalog_export_writes_a_copy_and_refuses_to_overwrite(tmp_path):
    from click.testing import CliRunner

    from envkit.cli import main

    dest = tmp_path / "team-catalog"
    first = CliRunner().invoke(main, ["catalog", "export", str(dest), "--json"])
    assert first.exit_code == 0, first.output
    doc = json.loads(first.stdout)
    assert doc["env"] == {"ENVKIT_CATALOG": str(dest.resolve())} and (dest / "pytorch.yaml").is_file()
    assert (dest / "perf.yaml").is_file()  # the performance floors travel with the copy, for the team to review
    again = CliRunner().invoke(main, ["catalog", "export", str(dest)])
    assert again.exit_code == 2 and "not an empty directory" in again.output


# --- paths and environments that are the user's to fix: an error, never a traceback ----------------------------

@pytest.fixture
def example_copy(tmp_path):
    """The example spec and its current lock (render needs no index)."""
    import shutil
    for name in ("team.yaml", "team.lock"):
        shutil.copy(ROOT / "examples" / name, tmp_path / name)
    return tmp_path / "team.yaml"


@pytest.mark.parametrize("layout, where, why", [
    ("under-a-file", "out/sub/dockerfiles", "Not a directory"),
    ("compose-is-a-file", "out/compose", "File exists"),
])
def test_render_where_a_file_is_in_the_way_is_an_error_and_writes_nothing(example_copy, tmp_path, layout, where, why):
    out = tmp_path / "out"
    if layout == "under-a-file":
        out.write_text("a file")
        target = out / "sub"
    else:
        out.mkdir()
        (out / "compose").write_text("a file")
        target = out
    result = invoke("render", example_copy, "--out", target, "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["message"] == f"envkit render: cannot use {tmp_path / where}: {why}"
    assert "Traceback" not in result.output
    assert not list(tmp_path.rglob("Dockerfile"))  # nothing half-written


def test_resolve_into_a_path_it_cannot_write_fails_before_resolving(example_copy, tmp_path, monkeypatch):
    (tmp_path / "blocker").write_text("a file")
    monkeypatch.setattr("envkit.app.resolve.resolve", lambda *a, **k: pytest.fail("resolved before checking the path"))
    result = invoke("resolve", example_copy, "--lock", tmp_path / "blocker" / "team.lock")
    assert result.exit_code == 1
    assert f"cannot use {tmp_path / 'blocker'}: File exists" in result.stderr


def test_a_docker_host_that_is_no_address_is_named(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://[bad")
    result = invoke("show", "vision/torch25:x", "--json")
    assert result.exit_code == 6, result.output
    doc = json.loads(result.stdout)
    assert doc["message"] == "DOCKER_HOST 'tcp://[bad' is not an engine address: Invalid IPv6 URL"


def test_an_engine_that_does_not_answer_is_named_with_where_it_was_looked_for(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    result = invoke("show", "vision/torch25:x", "--json")
    assert result.exit_code == 6, result.output
    doc = json.loads(result.stdout)
    assert doc["message"].startswith(f"no container engine is reachable at DOCKER_HOST 'unix://{tmp_path}/no.sock'")
    assert doc["hint"].endswith("or fix or unset DOCKER_HOST")


def test_a_netrc_that_is_not_text_fails_resolve_with_its_name(example_copy, tmp_path, monkeypatch):
    """requests reads it on every request (PyPI's too) and would raise UnicodeDecodeError from deep inside."""
    netrc = tmp_path / "netrc"
    netrc.write_bytes(bytes(range(128, 256)))
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setattr("envkit.app.resolve.resolve", lambda *a, **k: pytest.fail("resolved with a binary netrc"))
    result = invoke("resolve", example_copy, "--json")
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert doc["message"].startswith("cannot read the netrc file: it is not text") and doc["location"] == str(netrc)


def test_ls_never_creates_a_history_store(tmp_path, monkeypatch):
    """A fresh directory reads as nothing known, saying so; a mistyped $ENVKIT_STORE or --store is refused (exit 9),
    not listed as an empty history; neither leaves a database behind."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ENVKIT_STORE", raising=False)
    result = invoke("ls", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["images"] == []
    assert "no image in the history store" in invoke("ls").stderr
    named = tmp_path / "no" / "such" / "history.sqlite"
    monkeypatch.setenv("ENVKIT_STORE", str(named))
    for args in ([], ["--store", named]):
        result = invoke("ls", *args, "--json")
        assert result.exit_code == 9 and json.loads(result.stdout)["message"] == f"no history store at {named}"
    assert not (tmp_path / "no").exists() and not (tmp_path / ".envkit").exists()
    from envkit.store.records import default_path

    assert not default_path().exists()


def test_usage_errors_under_json_are_json_documents(tmp_path):
    result = invoke("render", tmp_path, "--json")  # a directory where the spec goes
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert doc["error"] == "UsageError" and "is a directory" in doc["message"]
    assert doc["hint"].endswith(" render --help` lists its arguments and options")  # "envkit" (CliRunner: "main")
    nested = invoke("catalog", "refresh", "--framework", "nope", "--json")
    assert nested.exit_code == 2 and json.loads(nested.stdout)["error"] == "UsageError"
    plain = invoke("render", tmp_path)
    assert plain.exit_code == 2 and not plain.stdout and "is a directory" in plain.stderr


def test_a_netrc_that_is_not_text_is_named_when_connecting_to_the_engine(tmp_path, monkeypatch):
    """requests reads it before any connection, the engine's socket's too: no engine is needed to see this."""
    from envkit.engine.docker_engine import connect
    from envkit.errors import EngineError

    netrc = tmp_path / "netrc"
    netrc.write_bytes(bytes(range(128, 256)))
    monkeypatch.setenv("NETRC", str(netrc))
    with pytest.raises(EngineError) as err:
        connect(f"unix://{tmp_path / 'no-engine.sock'}")
    assert err.value.message.startswith("cannot talk to the engine: cannot read the netrc file: it is not text")
    assert str(netrc) in err.value.message


@pytest.mark.parametrize("args, said", [
    (["show", ""], "an image is needed, and this one is empty"),
    (["certify", " "], "an image is needed, and this one is empty"),
    (["verify", ""], "an image is needed, and this one is empty"),
    (["run", ""], "an image is needed, and this one is empty"),
    (["show", "127.0.0.1:5000/Vision:x"], "bad image reference '127.0.0.1:5000/Vision:x': repository names are lower case"),
    (["ls", "--registry", "not a host"], "bad registry 'not a host'"),
    (["registry", "prune", "a b"], "bad registry 'a b'"),
    (["nightly", "team.yaml", "--registry", "bad host"], "bad registry 'bad host'"),
])
def test_a_malformed_image_or_registry_is_a_usage_error_before_any_work(args, said, monkeypatch):
    def no_engine():
        raise AssertionError("a usage error must come before the engine is asked")

    monkeypatch.setattr("envkit.engine.docker_engine.connect", no_engine)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert said in result.output
    as_json = invoke(*args, "--json")
    assert as_json.exit_code == 2
    assert said in json.loads(as_json.stdout)["message"]


@pytest.mark.parametrize("image", ["vision/torch25:latest", "sha256:" + "0" * 64, "127.0.0.1:5000/vision/torch25:certified",
                                   "localhost/x@sha256:" + "a" * 64])
def test_well_formed_images_pass_the_check_unchanged(image):
    from envkit.cli.common import IMAGE

    assert IMAGE.convert(image, None, None) == image


@pytest.mark.parametrize("given, used", [("reg:5000", "reg:5000"), ("reg:5000 ", "reg:5000"), ("reg:5000/team/", "reg:5000/team"),
                                         ("[::1]:5000/a/b", "[::1]:5000/a/b")])
def test_a_registry_is_passed_on_as_it_will_be_used(given, used):
    """A trailing space the check forgave would otherwise reach the push: "reg:5000 /team/img"."""
    from envkit.cli.common import REGISTRY

    assert REGISTRY.convert(given, None, None) == used


@pytest.mark.parametrize("failing, code", [([], 0), (["store"], 9), (["index", "store"], 3), (["catalog"], 2),
                                           (["framework_index"], 3), (["disk", "store"], 6), (["ca_bundle"], 2),
                                           (["engine", "index"], 6)])
def test_doctor_exits_with_the_first_failing_checks_area(monkeypatch, failing, code):
    from envkit.ops.findings import Finding

    names = ["engine", "gpus", "ca_bundle", "index", "framework_index", "disk", "catalog", "store"]
    findings = [Finding(n, "fail" if n in failing else "ok", "v") for n in names]
    monkeypatch.setattr("envkit.ops.doctor.diagnose", lambda *a, **k: findings)
    result = invoke("doctor", "--json")
    assert result.exit_code == code and json.loads(result.stdout)["exit_code"] == code


def test_resolve_and_build_print_the_skipped_ca_variable(example_copy, tmp_path, monkeypatch):
    from envkit.app import build as building, resolve as pipeline

    monkeypatch.setenv("ENVKIT_CA_BUNDLE", str(tmp_path / "nope.pem"))
    monkeypatch.delenv("PIP_CERT", raising=False)
    warning = f"warning: $ENVKIT_CA_BUNDLE={tmp_path / 'nope.pem'} names no file, so it is skipped"
    # resolve (render re-resolves a stale lock): said once, before resolving
    original = example_copy.read_text()
    example_copy.write_text(original.replace('"numpy==2.1.*"', '"numpy==2.0.*"'))
    monkeypatch.setattr(pipeline, "resolve", lambda *a, **k: load_lock(example_copy.with_suffix(".lock")))
    result = invoke("render", example_copy, "--out", tmp_path / "out")
    assert result.exit_code == 0 and result.stderr.count(warning) == 1, result.stderr
    # build of a lock that still matches (no resolve): said by build
    example_copy.write_text(original)  # the lock written above is the committed one: it matches again
    seen = []
    monkeypatch.setattr(building, "build_image", lambda *a, **k: Outcome("torch25", "t", "skipped", "sha256:1", 1, 0.0))
    monkeypatch.setattr(building, "pick_builder", lambda *a: "classic")
    _, outcomes = building.build_spec(example_copy, tmp_path / "out", FakeEngine(), locked=True, record=False,
                                      progress=lambda name, msg: seen.append(msg) if isinstance(msg, str) else None)
    assert [m for m in seen if m.startswith("warning:")] == [m for m in seen if warning in m] and len(seen) >= 1
    assert sum(warning in m for m in seen) == 1 and outcomes[0].action == "skipped"


def test_nightly_locked_with_refresh_catalog_is_a_usage_error():
    result = invoke("nightly", "team.yaml", "--locked", "--refresh-catalog", "--json")
    assert result.exit_code == 2  # was 5 (a LockError), found after the engine and the store were opened
    assert "cannot be combined with --locked" in json.loads(result.stdout)["message"]
