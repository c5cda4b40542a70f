"""``engine.docker_layers.chains`` while another process removes images: what it could not read is skipped."""

import docker.errors
import pytest

from envkit.engine.docker_layers import chains


class _Api:
    def __init__(self, error: Exception):
        self.error = error

    def images(self, all=False):
        return [{"Id": "sha256:gone"}, {"Id": "sha256:kept"}]

    def inspect_image(self, image_id):
        if image_id == "sha256:gone":
            raise self.error
        return {"RootFS": {"Layers": ["sha256:a", "sha256:b"]}}


class _Client:
    def __init__(self, error: Exception):
        self.api = _Api(error)


@pytest.mark.parametrize("error", [docker.errors.NotFound("404", explanation="No such image"),
                                   docker.errors.APIError("500", explanation="layer does not exist")],
                         ids=["not-found", "layer-gone"])
def test_an_image_removed_while_the_chains_are_read_is_skipped(error):
    assert chains(_Client(error)) == {("sha256:a",), ("sha256:a", "sha256:b")}


def test_any_other_engine_error_is_raised():
    with pytest.raises(docker.errors.APIError):
        chains(_Client(docker.errors.APIError("500", explanation="the engine is out of memory")))
