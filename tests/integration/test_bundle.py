"""Offline bundles: make one (wheels checked against the lock, the base saved, Debian packages
fetched), then build from it with the network cut off inside the build, with either builder.

A small lock keeps this quick: the example lock's image with numpy + typing-extensions for its
packages (see test_buildkit.small_lock); the torch payload cannot verify it, so the check is
`import numpy` in the built image.
"""

import json
import re
import shutil
import subprocess

import pytest

from envkit.images.builder import LOCK_LABEL
from envkit.images.bundle_manifest import BUNDLE_LABEL, verify_bundle
from envkit.images.bundle import build_from_bundle, make_bundle
from envkit.images.wheelhouse import check_wheels, manylinux_tags
from envkit.engine.protocol import BuildEvent, Mount, RunOptions
from envkit.errors import BuildError
from envkit.lock import Package, load_lock, write_lock
from tests.integration.conftest import ROOT, envkit
from tests.integration.test_buildkit import ca_bundle, collect_created, remove_images, small_lock

pytestmark = [pytest.mark.integration, pytest.mark.network]


@pytest.fixture(scope="module")
def bundle(engine, tmp_path_factory):
    lock, image = small_lock("bundle-small")
    out = tmp_path_factory.mktemp("bundle") / "bundle-small"
    return make_bundle(engine, lock, image.name, out, ca_bundle=ca_bundle()), lock, image


def test_bundle_holds_what_a_rebuild_needs(bundle):
    path, lock, image = bundle
    manifest = verify_bundle(path)
    assert manifest["image"] == image.name and manifest["lock_hash"] == image.hash
    files = manifest["files"]
    assert {"envkit.lock", "base.tar", "context/Dockerfile", "context/buildkit.Dockerfile",
            "context/requirements/framework.txt", "context/requirements/extra.txt"} <= set(files)
    assert load_lock(path / "envkit.lock").images == (image,)
    # one wheel per locked package, each with a hash the lock lists
    wheels = sorted(p for p in files if p.startswith("context/wheelhouse/"))
    assert len(wheels) == len(image.packages)
    for name in wheels:
        package = next(p for p in image.packages if p.name.replace("-", "_") in name.split("/")[-1].lower())
        assert files[name] in package.hashes
    assert any(p.startswith("context/debs/os/python3_") for p in files)
    assert any(p.startswith("context/debs/os/python3-venv_") for p in files)  # as online: the OS stage has it
    # the base archive is a `docker save` of the base, by its tag
    tar = subprocess.run(["tar", "-xOf", str(path / "base.tar"), "manifest.json"], capture_output=True, check=True)
    assert json.loads(tar.stdout)[0]["RepoTags"] == [image.base.ref]


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_build_from_bundle_without_network(engine, bundle, builder, monkeypatch):
    path, lock, image = bundle
    if builder == "buildkit":
        from envkit.engine.buildkit import BuildKitBuilder

        if not BuildKitBuilder(engine).available():
            pytest.skip("BuildKit is not available")
    calls = record_builds(engine, monkeypatch)  # what reaches the engine: the build itself must have no network
    # no_cache: every RUN really runs (layer caches do not key on the network mode)
    made: list[str] = []
    outcome = build_from_bundle(engine, path, builder=builder, verify=False, no_cache=True,
                                progress=collect_created(made))
    try:
        assert_built_offline(calls, builder)
        info = engine.inspect(outcome.tag)
        assert info.id == outcome.image_id
        assert info.labels[LOCK_LABEL] == image.hash and info.labels[BUNDLE_LABEL].startswith("sha256:")
        numpy = [p.version for p in image.packages if p.name == "numpy"][0]
        run = engine.run(outcome.tag, ["python3", "-c", "import numpy, typing_extensions; print(numpy.__version__)"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0 and run.stdout.strip() == numpy, run.stderr
        assert info.user == "1000:1000"
        assert info.labels["io.envkit.build"] == "offline"
    finally:
        # the image, then every intermediate image a classic no-cache build made (left behind, the
        # classic builder would prefer them, being newest, as the cache of later builds)
        remove_images(engine, outcome.image_id, created=made)


def record_builds(engine, monkeypatch) -> list[tuple[str, object]]:
    """Record each build that reaches the engine: ("api", docker-py's build kwargs) or ("cli", the BuildKit argv)."""
    calls: list[tuple[str, object]] = []
    real_api_build, real_popen = engine.client.api.build, subprocess.Popen

    def api_build(*args, **kwargs):
        calls.append(("api", kwargs))
        return real_api_build(*args, **kwargs)

    def popen(cmd, *args, **kwargs):
        calls.append(("cli", list(cmd)))
        return real_popen(cmd, *args, **kwargs)

    monkeypatch.setattr(engine.client.api, "build", api_build)
    monkeypatch.setattr("envkit.engine.buildkit.subprocess.Popen", popen)
    return calls


def assert_built_offline(calls: list[tuple[str, object]], builder: str) -> None:
    """One build, with the network cut off and no cache, from the bundle's Dockerfile for ``builder``."""
    if builder == "classic":
        (_, kwargs), = [c for c in calls if c[0] == "api"]
        assert kwargs["network_mode"] == "none" and kwargs["dockerfile"] == "Dockerfile" and kwargs["nocache"]
    else:
        (_, cmd), = [c for c in calls if c[0] == "cli" and "build" in c[1]]
        assert "--network=none" in cmd and "--no-cache" in cmd
        assert cmd[cmd.index("-f") + 1].endswith("buildkit.Dockerfile")


FULL_BUNDLE_BUILDS = "ENVKIT_TEST_FULL_BUNDLES"  # =1: also build the framework examples' images from their bundles


def assert_pip_installs_from_the_bundle_alone(engine, path, spec_image: str, image, out) -> None:
    """Inside SPEC_IMAGE's example image (built here when absent, as its own module would) with no network:
    pip resolves every requirement of the bundle at ``path``, dependencies included and hashes required, from
    its wheelhouse only, to exactly the lock's pins. What an offline build needs of the wheels, in seconds
    and without a second multi-GB image (the full offline build: FULL_BUNDLE_BUILDS)."""
    from packaging.utils import canonicalize_name

    built = envkit("build", "examples/frameworks.yaml", "--image", spec_image, "--no-verify", "--out", out,
                   "--json", timeout=3600)
    assert built.returncode == 0, built.stderr[-4000:]
    [made] = json.loads(built.stdout)["images"]
    script = ("/opt/venv/bin/pip install --dry-run --ignore-installed --no-index --find-links /bundle/wheelhouse "
              "--require-hashes --only-binary=:all: --report /tmp/report.json "
              + " ".join(f"-r /bundle/requirements/{f.name}" for f in sorted((path / "context" / "requirements")
                                                                           .glob("*.txt")))
              + " >/dev/null && cat /tmp/report.json")
    options = RunOptions(timeout=300, network=False, mounts=(Mount(str(path / "context"), "/bundle", read_only=True),))
    result = engine.run(made["tag"], ["bash", "-c", script], options)
    assert result.exit_code == 0, (result.stdout + result.stderr)[-4000:]
    would = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
             for i in json.loads(result.stdout)["install"]}
    assert would == {p.name: p.version for p in image.packages}


def test_cli_bundle_make_then_build_offline(engine, tmp_path):
    """`envkit bundle make` then `envkit bundle build`, as a user runs them: the example spec with
    the small lock beside it (same image name, so the spec's lock is reused, not re-resolved)."""
    lock, image = small_lock("torch25")
    spec = tmp_path / "team.yaml"
    shutil.copyfile(ROOT / "examples" / "team.yaml", spec)
    write_lock(lock, spec.with_suffix(".lock"))
    out = tmp_path / "out" / "torch25.bundle"

    made = envkit("bundle", "make", "team.yaml", "--bundle", out, "--json", cwd=tmp_path, timeout=900)
    assert made.returncode == 0, made.stderr[-4000:]
    doc = json.loads(made.stdout)
    assert doc["bundle"] == str(out) and doc["image"] == "torch25" and doc["lock_reused"] is True
    assert doc["lock_hash"] == image.hash and doc["wheels"] == len(image.packages)
    assert "is up to date" in made.stderr and "envkit: downloading" in made.stderr
    assert verify_bundle(out)["tag"] == doc["tag"]
    assert [p.name for p in out.parent.iterdir()] == ["torch25.bundle"]  # no staging directory left

    # -v: the build log on stderr, from which the images a classic no-cache build created are read
    built = envkit("-v", "bundle", "build", out, "--no-verify", "--no-cache", "--builder", "classic", "--json",
                   cwd=tmp_path, timeout=900)
    created: list[str] = []
    record = collect_created(created)
    for line in built.stderr.splitlines():  # back into the builder's events
        if step := re.match(r"^envkit: step (\d+)/(\d+): (.*)$", line):
            record(BuildEvent("step", step.group(3), int(step.group(1)), int(step.group(2))))
        elif line.startswith("  "):
            record(BuildEvent("log", line[2:]))
    result = json.loads(built.stdout) if built.returncode == 0 else None
    try:
        assert result is not None, built.stderr[-4000:]
        assert created, "no created image read from the -v build log"
        assert result["builder"] == "classic" and result["bundle"] == str(out)
        (outcome,) = result["images"]
        assert outcome["tag"] == doc["tag"] and outcome["action"] == "built" and outcome["status"] == "built"
        info = engine.inspect(outcome["tag"])
        assert info.id == outcome["image_id"]
        assert info.labels[LOCK_LABEL] == image.hash and info.labels[BUNDLE_LABEL].startswith("sha256:")
        assert info.labels["io.envkit.build"] == "offline"
        numpy = [p.version for p in image.packages if p.name == "numpy"][0]
        run = engine.run(outcome["tag"], ["python3", "-c", "import numpy; print(numpy.__version__)"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0 and run.stdout.strip() == numpy, run.stderr
    finally:
        remove_images(engine, *([result["images"][0]["image_id"]] if result else []), created=created)


def test_a_changed_file_is_refused_before_building(engine, bundle, tmp_path):
    path, _, _ = bundle
    copy = tmp_path / "copy"
    shutil.copytree(path, copy, ignore=shutil.ignore_patterns("base.tar"))
    shutil.copyfile(path / "base.tar", copy / "base.tar")
    wheel = next((copy / "context" / "wheelhouse").glob("numpy-*.whl"))
    with open(wheel, "r+b") as fh:
        fh.seek(1000)
        fh.write(b"\0envkit\0")
    (copy / "context" / "stray.txt").write_text("not in the manifest")
    with pytest.raises(BuildError, match="does not match its manifest") as err:
        build_from_bundle(engine, copy, verify=False)
    assert f"context/wheelhouse/{wheel.name}: changed" in err.value.hint
    assert "context/stray.txt: not in the manifest" in err.value.hint


def test_wheels_are_checked_against_the_lock(tmp_path):
    (tmp_path / "demo-1.0-py3-none-any.whl").write_bytes(b"a wheel")
    locked = Package(name="demo", version="1.0", hashes=("sha256:" + "0" * 64,), group="extra")
    with pytest.raises(BuildError, match="which the lock does not list"):
        check_wheels([locked], tmp_path)
    import hashlib

    good = Package(name="demo", version="1.0", hashes=("sha256:" + hashlib.sha256(b"a wheel").hexdigest(),),
                   group="extra")
    assert check_wheels([good], tmp_path) == [tmp_path / "demo-1.0-py3-none-any.whl"]
    with pytest.raises(BuildError, match="lacks other"):
        check_wheels([good, Package(name="other", version="2", hashes=(), group="extra")], tmp_path)


def test_manylinux_tags_cover_older_glibc():
    tags = manylinux_tags("x86_64-manylinux_2_36")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_17_x86_64" in tags
    assert {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    older = manylinux_tags("aarch64-manylinux_2_17")
    assert "manylinux2014_aarch64" in older and "manylinux_2_18_aarch64" not in older
    with pytest.raises(Exception, match="platform"):
        manylinux_tags("win_amd64")
