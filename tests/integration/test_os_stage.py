"""A reproducible build's OS stage kept in the team registry by digest and pulled back on a runner that lost it
(``images.os_stage``, ``app.nightly_publish.restore_os_stage``): the same lock then gives the very same image, every
layer and the config, so a fleet node holding it pulls nothing and a push sends nothing.

The small stack (``test_reproducible.lock_with``, numpy 2.3: no other test's image has it) built `--reproducible`
with the classic builder; its OS stage mirrored into a real registry (Debian's docker-registry) and recorded in a
history store, as `envkit nightly --registry` does after publishing; then the runner is wiped of what the build made
(the image, its OS stage and the OS stage's registry tag) and the lock built again after the nightly's restore. The
nightly itself is not run: this stack's payload fails verification (its lock names torch, which it does not install),
and a nightly publishes only a verified image.
"""

from __future__ import annotations

import pytest

from envkit.app.nightly_publish import ImageReport, _mirror_os_stage, restore_os_stage
from envkit.images import os_stage
from envkit.images.builder import build_image
from envkit.store.history import Store
from envkit.support.labels import OS_KEY_LABEL
from tests.integration.registry import registry  # noqa: F401  (a fixture)
from tests.integration.test_buildkit import ca_bundle, remove_images
from tests.integration.test_reproducible import lock_with

pytestmark = [pytest.mark.integration, pytest.mark.network]


def _build(engine, lock, image, said: list[str]):
    outcome = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), verify=False, builder="classic",
                          reproducible=True, progress=lambda _name, e: said.append(getattr(e, "text", str(e))))
    assert outcome.action == "built", said
    return outcome


def _wipe(engine, *refs: str) -> None:
    """The images ``refs`` name, with every tag and digest reference they have (a pushed or pulled image has a
    registry's too), and the classic builder's stage images of their builds."""
    ids = [info.id for info in map(engine.inspect, refs) if info is not None]
    remove_images(engine, *refs)
    for image_id in ids:
        if engine.inspect(image_id) is not None:
            engine.client.images.remove(image_id, force=True)


def test_a_runner_without_the_os_stage_pulls_it_back_and_builds_the_same_image(engine, registry, tmp_path):  # noqa: F811
    lock, image = lock_with("os-stage", "4.12.2", numpy="2.3.*")
    tag = None
    try:
        with Store.open(tmp_path / "history.sqlite") as store:
            said: list[str] = []
            first = _build(engine, lock, image, said)
            tag = first.tag
            os_tag = os_stage.os_tag(tag)
            stage = engine.inspect(os_tag)
            key = stage.labels[OS_KEY_LABEL]
            assert any(line == f"building the OS stage as {os_tag}" for line in said)

            report = ImageReport(image.name, tag, status="verified")
            _mirror_os_stage(engine, store, lock, image, registry.host, report)  # as the nightly, after publishing
            [pinned] = store.mirrors_for(os_stage.mirror_key(key))
            assert report.pushed == [pinned] and pinned.startswith(f"{registry.host}/vision/base-debian-bookworm@")
            again = ImageReport(image.name, tag, status="verified")
            _mirror_os_stage(engine, store, lock, image, registry.host, again)
            assert again.pushed == [] and store.mirrors_for(os_stage.mirror_key(key)) == [pinned]  # mirrored already

            _wipe(engine, tag, os_tag)  # runner B: nothing of the build left
            assert engine.inspect(tag) is None and engine.inspect(os_tag) is None
            restored: list[str] = []
            assert restore_os_stage(engine, store, image, tag, key, restored.append) == pinned
            assert engine.inspect(os_tag).id == stage.id and restored  # the very OS stage, by content
            assert restore_os_stage(engine, store, image, tag, key) is None  # present: left alone

            said.clear()
            second = _build(engine, lock, image, said)
            assert any(line.startswith(f"the OS stage of key {key[7:19]} is on the engine") for line in said), said
            assert not any(line.startswith("building the OS stage") for line in said)
            assert second.image_id == first.image_id  # every layer and the config: the same image
            assert engine.inspect(tag).layers == first.diff_ids
    finally:
        if tag is not None:
            _wipe(engine, tag, os_stage.os_tag(tag))
