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
