"""The engine's side of registries and image archives, over docker-py: tag, push and pull (the engine talks to the
registry itself, with the ``auth_config`` envkit resolved for the call), the engine's registry settings (which
registries it treats as insecure), ``docker save`` and ``docker load`` (offline bundles), and the credentials
``docker login`` stored (``config.json``, credential helpers), which envkit reads through docker-py as the engine's
CLI does. A refused call is an ``EngineCallError`` (the engine's words and HTTP status), an absent image an
``ImageMissing``: the registry code above judges them (retry, refusal, TLS) without knowing docker-py."""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Protocol

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


def untag(client: docker.DockerClient, ref: str) -> None:
    """Remove the tag ``ref``, unforced: its image goes with its last tag unless another image is built on it (a
    classic build's steps), whose layers stay while an image holds them."""
    try:
        client.api.remove_image(ref)
    except docker.errors.NotFound:
        pass
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


def save_stream(engine: ClientEngine, ref: str) -> Iterator[bytes]:
    """``docker save`` ``ref`` as a stream of chunks, never a file (``images.saved_layers`` keeps only the layers it
    wants; closing the stream early ends the save); an image the engine lacks is ``ImageMissing``."""
    try:
        yield from engine.client.api.get_image(ref, chunk_size=1 << 20)  # (the request is made at the first chunk)
    except docker.errors.NotFound:
        raise ImageMissing(f"the engine has no image {ref}") from None
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


def load_stream(engine: ClientEngine, write: Callable[[BinaryIO], None], what: str) -> list[str]:
    """``docker load`` an archive as ``write`` makes it, streamed through a pipe (never a file on disk): ``write``
    runs in a thread of its own; its error, when it fails, is the one raised (the engine then saw a cut archive)."""
    read_fd, write_fd = os.pipe()
    failed: list[BaseException] = []

    def produce() -> None:
        try:
            with open(write_fd, "wb") as fh:
                write(fh)
        except BaseException as exc:  # noqa: BLE001 - raised below, in the caller's thread
            failed.append(exc)

    producer = threading.Thread(target=produce, name="envkit-load", daemon=True)
    producer.start()
    try:
        with open(read_fd, "rb") as fh:  # closed however the load ends: a writer still writing gets EPIPE and stops
            # a generator of 1 MiB chunks, which requests sends chunked (the stubs name only bytes and files: a file
            # is sent line by line, and a 2 GB library holds no newline)
            loaded = engine.client.images.load(iter(lambda: fh.read(1 << 20), b""))  # type: ignore[arg-type]
    except docker.errors.APIError as exc:
        _reraise(producer, failed)
        raise engine_out_of_space(EngineError(f"cannot load {what}: {exc.explanation}"), engine) from None
    except docker.errors.ImageLoadError as exc:
        _reraise(producer, failed)
        raise engine_out_of_space(EngineError(f"cannot load {what}: {exc}"), engine) from None
    _reraise(producer, failed)
    return [str(image.id) for image in loaded]


def _reraise(producer: threading.Thread, failed: list[BaseException]) -> None:
    """The writer's own error, once it ended (a pipe the engine stopped reading is not one)."""
    producer.join()
    if failed and not isinstance(failed[0], BrokenPipeError):
        raise failed[0]


# Docker's graph drivers: their image store's `docker load` opens a layer's file only when the engine lacks that
# layer's chain (moby image/tarexport/load.go), so an archive may leave out the layers the engine has. The containerd
# image store (driver-type io.containerd.snapshotter.v1) and other engines (podman names its driver "overlay") want
# every file.
GRAPH_DRIVERS = frozenset({"overlay2", "vfs", "btrfs", "zfs", "fuse-overlayfs", "devicemapper", "aufs"})


def loads_known_layers(info: dict) -> bool:
    """Whether the engine `docker info` describes loads an archive that leaves out the layers it has."""
    status = dict(tuple(pair) for pair in info.get("DriverStatus") or () if len(pair) == 2)
    return info.get("Driver") in GRAPH_DRIVERS and "containerd" not in str(status.get("driver-type", ""))


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

