"""A reproducible build's OS stage key (``images.os_stage``): what it depends on and what not. Pure logic on rendered
Dockerfiles; tests/integration/test_os_stage.py restores an OS stage from a real registry and builds on it."""

from __future__ import annotations

import pytest

from envkit.images import os_stage
from envkit.render.files import render_files
from tests.unit.lockfixtures import make_devel_image, make_image, make_lock


def _key(image, **kwargs) -> str:
    return os_stage.os_key(render_files(make_lock(image), image, "team.yaml", **kwargs)["Dockerfile"])


def test_the_key_is_the_os_stage_alone_whatever_the_builder_or_the_packages_above_it():
    image = make_image()
    key = _key(image)
    assert key.startswith("sha256:") and len(key) == 71
    assert _key(image, buildkit=True) == key  # both renders' OS stage is the same text
    assert _key(make_image(extra=("numpy", "2.0.2"))) == key  # another lock, the same OS stage: the header differs
    assert _key(make_image(name="other")) == key


def test_another_base_or_other_system_packages_give_another_key():
    image = make_image()
    other_base = image.model_copy(update={"base": image.base.model_copy(update={"ref": image.base.ref + "x"})})
    assert _key(other_base) != _key(image)
    assert _key(image.model_copy(update={"apt": (*image.apt, "git")})) != _key(image)
    assert _key(make_devel_image()) == _key(image)  # (the devel flavour's own steps come after the OS stage)


def test_a_dockerfile_without_an_os_stage_is_refused():
    with pytest.raises(ValueError, match="no `FROM … AS os` stage"):
        os_stage.os_key(b"FROM debian AS runtime\nRUN true\n")


def test_the_registry_tag_and_the_store_key_name_the_key():
    key = "sha256:" + "ab" * 32
    assert os_stage.mirror_tag(key) == "os-" + "ab" * 32 and len(os_stage.mirror_tag(key)) <= 128
    assert os_stage.mirror_key(key) == f"os stage {key}" and os_stage.os_tag("envkit/t/x:1") == "envkit/t/x:1-os"


class _Engine:
    def __init__(self, *images):
        self.images = {tag: info for info in images for tag in info.tags}

    def inspect(self, ref):
        return self.images.get(ref)


def _info(tag: str, layers: tuple[str, ...], key: str | None = None):
    from envkit.engine.protocol import ImageInfo
    from envkit.support.labels import OS_KEY_LABEL

    return ImageInfo(id="sha256:" + tag.encode().hex()[:64].ljust(64, "0"), tags=(tag,), size=1, env={}, user="",
                     labels={OS_KEY_LABEL: key} if key else {}, layers=layers)


def test_find_takes_the_tags_os_stage_only_of_its_key_and_on_the_engines_base():
    key = "sha256:" + "1" * 64
    base = _info("base:b", ("sha256:b",))
    stage = _info("x:1-os", ("sha256:b", "sha256:apt"), key)
    assert os_stage.find(_Engine(base, stage), key, "x:1-os", "base:b") == stage
    assert os_stage.find(_Engine(base, stage), "sha256:" + "2" * 64, "x:1-os", "base:b") is None  # another key
    assert os_stage.find(_Engine(base, stage), key, "y:1-os", "base:b") is None  # another build's tag
    other_base = _info("base:b", ("sha256:c",))  # this runner bootstrapped a base of its own
    assert os_stage.find(_Engine(other_base, stage), key, "x:1-os", "base:b") is None
    assert os_stage.find(_Engine(stage), key, "x:1-os", "base:b") is None  # no base here at all


class _NightlyEngine:
    """What ``builder._build`` asks of the engine: images by tag (layers), untag. ``os_layers`` is what the
    ``--target os`` build gives, ``own`` what the image's own os stage gives."""

    def __init__(self, os_layers: tuple[str, ...], own: tuple[str, ...]):
        self.os_layers, self.own, self.images, self.untagged = os_layers, own, {}, []

    def inspect(self, ref):
        from envkit.engine.protocol import ImageInfo

        layers = self.images.get(ref)
        return None if layers is None else ImageInfo(id=f"id-{ref}-{len(layers)}", tags=(ref,), size=1, labels={},
                                                     env={}, user="", repo_digests=(), layers=layers)

    def untag(self, ref):
        self.untagged.append(ref)


def _nightly_build(monkeypatch, engine, *, no_cache=False):
    """``builder._build`` as the nightly calls it (BuildKit, ``keep_os_stage``), with a stand-in for the builder:
    ``--target os`` tags ``<tag>-os`` with ``engine.os_layers``; the image stands on them when given ``ENVKIT_OS``,
    else on ``engine.own``. Returns the build arguments of each image build, and what was said."""
    from envkit.engine.protocol import BuildEvent
    from envkit.images import builder

    builds: list = []

    def run_build(engine_, ctx, tag, labels, *, target=None, build_args=None, **_):
        if target == "os":
            engine.images[tag] = engine.os_layers
        else:
            builds.append(build_args)
            engine.images[tag] = (engine.os_layers if build_args else engine.own) + ("env",)
        yield BuildEvent("done", f"sha256:{len(builds)}")

    monkeypatch.setattr(builder, "run_build", run_build)
    image = make_image()
    lock = make_lock(image)
    files = render_files(lock, image, "team.yaml", buildkit=True)
    said: list = []
    outcome = builder._build(engine, lock, image, files, "vision/torch25:t", {}, builder="buildkit", ca_bundle=None,
                             progress=lambda _name, e: said.append(str(getattr(e, "text", e))), no_cache=no_cache,
                             keep_os_stage=True)
    return outcome, builds, said


def test_the_nightly_builds_on_its_own_os_stage_when_the_cache_gives_the_layers_of_the_one_it_kept(monkeypatch):
    engine = _NightlyEngine(os_layers=("base", "apt"), own=("base", "apt"))
    outcome, builds, said = _nightly_build(monkeypatch, engine)
    assert builds == [None]  # one build, on the Dockerfile's own os stage: BuildKit's cached steps
    assert outcome.diff_ids == ("base", "apt", "env") and engine.untagged == []


def test_the_nightly_builds_again_on_the_os_stage_it_kept_when_the_cache_gave_other_layers(monkeypatch):
    engine = _NightlyEngine(os_layers=("base", "apt"), own=("base", "apt-other"))  # two results of one step in the cache
    outcome, builds, said = _nightly_build(monkeypatch, engine)
    assert builds == [None, {"ENVKIT_OS": "vision/torch25:t-os"}]
    assert outcome.diff_ids == ("base", "apt", "env")  # on the layers the nightly mirrors
    assert engine.untagged == ["sha256:1"] and any("other layers than vision/torch25:t-os" in s for s in said)


def test_with_no_cache_the_nightly_stands_on_the_os_stage_it_built(monkeypatch):
    engine = _NightlyEngine(os_layers=("base", "apt-new"), own=("base", "apt-newer"))  # each stage build: other bytes
    outcome, builds, _ = _nightly_build(monkeypatch, engine, no_cache=True)
    assert builds == [{"ENVKIT_OS": "vision/torch25:t-os"}] and outcome.diff_ids == ("base", "apt-new", "env")
