"""Integration fixtures: a real engine, and the example team built once per session."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENVKIT = [sys.executable, "-m", "envkit.cli"]


@pytest.fixture(scope="session")
def engine():
    from envkit.engine.docker_engine import connect
    from envkit.errors import EngineError

    try:
        return connect()
    except EngineError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no container engine: {exc.message}")


def envkit(*args, cwd=ROOT, check=False, timeout=3600):
    proc = subprocess.run([*ENVKIT, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"envkit {' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def built_images(engine):
    """Tags of the example images this worker built, shared by its modules (test_examples verifies the images
    test_jax and test_tensorflow built) and removed when its session ends: their tests are in one xdist group,
    so on this worker. (After a full run the engine held the multi/*, vision/torch25 and nightly/torch25 images,
    about 30 GB, until these were removed.)"""
    tags: list[str] = []
    yield tags
    remove_built(engine, tags)


@pytest.fixture(scope="session")
def stack_build(engine, tmp_path_factory, built_images):
    """``stack_build(NAME)``: `envkit build SPEC --image IMAGE --json` of tests/stacks/NAME/ (its lock is committed:
    no resolve), run once per session (test_stacks.py and the framework's own tests share it; their tests are in
    one xdist group, so on one worker) and removed when the session ends (``built_images``): (the build's image
    entry, the locked image)."""
    from envkit.lock import load_lock
    from tests.integration.stacks import load_stack

    builds: dict[str, tuple[dict, object]] = {}

    def build(name: str) -> tuple[dict, object]:
        if name not in builds:
            stack = load_stack(name)
            out = tmp_path_factory.mktemp(f"{name}-render")
            proc = envkit("build", stack.spec.relative_to(ROOT), "--image", stack["image"], "--out", out, "--json",
                          check=True)
            doc = json.loads(proc.stdout)
            assert doc["lock_reused"] is True, f"{stack.lock} is stale: run `envkit resolve {stack['spec']}`"
            [image] = doc["images"]
            built_images.append(image["tag"])
            builds[name] = image, load_lock(stack.lock).image(stack["image"])
        return builds[name]

    return build


@pytest.fixture(scope="session")
def devel_build(request, engine, built_images):
    """``devel_build(NAME)``: tests/stacks/NAME/'s image built as its devel flavour (as the resolver locks
    `flavour: devel`: the same lock hash), named IMAGE-devel, after the stack's ``after`` fixture; once per session
    (its tests are in the xdist group of its spec's images, so on one worker), removed when the session ends
    (``built_images``): (the build's outcome, the locked devel image)."""
    from envkit.images.builder import build_image
    from envkit.lock import load_lock, sealed
    from envkit.resolve import devel
    from tests.integration.stacks import load_stack
    from tests.integration.test_buildkit import ca_bundle

    builds: dict[str, tuple[object, object]] = {}

    def build(name: str) -> tuple[object, object]:
        if name not in builds:
            stack = load_stack(name)
            if stack["after"]:
                request.getfixturevalue(stack["after"])
            lock = load_lock(stack.lock)
            image = devel.as_devel(lock.image(stack["image"]))
            image = sealed(image.model_copy(update={"name": f"{stack['image']}-devel"}))
            started = time.monotonic()
            outcome = build_image(engine, lock.model_copy(update={"images": (image,)}), image, stack["spec"],
                                  ca_bundle=ca_bundle(), progress=lambda *_: None, verify=stack["verify"])
            print(f"{name} (CUDA {image.cuda_major_minor}) build: {time.monotonic() - started:.1f} s")
            built_images.append(outcome.tag)
            builds[name] = outcome, image
        return builds[name]

    return build


@pytest.fixture(scope="session")
def example_build(engine):
    """`envkit build examples/team.yaml --json`, run once (a real CUDA torch image), removed when the session ends
    (every test using it is in one xdist group, so on one worker; the devel and layer tests build on its cached
    layers before then). An online build leaves no stage image: its layers are the image's own."""
    proc = envkit("build", "examples/team.yaml", "--json", check=True)
    doc = json.loads(proc.stdout)
    yield doc, proc
    remove_built(engine, [image["tag"] for image in doc["images"]])


def remove_built(engine, tags) -> None:
    """Remove images a test built (by tag, forced) with the classic builder's stage images of the same locks."""
    from tests.integration.test_buildkit import remove_images

    remove_images(engine, *tags)


@pytest.fixture(scope="module")
def dc(engine):
    """The engine's docker-py client."""
    return engine.client


@pytest.fixture(scope="module")
def base(dc) -> str:
    """The smallest local envkit base image (~117 MB), for registry tests: never push the
    multi-GB framework images there (compressing and pushing them takes minutes)."""
    images = [i for i in dc.images.list(name="envkit-base/debian") if i.tags]
    if not images:
        pytest.skip("no local envkit-base/debian image (build the example team once, or bootstrap a base)")
    # its own name, not one another module gave it (a registry test tags the base as <registry>/...:t1 and removes
    # that tag when it ends, perhaps while this module runs on the other worker)
    return next(t for t in min(images, key=lambda i: i.attrs["Size"]).tags if t.startswith("envkit-base/debian:"))


def empty_store(tmp_path: Path) -> Path:
    """A history store with no record (``h.sqlite`` under ``tmp_path``), for commands that read one: a store
    named with --store must exist (show, run, ls and gc refuse a name that is not there)."""
    from envkit.store.history import Store

    path = tmp_path / "h.sqlite"
    Store.open(path).close()
    return path
