"""`envkit build --reproducible` of a devel image: envkit writes the environment layers, as for the runtime flavour,
and the builder runs the devel steps on the image it assembled (``reproducible.DevelSteps``).

The small stack with a CUDA wheel, so that every layer group is there (cuda: nvidia-cuda-runtime-cu12 12.4, with
the headers and libcudart the devel steps link into /opt/cuda; framework: numpy; extra: typing-extensions), its
devel group locked as the resolver locks it (``devel.as_devel``: CUDA 12.4, so nvcc's programs come from Debian's
toolkit .deb). Its runtime flavour is built first and removed; the devel image, built then, installs every group
again and must give the runtime flavour's environment layers, the same bytes, under its payload, with the devel
layers above. The record's check finds them there (``labels.PAYLOAD_LAYER_LABEL``), nvcc runs, and the assembled
image's ``-env`` tag is gone, also when a devel step fails.
"""

from __future__ import annotations

import pytest

from envkit.app.certify import layers_check
from envkit.images.builder import build_image
from envkit.images.layer_record import Recorded, write_record
from envkit.engine.protocol import RunOptions
from envkit.errors import BuildError
from envkit.lock import sealed, write_lock
from envkit.resolve import devel
from envkit.support.labels import LAYERS_LABEL, PAYLOAD_LAYER_LABEL, REPRODUCIBLE_LAYERS
from tests.integration.test_buildkit import ca_bundle, collect_created, remove_images
from tests.integration.test_reproducible import lock_with

pytestmark = [pytest.mark.integration, pytest.mark.network]

ENVIRONMENT = ("cuda", "framework", "extra")


def _locks(numpy: str, framework: tuple[str, ...] = ()):
    """The runtime and devel flavours of the small stack with these framework pins (``lock_with``: each test its
    own, so no build reuses another test's layers; ``images.layer_reuse`` reuses the lowest groups first)."""
    rt_lock, runtime = lock_with("repro-devel", "4.8.0", numpy=numpy, framework=framework)
    dev = sealed(devel.as_devel(runtime).model_copy(update={"name": "repro-devel-dev"}))
    return (rt_lock, runtime), (rt_lock.model_copy(update={"images": (dev,)}), dev)


def _build(engine, lock, image, said: list[str], builder: str = "auto", created=lambda _event: None):
    """``said``: what the build said, a step as "step <instruction>"; ``created``: each event, as
    ``collect_created`` takes them."""
    def progress(_name, event):
        text = getattr(event, "text", str(event))
        said.append(f"step {text}" if getattr(event, "kind", "") == "step" else text)
        created(event)

    return build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False, reproducible=True,
                       builder=builder, progress=progress)


@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_a_devel_image_has_the_runtime_flavours_environment_layers_and_its_devel_steps_above(engine, tmp_path,
                                                                                             builder):
    from envkit.engine.buildkit import BuildKitBuilder

    if builder == "buildkit" and not BuildKitBuilder(engine).available():
        pytest.skip("BuildKit cannot build here")
    cuda = {"classic": "12.4.127", "buildkit": "12.4.99"}[builder]
    (rt_lock, runtime), (dev_lock, dev) = _locks("2.2.*", (f"nvidia-cuda-runtime-cu12=={cuda}",))
    tags: list[str] = []
    try:
        said: list[str] = []
        first = _build(engine, rt_lock, runtime, said)
        tags.append(first.tag)
        assert list(first.layers) == [*ENVIRONMENT, "payload"], said
        remove_images(engine, first.tag)  # with its OS stage image: the devel build finds nothing to reuse

        said = []
        built = _build(engine, dev_lock, dev, said, builder)
        tags.append(built.tag)
        assert built.action == "built", said
        assert not [s for s in said if s.startswith("reusing")], said
        assert any(s.startswith("building the devel steps on ") for s in said), said
        assert {g: built.layers[g] for g in ENVIRONMENT} == {g: first.layers[g] for g in ENVIRONMENT}
        assert "devel steps" in built.phases

        info = engine.inspect(built.tag)
        assert info.id == built.image_id
        assert engine.inspect(built.tag + "-env") is None  # the assembled image's tag is gone
        payload = list(info.layers).index(built.layers["payload"])
        assert list(info.layers[payload - 3:payload + 1]) == list(built.layers.values())
        assert len(info.layers) - payload - 1 >= 2  # the devel steps' layers, above envkit's
        assert info.labels[LAYERS_LABEL] == REPRODUCIBLE_LAYERS
        assert info.labels[PAYLOAD_LAYER_LABEL] == built.layers["payload"]
        assert info.labels["io.envkit.flavour"] == "devel"
        assert info.env["CUDA_HOME"] == "/opt/cuda" and info.user == "1000:1000"

        # the record's check finds the environment under the payload, not at the top
        lock_path = tmp_path / "team.lock"
        write_lock(dev_lock, lock_path)
        write_record(lock_path, [Recorded(dev.name, dev.hash, built.layers, "test")])
        check = layers_check(info, dev.hash, lock_path)
        assert check is not None and check["status"] == "passed", check

        run = engine.run(built.tag, ["bash", "-c", "nvcc --version && python3 -c 'import numpy' && id -u"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0, run.stdout + run.stderr
        assert f"release {dev.cuda_major_minor}," in run.stdout and run.stdout.strip().endswith("1000")

        again = _build(engine, dev_lock, dev, [], builder)
        assert again.action == "skipped" and again.image_id == built.image_id  # its identity is the devel image's
    finally:
        remove_images(engine, *tags)


def test_a_failed_devel_step_leaves_no_image_and_no_env_tag(engine):
    """With the classic builder, whose steps before the failed one leave images built on the -env image."""
    (_, _), (dev_lock, dev) = _locks("1.25.*")  # (the devel steps fail before they need a CUDA wheel)
    wrong = tuple(p.model_copy(update={"hashes": ("sha256:" + "0" * 64,)}) if p.group == "devel" else p
                  for p in dev.packages)
    dev = sealed(dev.model_copy(update={"name": "repro-devel-bad", "packages": wrong}))
    dev_lock = dev_lock.model_copy(update={"images": (dev,)})
    said: list[str] = []
    made: list[str] = []
    tag = ""
    try:
        with pytest.raises(BuildError):
            _build(engine, dev_lock, dev, said, "classic", created=collect_created(made))
        tag = next(s.split(" on ", 1)[1] for s in said if s.startswith("building the devel steps on "))
        assert engine.inspect(tag) is None  # the -env tag
        assert engine.inspect(tag.removesuffix("-env")) is None
    finally:  # its OS stage image (tagged <tag>-os, with no final image to find it by) and the images the classic
        # builder made on the -env image before the failed step (removing the newest takes its untagged parents)
        remove_images(engine, *([tag.removesuffix("-env") + "-os"] if tag else []), created=made)
