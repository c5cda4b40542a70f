"""`envkit bundle build --reproducible`: an offline bundle built with no network gives the environment layers an
online `envkit build --reproducible` of the same lock gives.

The small stack (numpy and typing-extensions, pins no other test's image has) is built online with reproducible
layers, bundled (wheels, debs, base, uv's wheel, and the online build's layer record), removed, then built from the
bundle: the OS stage by the builder with the network cut off, each layer group installed by the bundle's uv from its
wheels, served on the install container's loopback, in containers with no network. The framework, extra and payload
digests must be the online build's, so `verify --lock` of the bundle's lock passes; the OS layers are the bundle's
(its .debs, its own build cache label), so the image ids differ.
"""

from __future__ import annotations

import pytest

from envkit.app.certify import layers_check
from envkit.images.builder import LOCK_LABEL, build_image
from envkit.images.bundle import build_from_bundle, make_bundle
from envkit.images.bundle_manifest import BUNDLE_LABEL
from envkit.images.layer_record import entry
from envkit.engine.protocol import BuildEvent, RunOptions
from envkit.lock import sealed
from envkit.resolve import devel
from envkit.support.labels import LAYERS_LABEL, PAYLOAD_LAYER_LABEL, REPRODUCIBLE_LAYERS
from tests.integration.test_buildkit import ca_bundle, collect_created, remove_images
from tests.integration.test_bundle import record_builds
from tests.integration.test_reproducible import lock_with

pytestmark = [pytest.mark.integration, pytest.mark.network]


def test_a_bundle_built_reproducibly_offline_gives_the_online_environment_layers(engine, tmp_path, monkeypatch):
    lock, image = lock_with("bundle-repro", "4.7.1", numpy="1.23.*")
    tags: list[str] = []
    try:
        online = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False,
                             reproducible=True, progress=lambda *_: None)
        tags.append(online.tag)
        assert list(online.layers) == ["framework", "extra", "payload"] and online.reused == ()
        # the bundle carries the lock's layer record (as `bundle make` takes it from beside the lock)
        path = make_bundle(engine, lock, image.name, tmp_path / "bundle", ca_bundle=ca_bundle(),
                           record=entry(image, online.layers))
        remove_images(engine, online.tag)  # the image and its OS stage: the bundle's build takes the same tags
        assert engine.inspect(online.tag) is None

        builds = record_builds(engine, monkeypatch)  # the OS stage's build: no network
        installs: list[RunOptions] = []
        real_run = engine.run

        def run(ref, cmd, options):
            if options.role == "build":
                installs.append(options)
            return real_run(ref, cmd, options)

        monkeypatch.setattr(engine, "run", run)
        said: list[BuildEvent | str] = []
        offline = build_from_bundle(engine, path, reproducible=True, verify=False, progress=said.append)
        tags.append(offline.tag)
        monkeypatch.undo()

        lines = [s for s in said if isinstance(s, str)]
        assert any(s.startswith("installing the framework layer group") for s in lines), lines  # progress
        assert offline.tag == online.tag and offline.reused == ()
        assert offline.layers == online.layers, (offline.layers, online.layers)
        assert len(installs) == 2 and not any(o.network for o in installs)  # each group, with no network
        (kind, args), = [b for b in builds if b[0] == "api" or "build" in b[1]]  # the OS stage's, with no network
        assert ("--network=none" in args and "--target" in args) if kind == "cli" else \
            (args["network_mode"] == "none" and args["target"] == "os")
        info = engine.inspect(offline.tag)
        assert info.id == offline.image_id != online.image_id  # (the bundle's OS layers)
        assert list(info.layers[-3:]) == list(online.layers.values())
        assert info.labels[LOCK_LABEL] == image.hash and info.labels[BUNDLE_LABEL].startswith("sha256:")
        assert info.labels[LAYERS_LABEL] == REPRODUCIBLE_LAYERS
        assert info.labels[PAYLOAD_LAYER_LABEL] == online.layers["payload"]
        assert info.user == "1000:1000"
        numpy = next(p.version for p in image.packages if p.name == "numpy")
        check = engine.run(offline.tag, ["python3", "-c", "import numpy, typing_extensions, importlib.metadata as m; "
                                                          "print(numpy.__version__, m.version('typing_extensions'))"],
                           RunOptions(timeout=120, network=False))
        assert check.exit_code == 0 and check.stdout.split() == [numpy, "4.7.1"], check.stderr
        # `envkit verify --lock` of the bundle's lock: the image is exactly the lock
        layers = layers_check(info, image.hash, path / "envkit.lock")
        assert layers is not None and layers["status"] == "passed", layers
    finally:
        remove_images(engine, *tags)


def test_a_devel_bundle_built_reproducibly_has_the_runtime_environment_and_its_devel_steps(engine, tmp_path,
                                                                                          monkeypatch):
    """The small stack with a CUDA wheel, its runtime flavour built online --reproducible; then its devel flavour's
    bundle built --reproducible: the environment layers are the runtime flavour's, the devel steps (toolchain from
    the bundle's .debs, nvcc's wheels from its wheelhouse, the programs from its toolkit .deb) built on them by the
    builder from the bundle's context with no network, and the assembled image's `-env` tag gone. With the classic
    builder, which takes the devel Dockerfile from outside the context (docker-py adds it to the context it sends).
    BuildKit's side of it is proven by two tests that each take 1-2 cold minutes, so it is not built a third time
    here: a devel bundle built offline (test_devel.py) and the devel steps on reproducible environment layers
    (test_reproducible_devel.py)."""
    (rt_lock, runtime), (dev_lock, dev) = _locks()
    tags: list[str] = []
    made: list[str] = []  # the images a classic build created (its steps' intermediates), removed at the end
    try:
        first = build_image(engine, rt_lock, runtime, "team.yaml", ca_bundle=ca_bundle(), verify=False,
                            reproducible=True, progress=lambda *_: None)
        tags.append(first.tag)
        assert list(first.layers) == [*ENVIRONMENT, "payload"]
        remove_images(engine, first.tag)
        path = make_bundle(engine, dev_lock, dev.name, tmp_path / "bundle", ca_bundle=ca_bundle())

        builds = record_builds(engine, monkeypatch)
        said: list[BuildEvent | str] = []
        created = collect_created(made)

        def progress(event: BuildEvent | str) -> None:
            said.append(event)
            created(event)

        built = build_from_bundle(engine, path, builder="classic", reproducible=True, verify=False, progress=progress)
        tags.append(built.tag)
        monkeypatch.undo()
        lines = [s for s in said if isinstance(s, str)]
        assert any(s.startswith("building the devel steps on ") for s in lines), lines
        assert {g: built.layers[g] for g in ENVIRONMENT} == {g: first.layers[g] for g in ENVIRONMENT}
        os_stage, devel_steps = [b for b in builds if b[0] == "api" or "build" in b[1]]
        for kind, args in (os_stage, devel_steps):
            assert ("--network=none" in args) if kind == "cli" else args["network_mode"] == "none"

        info = engine.inspect(built.tag)
        assert info.id == built.image_id and engine.inspect(built.tag + "-env") is None
        payload = list(info.layers).index(built.layers["payload"])
        assert list(info.layers[payload - 3:payload + 1]) == list(built.layers.values())
        assert len(info.layers) - payload - 1 >= 2  # the devel steps' layers, above envkit's
        assert info.labels[BUNDLE_LABEL].startswith("sha256:") and info.labels["io.envkit.flavour"] == "devel"
        run = engine.run(built.tag, ["bash", "-c", "nvcc --version && python3 -c 'import numpy' && id -u"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0, run.stdout + run.stderr
        assert f"release {dev.cuda_major_minor}," in run.stdout and run.stdout.strip().endswith("1000")
    finally:
        remove_images(engine, *tags, created=made)


ENVIRONMENT = ("cuda", "framework", "extra")


def _locks():
    """The runtime and devel flavours of the small stack with a CUDA wheel (as test_reproducible_devel's, with
    pins of their own), the devel group locked as the resolver locks it (CUDA 12.4: nvcc's programs from Debian's
    toolkit .deb, which the bundle carries)."""
    rt_lock, runtime = lock_with("bundle-repro-devel-classic", "4.6.3", numpy="1.24.*",
                                 framework=("nvidia-cuda-runtime-cu12==12.4.127",))
    dev = sealed(devel.as_devel(runtime).model_copy(update={"name": "bundle-repro-devel-dev"}))
    return (rt_lock, runtime), (rt_lock.model_copy(update={"images": (dev,)}), dev)
