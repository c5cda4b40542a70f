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
from envkit.build.builder import LOCK_LABEL, build_image
from envkit.build.bundle import build_from_bundle, make_bundle
from envkit.build.bundle_manifest import BUNDLE_LABEL
from envkit.build.layer_record import entry
from envkit.engine.protocol import BuildEvent, RunOptions
from envkit.support.labels import LAYERS_LABEL, PAYLOAD_LAYER_LABEL, REPRODUCIBLE_LAYERS
from tests.integration.test_buildkit import ca_bundle, remove_images
from tests.integration.test_bundle import record_builds
from tests.integration.test_reproducible import lock_with

pytestmark = [pytest.mark.integration, pytest.mark.network]


def test_a_bundle_built_reproducibly_offline_gives_the_online_environment_layers(engine, tmp_path, monkeypatch):
    lock, image = lock_with("bundle-repro", "4.7.1", numpy="2.1.*")
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
