"""`envkit build --reproducible`: the same lock built twice from scratch gives the same environment layers.

The small stack (the example lock's base with numpy and typing-extensions: two layer groups, framework and extra)
is built once with the classic builder and once more with BuildKit (classic again where BuildKit is missing), the
first image, its OS stage and the classic builder's intermediates removed in between: the OS stage is built again
and every environment layer is made again by envkit, from a uv cache that starts empty in each install container.
Each environment layer's diff_id must be the same; the layers recorded beside the lock must satisfy `verify`'s
layer check, and a record with another digest must fail it naming the group; the image still runs its payload's
interpreter as the non-root user, with no uv and no CA left in it.
"""

from __future__ import annotations

import json

import pytest

from envkit.app.certify import layers_check
from envkit.engine.protocol import RunOptions
from envkit.images.builder import build_image
from envkit.images.layer_record import Recorded, record_path, write_record
from envkit.lock import write_lock
from tests.integration.test_buildkit import ca_bundle, remove_images, small_lock

pytestmark = [pytest.mark.integration, pytest.mark.network]


def _build(engine, lock, image, builder):
    said: list[str] = []
    outcome = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False, builder=builder,
                          reproducible=True, progress=lambda _name, e: said.append(getattr(e, "text", str(e))))
    assert outcome.action == "built", said
    return outcome, said


def lock_with(name: str, typing_extensions: str, numpy: str = "2.0.*", framework: tuple[str, ...] = ()):
    """The small stack with these pins: typing-extensions the extra group, numpy and ``framework`` (requirements
    without dependencies) the framework's. A build reuses the lowest groups of any reproducible image on the engine
    with the same packages on the same OS layers (``images.layer_reuse``), so a test that must install a group
    gives it packages no other test's image has (tests run in parallel). The framework layer is numpy alone (an
    nvidia-* wheel gets the cuda layer), so each such test takes a numpy series of its own: 1.23
    test_bundle_reproducible (offline), 1.24 its devel bundle, 1.25 and 2.2 test_reproducible_devel, 1.26 and 2.0
    this module (2.0: the reuse tests, one after another), 2.4 its Podman test, 2.1 ``test_buildkit.small_lock``
    (built reproducibly by this module's two-engine test and by test_nightly_reproducible). A cold suite failed once
    on two tests sharing 2.1 (2026-12-07)."""
    from envkit.index.closure import compile_closure
    from envkit.lock import Package, sealed

    lock, image = small_lock(name)
    pins = compile_closure([f"numpy=={numpy}", *framework, f"typing-extensions=={typing_extensions}"], python="3.11",
                           glibc="2.36", index_url="https://pypi.org/simple")
    packages = tuple(Package(name=p.name, version=p.version, hashes=p.hashes,
                             group="extra" if p.name == "typing-extensions" else "framework") for p in pins)
    image = sealed(image.model_copy(update={"packages": packages}))
    return lock.model_copy(update={"images": (image,)}), image


def test_two_builds_from_scratch_give_the_same_environment_layers(engine, tmp_path):
    from envkit.engine.buildkit import BuildKitBuilder

    second = "buildkit" if BuildKitBuilder(engine).available() else "classic"
    lock, image = lock_with("repro-small", "4.9.0", numpy="1.26.*")  # every group built, none reused
    lock_path = tmp_path / "team.lock"
    write_lock(lock, lock_path)
    tags: list[str] = []
    try:
        first, said = _build(engine, lock, image, "classic")
        tags.append(first.tag)
        assert list(first.layers) == ["framework", "extra", "payload"]
        assert any("installing the framework layer group" in s for s in said)  # progress on the long steps
        info = engine.inspect(first.tag)
        assert list(info.layers[-3:]) == list(first.layers.values())
        remove_images(engine, first.tag)  # the image, its OS stage (a stage label) and their intermediates
        assert engine.inspect(first.tag) is None and engine.inspect(first.tag + "-os") is None

        again, said_again = _build(engine, lock, image, second)
        tags.append(again.tag)
        assert not [s for s in said + said_again if s.startswith("reusing")]  # every group installed, twice
        assert again.layers == first.layers, (first.layers, again.layers)

        # the record beside the lock, and verify's layer check against it
        write_record(lock_path, [Recorded(image.name, image.hash, first.layers, "test")])
        info = engine.inspect(again.tag)
        check = layers_check(info, image.hash, lock_path)
        assert check is not None and check["status"] == "passed", check
        assert check["message"].startswith("environment layers match the lock exactly")
        bad = {**first.layers, "extra": "sha256:" + "0" * 64}
        write_record(lock_path, [Recorded(image.name, image.hash, bad, "test")])
        check = layers_check(info, image.hash, lock_path)
        assert check is not None and check["status"] == "failed"
        assert "the extra layer differs" in check["message"] and first.layers["extra"] in check["message"]
        assert "sha256:" + "0" * 64 in check["message"]
        assert json.loads(record_path(lock_path).read_text())["images"][image.name]["layers"] == bad

        # it runs as the rendered image does: non-root, the environment on PATH, nothing of the installer or CA
        run = engine.run(again.tag, ["bash", "-c",
                                     "id -u; python3 -c 'import numpy, typing_extensions; print(numpy.__version__)'; "
                                     "command -v uv || echo no-uv; ls /tmp /etc/envkit 2>&1 | tr '\\n' ' '; echo; "
                                     "python3 /opt/envkit/envkit_check --help >/dev/null && echo payload-ok"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0, run.stderr
        lines = run.stdout.splitlines()
        versions = {p.name: p.version for p in image.packages}
        assert lines[:3] == ["1000", versions["numpy"], "no-uv"], lines
        assert "No such file" in lines[3] and "envkit-" not in lines[3]  # no CA directory, nothing left in /tmp
        assert lines[4] == "payload-ok"
    finally:
        remove_images(engine, *tags)


def test_one_extra_changed_reuses_the_framework_layer_and_gives_the_layers_of_a_build_from_nothing(engine):
    """Built after an image of the same framework group on the same OS layers, the changed lock installs only its
    extra group (into a fresh venv) and loads an archive without the framework layer; built again once both images
    are gone (nothing to reuse), it gives the same digests, so the reuse changed nothing in the layers."""
    if not engine.loads_known_layers():
        pytest.skip("this engine's `docker load` wants every layer's file: a reproducible build reuses nothing here")
    lock_a, image_a = lock_with("repro-reuse", "4.12.2")
    lock_b, image_b = lock_with("repro-reuse", "4.11.0")
    tags: list[str] = []
    try:
        first, _ = _build(engine, lock_a, image_a, "auto")
        tags.append(first.tag)
        again, said = _build(engine, lock_b, image_b, "auto")
        tags.append(again.tag)
        assert again.tag != first.tag
        reused = engine.inspect(first.tag)
        assert any(s.startswith(f"reusing the framework layer of image {reused.id[7:19]}") for s in said), said
        assert "install framework" not in again.phases and "install extra" in again.phases, again.phases
        assert again.reused == ("framework",) and again.to_json()["reused"] == ["framework"]
        assert again.layers["framework"] == first.layers["framework"]
        assert again.layers["extra"] != first.layers["extra"]
        run = engine.run(again.tag, ["python3", "-c", "import numpy, typing_extensions, importlib.metadata as m; "
                                                      "print(numpy.__version__, m.version('typing_extensions'))"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0 and run.stdout.split()[1] == "4.11.0", run.stderr

        remove_images(engine, *tags)  # (the OS stage stays: its layers are the reused image's, as before)
        tags.clear()
        scratch, said = _build(engine, lock_b, image_b, "auto")
        tags.append(scratch.tag)
        assert not any(s.startswith("reusing") for s in said) and "install framework" in scratch.phases
        assert scratch.reused == ()
        assert scratch.layers == again.layers, (scratch.layers, again.layers)
        assert scratch.image_id == again.image_id  # the same config too: the same image
    finally:
        remove_images(engine, *tags)


ELSEWHERE = """
import json, os, sys
os.umask(0o027)
from envkit.images.builder import build_image
from envkit.engine.docker_engine import connect
from tests.integration.test_buildkit import ca_bundle, small_lock
from tests.integration.test_reproducible import lock_with

# the small stack, or lock_with's with the pins given (typing-extensions, numpy)
lock, image = lock_with(sys.argv[1], *sys.argv[3:]) if sys.argv[3:] else small_lock(sys.argv[1])
reproducible = sys.argv[2] == "reproducible"  # else BuildKit's own build
outcome = build_image(connect(), lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False,
                      reproducible=reproducible, builder="auto" if reproducible else "buildkit",
                      progress=lambda *_: None)
print(json.dumps({"tag": outcome.tag, "layers": outcome.layers, "builder": outcome.builder,
                  "diff_ids": outcome.diff_ids}))
"""


def test_another_engine_that_never_built_anything_gives_the_same_environment_layers(engine, tmp_path):
    """The nearest this host comes to another machine: an empty second engine (own data root, containerd,
    network; ``second_engine``) given only the base image, and an envkit run beside it with another umask,
    TMPDIR, time zone and locale, each building with the default builder. Same environment layer digests, same
    labels, environment and user; only the OS stage's layers, the builders' own, differ. Both engines then push
    to one registry: the same blobs for the environment layers, so the registry holds them once."""

    from envkit.engine.docker_engine import connect
    from tests.integration.registry import running_registry
    from tests.integration.second_engine import second_engine

    lock, image = small_lock("repro-elsewhere")
    here, _ = _build(engine, lock, image, "auto")
    pushed: list[str] = []
    try:
        with second_engine() as address:
            there = _built_elsewhere(address, image, "reproducible", tmp_path)
            assert (there["tag"], there["builder"]) == (here.tag, here.builder)
            if there["layers"] != here.layers:  # say where they part: the first differing file, not two digests
                pytest.fail(f"the environment layers differ: here {here.layers}, there {there['layers']}; "
                            + _why(engine, here.image_id, connect(address), there["tag"]))
            a, b = engine.inspect(here.tag), connect(address).inspect(there["tag"])
            assert a is not None and b is not None
            assert (a.labels, a.env, a.user) == (b.labels, b.env, b.user)
            assert a.layers[-3:] == b.layers[-3:] == tuple(here.layers.values())
            assert a.layers[0] == b.layers[0]  # the base, copied (the OS stage above it is each builder's own)

            # both pushed to one registry: the environment layers' blobs are the same, so it stores them once
            with running_registry(tmp_path / "registry") as reg:
                blobs = {}
                for name, eng, tag in (("here", engine, here.tag), ("there", connect(address), there["tag"])):
                    eng.tag_image(tag, reg.repo("team/small"), name)
                    pushed.append(f"{reg.repo('team/small')}:{name}")
                    said = list(eng.push(reg.repo("team/small"), name, None))
                    assert not [e for e in said if "error" in e], said
                    blobs[name] = _manifest_layers(reg, "team/small", name)
                assert blobs["here"][-3:] == blobs["there"][-3:]  # framework, extra, payload: one blob each
    finally:
        remove_images(engine, here.tag, *pushed[:1])


def test_another_engine_gives_the_same_environment_layers_with_buildkit(engine, tmp_path):
    """As above, with BuildKit's own build (the default, docs/images.md "The same bytes from BuildKit"): the second
    engine's BuildKit, from nothing, makes the framework, extra and payload layers this engine's does (the OS stage,
    each one's own, under them). The bytes are the engine's tar writer's: the two are one Docker release."""

    from envkit.engine.buildkit import BuildKitBuilder
    from envkit.engine.docker_engine import connect
    from tests.integration.second_engine import second_engine

    if not BuildKitBuilder(engine).available():
        pytest.skip("BuildKit cannot build here")
    lock, image = small_lock("bk-elsewhere")
    here = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False, builder="buildkit",
                       no_cache=True, progress=lambda *_: None)
    try:
        with second_engine() as address:
            there = _built_elsewhere(address, image, "buildkit", tmp_path)
            assert (there["tag"], there["builder"]) == (here.tag, "buildkit")
            mine, theirs = list(here.diff_ids[-4:]), there["diff_ids"][-4:]  # framework, extra, payload, WORKDIR's
            if mine != theirs:  # say where they part: the first differing file, not two digests
                pytest.fail(f"the environment layers differ: here {mine}, there {theirs}; "
                            + _why(engine, here.image_id, connect(address), there["tag"]))
            assert list(here.diff_ids[:-4]) != there["diff_ids"][:-4]  # each OS stage its builder's own
            a, b = engine.inspect(here.tag), connect(address).inspect(there["tag"])
            assert (a.labels, a.env, a.user) == (b.labels, b.env, b.user)
    finally:
        remove_images(engine, here.tag)


def test_podman_gives_the_same_environment_layers(engine, tmp_path):
    """Another engine and another builder: Podman (Debian's 4.3.1, its Docker-compatible API; ``podman_engine``),
    given only the base. envkit there picks the classic builder (BuildKit's CLI cannot build on Podman), buildah
    builds the OS stage, and envkit writes the environment layers as it does on Docker: the same digests, and the
    labels (but the context hash: each builder renders its own context), environment and user. When they differ,
    the first differing file is named."""

    from envkit.engine.docker_engine import connect
    from envkit.support.labels import CONTEXT_LABEL
    from tests.integration.second_engine import podman_engine

    pins = ("4.12.2", "2.4.*")  # numpy 2.4: this test's own series (lock_with)
    lock, image = lock_with("repro-podman", *pins)
    here, _ = _build(engine, lock, image, "auto")
    try:
        with podman_engine() as address:
            podman = connect(address)
            assert podman.version()["engine"] == "podman"
            there = _built_elsewhere(address, image, "reproducible", tmp_path, pins)
            assert (there["tag"], there["builder"]) == (here.tag, "classic")
            if there["layers"] != here.layers:
                pytest.fail(f"the environment layers differ: Docker {here.layers}, Podman {there['layers']}; "
                            + _why(engine, here.image_id, podman, there["tag"]))
            a, b = engine.inspect(here.tag), podman.inspect(there["tag"])
            assert a is not None and b is not None
            # the labels but the context's hash (each builder's own rendered context) and buildah's mark of itself
            differ = {k for k in {*a.labels, *b.labels} if a.labels.get(k) != b.labels.get(k)}
            assert differ == {"io.buildah.version", *([CONTEXT_LABEL] if here.builder == "buildkit" else [])}, differ
            assert (a.env, a.user) == (b.env, b.user)
            assert a.layers[-3:] == b.layers[-3:] == tuple(here.layers.values())
    finally:
        remove_images(engine, here.tag)


def _built_elsewhere(address: str, image, how: str, tmp_path, pins: tuple[str, ...] = ()) -> dict:
    """``image`` built (``how``: reproducible | buildkit) by a child envkit on the engine at ``address``, given the
    base only, with another umask (ELSEWHERE), TMPDIR, time zone and locale: what ELSEWHERE prints. ``pins``:
    ``lock_with``'s (typing-extensions, numpy) when ``image`` is one of its locks."""
    import os
    import subprocess
    import sys

    from tests.integration.conftest import ROOT
    from tests.integration.second_engine import copy_image

    copy_image(image.base.ref, address)
    env = dict(os.environ, DOCKER_HOST=address, TMPDIR=str(tmp_path), TZ="Pacific/Kiritimati", LC_ALL="C", LANG="C")
    run = subprocess.run([sys.executable, "-c", ELSEWHERE, image.name, how, *pins], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def _why(engine_a, ref_a: str, engine_b, ref_b: str) -> str:
    """Where two images' environment layers part, as `envkit layers diff` says it: the first differing layer and the
    first differing file in it (path and field), read from each engine's save of its image; no build."""
    from envkit.app.layers import diff_images, explain

    try:
        return explain(diff_images(engine_a, ref_a, engine_b, ref_b))
    except Exception as exc:  # noqa: BLE001 - the failure must still be reported, with the digests
        return f"(their files could not be compared: {exc})"


def _manifest_layers(reg, name: str, reference: str) -> list[str]:
    """The blob digests of ``name:reference``'s layers, as the registry holds them (compressed), lowest first."""
    import requests

    r = requests.get(f"{reg.url}/v2/{name}/manifests/{reference}", timeout=10,
                     headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    r.raise_for_status()
    return [layer["digest"] for layer in r.json()["layers"]]


def test_a_failed_install_leaves_no_scratch_container_or_image(engine):
    """A wheel whose hash is not the lock's: uv refuses it, the build fails naming the group with uv's words, and
    the scratch directory (install directory, OS archive, layer tars) and the install container are gone."""
    import tempfile
    from pathlib import Path

    from envkit.errors import BuildError
    from envkit.lock import sealed
    from envkit.support.labels import CONTAINER_LABEL
    from envkit.support.scratch import PREFIX, owner

    lock, image = small_lock("repro-bad")
    packages = tuple(p.model_copy(update={"hashes": ("sha256:" + "0" * 64,)}) if p.name == "numpy" else p
                     for p in image.packages)
    image = sealed(image.model_copy(update={"packages": packages}))
    lock = lock.model_copy(update={"images": (image,)})
    tag = None
    try:
        with pytest.raises(BuildError) as failed:
            build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False, reproducible=True,
                        progress=lambda *_: None)
        tag = f"vision/repro-bad:{image.framework_version}-{image.variant}-py{image.python}-{image.hash8}"
        assert f"installing framework into {tag}-os failed" in failed.value.message
        assert "hash" in (failed.value.hint or "").lower()  # uv's own words in the output's tail
        assert not list(Path(tempfile.gettempdir()).glob(f"{PREFIX}repro-repro-bad-{owner()}*"))
        assert engine.inspect(tag) is None
        assert not engine.client.containers.list(all=True, filters={"label": f"{CONTAINER_LABEL}=build",
                                                                     "ancestor": f"{tag}-os"})
    finally:
        if tag is not None:
            remove_images(engine, f"{tag}-os")


INTERRUPTED = """
import sys
from envkit.engine.docker_engine import connect
from envkit.images.builder import build_image
from envkit.lock import load_lock
from tests.integration.test_buildkit import ca_bundle

lock = load_lock(sys.argv[1])
say = lambda _name, event: print(getattr(event, "text", event), flush=True)
build_image(connect(), lock, lock.images[0], "team.yaml", ca_bundle=ca_bundle(), verify=False, reproducible=True,
            progress=say)
"""
HELD = "envkit_hold_probe"


def test_ctrl_c_during_an_install_removes_the_container_and_the_scratch_directory(engine, tmp_path):
    """The install is made to wait on purpose: the extra group holds a wheel only a local index has, and the index
    keeps its download waiting until the test releases it, so Ctrl-C comes while uv certainly runs."""
    import hashlib
    import signal
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from envkit.index.urls import DEFAULT_INDEX
    from envkit.lock import Package, sealed
    from envkit.support.labels import CONTAINER_LABEL
    from envkit.support.scratch import PREFIX
    from tests.integration.conftest import ROOT
    from tests.integration.pyindex import PackageIndexServer, bridge_gateway, make_wheel
    from tests.signals import as_from_a_terminal

    wheel = make_wheel(tmp_path / "wheels", HELD, "1.0")
    with PackageIndexServer(tmp_path / "wheels") as server:
        server.hold(HELD)
        lock, image = lock_with("repro-int", "4.10.0")
        probe = Package(name=HELD.replace("_", "-"), version="1.0", group="extra",
                        hashes=("sha256:" + hashlib.sha256(wheel.read_bytes()).hexdigest(),))
        image = sealed(image.model_copy(update={
            "index_url": server.url(bridge_gateway(engine)), "extra_index_url": DEFAULT_INDEX,
            "packages": tuple(sorted((*image.packages, probe), key=lambda p: (p.group, p.name)))}))
        write_lock(lock.model_copy(update={"images": (image,)}), tmp_path / "team.lock")
        tag = f"vision/repro-int:{image.framework_version}-{image.variant}-py{image.python}-{image.hash8}"
        proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(tmp_path / "team.lock")], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=as_from_a_terminal)
        try:
            assert server.held.wait(timeout=600), "the install never asked for the held wheel"
            proc.send_signal(signal.SIGINT)  # uv waits on the held download: the install container runs
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode != 0 and "KeyboardInterrupt" in out, out
            assert not list(Path(tempfile.gettempdir()).glob(f"{PREFIX}repro-repro-int-*-{proc.pid}-*"))
            assert not engine.client.containers.list(all=True, filters={"label": f"{CONTAINER_LABEL}=build",
                                                                         "ancestor": f"{tag}-os"})
            assert engine.inspect(tag) is None
            assert engine.inspect(f"{tag}-framework") is None  # loaded beside the extra's install, untagged
        finally:
            server.release()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            remove_images(engine, tag, f"{tag}-os", f"{tag}-framework")  # (the OS stage; what got that far)
