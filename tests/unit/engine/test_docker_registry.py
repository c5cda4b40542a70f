"""The engine's side of registries and archives (engine/docker_registry.py) on fake docker-py clients: what the
engine refuses comes out as envkit's errors (the registry code judges them without docker-py), the rest passes
through. The real engine and registries: tests/integration/test_publish.py, test_registry_auth.py, test_bundle.py."""

from __future__ import annotations

from types import SimpleNamespace

import docker
import docker.errors
import pytest
import requests

from envkit.engine import docker_registry
from envkit.engine.docker_engine import DockerEngine, as_engine
from envkit.engine.protocol import EngineCallError, ImageMissing
from envkit.errors import EngineError
from envkit.registry.api import _from_exception


def api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError(f"{status} Server Error", response=response, explanation=explanation)


class Api:
    def __init__(self, fail=None, chunks=()):
        self.fail, self.chunks, self.calls = fail, list(chunks), []

    def _call(self, name, *args, **kwargs):
        self.calls.append((name, args, kwargs))
        if self.fail is not None:
            raise self.fail
        return iter(self.chunks)

    def push(self, *args, **kwargs):
        return self._call("push", *args, **kwargs)

    def pull(self, *args, **kwargs):
        return self._call("pull", *args, **kwargs)

    def tag(self, *args, **kwargs):
        return self._call("tag", *args, **kwargs)


def test_push_and_pull_pass_the_engines_progress_through_with_the_auth_config():
    chunks = [{"status": "Pushing"}, {"aux": {"Digest": "sha256:" + "a" * 64}}]
    client = SimpleNamespace(api=Api(chunks=chunks))
    auth = {"username": "u", "password": "p", "serveraddress": "reg:5000"}
    assert list(docker_registry.push(client, "reg:5000/team/img", "t1", auth)) == chunks
    assert list(docker_registry.pull(client, "reg:5000/team/img", "sha256:" + "b" * 64, None)) == chunks
    (push, args, kwargs), (pull, pargs, pkwargs) = client.api.calls
    assert (push, args, kwargs) == ("push", ("reg:5000/team/img",),
                                    {"tag": "t1", "stream": True, "decode": True, "auth_config": auth})
    assert pull == "pull" and pkwargs["tag"] == "sha256:" + "b" * 64 and pkwargs["auth_config"] is None


@pytest.mark.parametrize("call", [docker_registry.push, docker_registry.pull])
def test_a_refused_push_or_pull_is_an_engine_call_error_the_registry_code_classifies(call):
    client = SimpleNamespace(api=Api(fail=api_error(503, "received unexpected HTTP status: 503 Service Unavailable")))
    with pytest.raises(EngineCallError) as caught:
        list(call(client, "reg:5000/team/img", "t1", None))
    assert caught.value.status_code == 503 and "503 Service Unavailable" in caught.value.explanation
    assert isinstance(caught.value, EngineError)
    failure = _from_exception(caught.value)
    assert failure.retryable and failure.message == caught.value.explanation  # 5xx: tried again
    denied = EngineCallError("denied: requested access to the resource is denied", 403)
    assert not _from_exception(denied).retryable


def test_tagging_a_missing_image_says_so_and_a_refusal_keeps_the_engines_words():
    missing = SimpleNamespace(api=Api(fail=docker.errors.ImageNotFound("no such image")))
    with pytest.raises(ImageMissing):
        docker_registry.tag_image(missing, "nope:1", "reg:5000/team/img", "t1")
    refused = SimpleNamespace(api=Api(fail=api_error(500, "invalid tag format")))
    with pytest.raises(EngineCallError, match="invalid tag format"):
        docker_registry.tag_image(refused, "img:1", "reg:5000/team/img", "t1")


def test_the_engines_registry_settings_or_none_when_it_cannot_say():
    config = {"IndexConfigs": {"reg:5000": {"Secure": False}}, "InsecureRegistryCIDRs": ["10.0.0.0/8"]}
    assert docker_registry.registry_config(SimpleNamespace(info=lambda: {"RegistryConfig": config})) == config

    def gone():
        raise requests.ConnectionError("engine gone")

    assert docker_registry.registry_config(SimpleNamespace(info=gone)) == {}
    assert docker_registry.registry_config(SimpleNamespace(info=lambda: {})) == {}


def test_save_names_the_file_a_write_failed_on_and_load_gives_the_image_ids(tmp_path):
    engine = SimpleNamespace(client=SimpleNamespace(api=SimpleNamespace(get_image=lambda ref: iter([b"tar", b"ball"]))))
    docker_registry.save(engine, "debian:12", tmp_path / "base.tar")
    assert (tmp_path / "base.tar").read_bytes() == b"tarball"
    with pytest.raises(OSError) as caught:
        docker_registry.save(engine, "debian:12", tmp_path / "missing" / "base.tar")
    assert caught.value.filename == str(tmp_path / "missing" / "base.tar")

    loaded = [SimpleNamespace(id="sha256:" + "c" * 64)]
    engine = SimpleNamespace(client=SimpleNamespace(images=SimpleNamespace(load=lambda fh: loaded)))
    assert docker_registry.load(engine, tmp_path / "base.tar") == ["sha256:" + "c" * 64]


def test_registry_code_takes_a_docker_client_or_an_engine():
    client = docker.DockerClient.__new__(docker.DockerClient)  # never connected
    engine = as_engine(client)
    assert isinstance(engine, DockerEngine) and engine.client is client
    assert as_engine(engine) is engine
    assert as_engine(SimpleNamespace(client=client)).client is client
    with pytest.raises(TypeError, match="DockerClient or a DockerEngine"):
        as_engine(object())

