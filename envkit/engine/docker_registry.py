"""The engine's side of registries and image archives, over docker-py: tag, push and pull (the engine talks to the
registry itself, with the ``auth_config`` envkit resolved for the call), the engine's registry settings (which
registries it treats as insecure), ``docker save`` and ``docker load`` (offline bundles), and the credentials
``docker login`` stored (``config.json``, credential helpers), which envkit reads through docker-py as the engine's
CLI does. A refused call is an ``EngineCallError`` (the engine's words and HTTP status), an absent image an
``ImageMissing``: the registry code above judges them (retry, refusal, TLS) without knowing docker-py."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, Iterator, Protocol

import docker
import docker.auth
import docker.errors
import docker.utils.config
import requests

from ..errors import EngineError
from .protocol import Engine, EngineCallError, ImageMissing
from .space import engine_out_of_space



class ClientEngine(Engine, Protocol):
    """An engine over docker-py (``docker_engine.DockerEngine``, which imports this module), its client at hand."""

    client: docker.DockerClient


def _refused(exc: docker.errors.APIError) -> EngineCallError:
    return EngineCallError(str(exc.explanation or exc), exc.status_code)


def registry_config(client: docker.DockerClient) -> dict:
    """``docker info``'s RegistryConfig (insecure registries, their CIDRs); {} when the engine cannot say."""
    try:
        return client.info().get("RegistryConfig") or {}
    except (docker.errors.DockerException, requests.RequestException):
        return {}


def tag_image(client: docker.DockerClient, ref: str, repository: str, tag: str) -> None:
    try:
        client.api.tag(ref, repository, tag)
    except docker.errors.ImageNotFound:
        raise ImageMissing(f"the engine has no image {ref}") from None
    except docker.errors.APIError as exc:
        raise _refused(exc) from None


def _stream(call: Callable[[], Iterator[dict]]) -> Iterator[dict]:
    try:
        yield from call()
    except docker.errors.APIError as exc:
        raise _refused(exc) from None


def push(client: docker.DockerClient, repository: str, tag: str, auth_config: dict | None) -> Iterator[dict]:
    return _stream(lambda: client.api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth_config))


def pull(client: docker.DockerClient, repository: str, tag: str, auth_config: dict | None) -> Iterator[dict]:
    return _stream(lambda: client.api.pull(repository, tag=tag, stream=True, decode=True, auth_config=auth_config))


def save(engine: ClientEngine, ref: str, path: Path) -> None:
    """``docker save`` ``ref`` (with its tag) into ``path``; the engine's full disk said plainly."""
    try:
        with open(path, "wb") as fh:
            for chunk in engine.client.api.get_image(ref):
                fh.write(chunk)
    except OSError as exc:  # a write's error names no file: say which (a full disk is this host's)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except docker.errors.APIError as exc:
        raise engine_out_of_space(EngineError(f"cannot save {ref}: {exc.explanation}"), engine) from None


def load(engine: ClientEngine, path: Path) -> list[str]:
    """``docker load`` ``path``: the ids of the images it held."""
    try:
        with open(path, "rb") as fh:
            loaded = engine.client.images.load(fh)
    except docker.errors.APIError as exc:
        raise engine_out_of_space(EngineError(f"cannot load {path}: {exc.explanation}"), engine) from None
    except docker.errors.ImageLoadError as exc:  # the engine's own error in the load's stream
        raise engine_out_of_space(EngineError(f"cannot load {path}: {exc}"), engine) from None
    return [str(image.id) for image in loaded]


# --- what `docker login` stored ------------------------------------------------------------------------
def login_config_file() -> str | None:
    """The file `docker login` keeps credentials in here (``$DOCKER_CONFIG/config.json``, else
    ``~/.docker/config.json``), as docker-py finds it; None when there is none."""
    found = docker.utils.config.find_config_file()
    return str(found) if found else None


def stored_login(path: str, registry: str) -> tuple[str | None, dict]:
    """(the credential helper ``path`` names for ``registry``, or None; the login it gives, or {}). Raises what
    docker-py raises for a broken file or helper (the caller says so without echoing it)."""
    with warnings.catch_warnings():  # docker-py warns of a missing helper, then fails: the caller says it once
        warnings.simplefilter("ignore", UserWarning)
        config = docker.auth.load_config(path)
        return config.get_credential_store(registry), config.resolve_authconfig(registry) or {}

