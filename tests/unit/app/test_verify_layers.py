"""`envkit verify --lock`'s layer check against the record beside the lock (``app.certify.layers_check``)."""

from __future__ import annotations

from envkit.app.certify import layers_check
from envkit.images.layer_record import Recorded, write_record
from envkit.engine.protocol import ImageInfo
from envkit.lock import write_lock
from envkit.support.labels import LAYERS_LABEL, REPRODUCIBLE_LAYERS
from tests.unit.lockfixtures import make_image, make_lock

LAYERS = {"cuda": "sha256:c", "framework": "sha256:f", "extra": "sha256:e", "payload": "sha256:p"}


def _image(layers: tuple[str, ...], reproducible: bool = True) -> ImageInfo:
    labels = {LAYERS_LABEL: REPRODUCIBLE_LAYERS} if reproducible else {}
    return ImageInfo(id="sha256:1", tags=(), size=0, labels=labels, env={}, user="1000:1000", layers=layers)


def _lock(tmp_path):
    image = make_image()
    path = tmp_path / "team.lock"
    write_lock(make_lock(image), path)
    return image, path


def test_no_record_no_check(tmp_path):
    image, path = _lock(tmp_path)
    assert layers_check(_image(("sha256:os",)), image.hash, path) is None


def test_the_recorded_layers_pass_and_another_fails_naming_it(tmp_path):
    image, path = _lock(tmp_path)
    write_record(path, [Recorded(image.name, image.hash, LAYERS, "test")])
    good = _image(("sha256:os", "sha256:c", "sha256:f", "sha256:e", "sha256:p2"))
    check = layers_check(good, image.hash, path)
    assert check is not None and check["status"] == "passed"
    assert check["message"] == "environment layers match the lock exactly (cuda, framework, extra)"
    bad = _image(("sha256:os", "sha256:c2", "sha256:f", "sha256:e", "sha256:p"))
    check = layers_check(bad, image.hash, path)
    assert check is not None and check["status"] == "failed" and check["value"] == {"cuda": "sha256:c2"}
    assert "the cuda layer differs from the lock's record: the image has sha256:c2, the record sha256:c" in \
        check["message"]


def test_a_record_of_another_lock_hash_is_skipped_saying_so(tmp_path):
    image, path = _lock(tmp_path)
    write_record(path, [Recorded(image.name, "sha256:" + "9" * 64, LAYERS, "test")])
    check = layers_check(_image(("sha256:c", "sha256:f", "sha256:e", "sha256:p")), image.hash, path)
    assert check is not None and check["status"] == "skipped"
    assert "team.layers.json records lock hash sha256:999999999999" in check["message"]
    assert "--reproducible --record" in check["message"]


def test_an_image_a_builder_made_is_not_compared_with_the_record(tmp_path):
    """A builder's layers hold write times: the same lock built by BuildKit never has the record's digests, and that
    is no failure of the image."""
    image, path = _lock(tmp_path)
    write_record(path, [Recorded(image.name, image.hash, LAYERS, "test")])
    check = layers_check(_image(("sha256:os", "sha256:x", "sha256:y", "sha256:z", "sha256:p"), reproducible=False),
                         image.hash, path)
    assert check is not None and check["status"] == "skipped"
    assert "a builder made this image's layers" in check["message"] and "--reproducible" in check["message"]
