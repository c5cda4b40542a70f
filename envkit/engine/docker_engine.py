"""The Engine protocol over docker-py (the classic builder, through the engine's API)."""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import docker
import docker.errors
import docker.types
import requests
import urllib3.exceptions

from ..errors import BuildError, CommandNotFoundError, EngineError
from ..index.login import netrc_not_text, netrc_path
from ..support.labels import CONTAINER_LABEL
from . import docker_registry
from .classic_log import ClassicLog
from .docker_gc import OverClient
from .docker_layers import LayersOverClient
from .protocol import BuildEvent, ImageInfo, RunOptions, RunResult
from .space import engine_out_of_space

_NOT_FOUND = re.compile(r'exec: "([^"]+)": (?:executable file not found|stat [^:]*: no such file or directory)')

# What a request (requests) or a raw event stream (urllib3) raises when the engine goes away mid-talk:
ENGINE_GONE = (requests.RequestException, urllib3.exceptions.HTTPError)
ENGINE_REFUSED = (docker.errors.DockerException,)  # docker-py's own errors: the engine refused, or docker-py did
GONE_HINT = ("is the engine still running (`docker info`; `make engine` starts it)? Its log says why it stopped; "
             "then run the command again (a rebuild reuses the steps that finished)")


def reason_of(exc: BaseException) -> str:
    return str(exc.args[0] if exc.args else exc)[:200]


def connect(base_url: str | None = None) -> "DockerEngine":
    """Connect to the engine named by DOCKER_HOST (or the default socket)."""
    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        cause = _cause(exc, UnicodeDecodeError)  # docker-py wraps it as it fetches the API version
        if isinstance(cause, UnicodeDecodeError):
            raise _netrc_not_text(cause) from None
        env = None if base_url else os.environ.get("DOCKER_HOST")
        where = base_url or (f"DOCKER_HOST {env!r}" if env else "the default socket, unix:///var/run/docker.sock")
        raise EngineError(
            f"no container engine is reachable at {where}: {exc}",
            hint="start one (on Debian as root: `make engine`, or apt-get install docker.io && dockerd &), "
                 + ("or fix or unset DOCKER_HOST" if env else "or set DOCKER_HOST"),
        ) from None
    except UnicodeDecodeError as exc:  # requests reads the netrc file for every request, the engine's too
        raise _netrc_not_text(exc) from None
    except ValueError as exc:  # docker-py parsing the address: tcp://[bad, a scheme it does not know
        address = base_url or os.environ.get("DOCKER_HOST", "")
        raise EngineError(f"DOCKER_HOST {address!r} is not an engine address: {exc}",
                          hint="e.g. unix:///var/run/docker.sock, tcp://HOST:2376 or ssh://USER@HOST; unset it for "
                               "the local engine") from None
    return DockerEngine(client)


def as_engine(client: object) -> "DockerEngine":
    """A ``DockerEngine`` for ``client``: itself, or a ``docker.DockerClient`` (or anything holding one as
    ``.client``) wrapped, so that callers and tests may pass either."""
    if isinstance(client, DockerEngine):
        return client
    if isinstance(client, docker.DockerClient):
        return DockerEngine(client)
    inner = getattr(client, "client", None)
    if isinstance(inner, docker.DockerClient):
        return DockerEngine(inner)
    raise TypeError(f"expected a docker.DockerClient or a DockerEngine, got {type(client).__name__}")


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``exc``'s chain of causes and contexts."""
    link: BaseException | None = exc
    while link is not None and not isinstance(link, kind):
        link = link.__cause__ or link.__context__
    return link


def _netrc_not_text(exc: UnicodeDecodeError) -> EngineError:
    error = netrc_not_text(netrc_path() or os.environ.get("NETRC") or "~/.netrc", exc)
    return EngineError(f"cannot talk to the engine: {error.message} ({error.location})",
                       hint=f"requests (under docker-py) reads it for every connection, even to the engine's socket; "
                            f"{error.hint}")


class DockerEngine(OverClient, LayersOverClient):  # __init__(client), image_host, disk_usage: docker_gc.py; layer_*
    def version(self) -> dict:
        """The engine's name (docker, or podman: its Docker-compatible API, which names itself in Components),
        version, API version, OS and architecture."""
        v = self.client.version()
        podman = any(c.get("Name") == "Podman Engine" for c in v.get("Components") or ())
        return {"engine": "podman" if podman else "docker", "version": v.get("Version"), "api": v.get("ApiVersion"),
                "os": v.get("Os"), "arch": v.get("Arch")}

    def nvidia_runtime(self) -> bool:
        info = self.client.info()
        return "nvidia" in (info.get("Runtimes") or {})

    def local(self) -> bool:
        """Whether the engine runs on this host (its unix socket), so a directory here can be bind-mounted."""
        return str(self.client.api.base_url) == "http+docker://localhost"

    def data_root(self) -> str | None:
        """Where the engine keeps images and build layers (a path on the engine's host)."""
        return self.client.info().get("DockerRootDir")

    # --- images -------------------------------------------------------------------
    def _info(self, image: Any) -> ImageInfo:
        attrs = image.attrs
        cfg = attrs.get("Config") or {}
        env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
        return ImageInfo(id=image.id, tags=tuple(image.tags), size=int(attrs.get("Size", 0)),
                         labels=dict(cfg.get("Labels") or {}), env=env, user=cfg.get("User") or "",
                         repo_digests=tuple(attrs.get("RepoDigests") or ()),
                         layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()))

    def inspect(self, ref: str) -> ImageInfo | None:
        try:
            return self._info(self.client.images.get(ref))
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot inspect {ref}: {exc.explanation}") from None

    def find_image(self, labels: dict[str, str]) -> ImageInfo | None:
        return next(self.find_images(labels), None)

    def find_images(self, labels: dict[str, str]) -> Iterator[ImageInfo]:
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        try:
            summaries = self.client.api.images(filters=filters)  # one call: `images.list` inspects each one it
        except docker.errors.APIError as exc:                     # lists, and fails on one removed meanwhile
            raise EngineError(f"cannot list images: {exc.explanation}") from None
        for summary in summaries:
            info = self.inspect(summary["Id"])  # None: removed since the listing (gc, another build)
            if info is not None:
                yield info

    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        self.client.images.get(image_id).tag(repo, tag)

    # --- registries and image archives (docker_registry) -----------------------------
    def tag_image(self, ref: str, repository: str, tag: str) -> None:
        docker_registry.tag_image(self.client, ref, repository, tag)

    def untag(self, ref: str) -> None:
        docker_registry.untag(self.client, ref)

    def push(self, repository: str, tag: str, auth_config: dict | None) -> Iterator[dict]:
        return docker_registry.push(self.client, repository, tag, auth_config)

    def pull(self, repository: str, tag: str, auth_config: dict | None) -> Iterator[dict]:
        return docker_registry.pull(self.client, repository, tag, auth_config)

    def registry_config(self) -> dict:
        return docker_registry.registry_config(self.client)

    def save(self, ref: str, path: Path) -> None:
        docker_registry.save(self, ref, path)

    def save_stream(self, ref: str) -> Iterator[bytes]:
        return docker_registry.save_stream(self, ref)

    def load(self, path: Path) -> list[str]:
        return docker_registry.load(self, path)

    def load_stream(self, write: Callable[[BinaryIO], None], what: str) -> list[str]:
        return docker_registry.load_stream(self, write, what)

    def loads_known_layers(self) -> bool:
        return docker_registry.loads_known_layers(self.client.info())

    def build(self, context: Path, tag: str, labels: dict[str, str], *, dockerfile: str = "Dockerfile",
              network: bool = True, no_cache: bool = False, build_args: dict[str, str] | None = None,
              target: str | None = None) -> Iterator[BuildEvent]:
        """Build with the classic builder (the stage ``target``, else the last), yielding progress; raises BuildError.

        ``network=False`` cuts RUN steps off the network (offline bundle builds). Stopped early (an interruption, or
        the consumer closing the generator), it kills the container of the RUN step under way, so the build fails
        there and ``forcerm`` removes the container. The engine usually cancels a classic build whose client went
        away, but not always: once here (Docker 20.10.24) a killed client's RUN step ran on and the engine tagged it."""
        api = self.client.api
        log = ClassicLog()
        image_id = None
        try:
            stream = api.build(path=str(context), tag=tag, labels=labels, rm=True, forcerm=True,
                               decode=True, pull=False, dockerfile=dockerfile, nocache=no_cache,
                               network_mode=None if network else "none", buildargs=build_args or None,
                               target=target)
            for chunk in stream:
                if "error" in chunk:
                    detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                    raise engine_out_of_space(BuildError(f"building {tag} failed: {detail.strip()}",
                                                         hint="last output:\n    " + log.tail()), self)
                if "aux" in chunk and "ID" in chunk["aux"]:
                    image_id = chunk["aux"]["ID"]
                yield from log.events(chunk.get("stream") or chunk.get("status") or "")
            yield from log.flush()
        except docker.errors.APIError as exc:
            raise engine_out_of_space(BuildError(f"building {tag} failed: {exc.explanation}"), self) from None
        except BuildError:
            raise
        except ENGINE_GONE as exc:  # the stream broke: the engine stopped or restarted mid-build
            raise BuildError(f"building {tag} failed: the engine stopped answering ({reason_of(exc)})",
                             hint=f"{GONE_HINT}\n  last output:\n    " + log.tail()) from None
        except BaseException:  # an interruption, or the consumer closing the generator (GeneratorExit)
            if log.running:
                self._stop_step(log.running)
            raise
        yield BuildEvent("done", image_id or tag)

    @staticmethod
    def _remove(container: Any) -> None:
        try:
            container.remove(force=True)
        except (docker.errors.APIError, *ENGINE_GONE):
            pass  # gone already, or the engine is (`envkit gc` removes what its label marks)

    def _stop_step(self, container: str) -> None:
        try:
            self.client.api.kill(container)
        except (docker.errors.APIError, *ENGINE_GONE):
            pass  # the step ended meanwhile, or the engine is gone (and the step with it)

    def import_rootfs(self, tarball: Path, ref: str, labels: dict[str, str]) -> ImageInfo:
        repo, _, tag = ref.rpartition(":")
        changes = [f"LABEL {k}={json.dumps(v)}" for k, v in labels.items()]
        try:
            with open(tarball, "rb") as fh:
                self.client.api.import_image_from_data(fh, repository=repo, tag=tag, changes=changes)
        except docker.errors.APIError as exc:
            raise engine_out_of_space(
                EngineError(f"cannot import {tarball} as {ref}: {exc.explanation}"), self
            ) from None
        info = self.inspect(ref)
        if info is None:
            raise EngineError(f"imported {ref} but the engine does not list it")
        return info

    # --- containers ---------------------------------------------------------------
    def _create(self, ref: str, command: list[str], options: RunOptions) -> Any:
        """The job's container, created, not started."""
        kwargs: dict = dict(
            image=ref, command=command, shm_size=options.shm_size, labels={CONTAINER_LABEL: options.role},
            environment=options.env, network_disabled=not options.network,
            ulimits=[docker.types.Ulimit(name=k, soft=v, hard=v) for k, v in options.ulimits.items()],
            volumes={m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in options.mounts},
            # -i: stdin open; docker-py sets StdinOnce only when not detached, so the engine closes the job's
            # stdin when the attached one ends (a job reading it sees end-of-file, as with `docker run -i`)
            detach=options.stdin is None, stdin_open=options.stdin is not None, tty=options.tty is not None,
        )
        if options.user:
            kwargs["user"] = options.user
        if options.gpus:
            kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        return self.client.containers.create(**kwargs)

    def run(self, ref: str, command: list[str], options: RunOptions) -> RunResult:
        container = frames = stdin = None
        try:  # create, then start: a container that cannot start (no GPU runtime, no network) is removed
            container = self._create(ref, command, options)
            # streamed: attached before it starts, so no output is lost (attach's own request is sent here)
            frames = (container.attach(stdout=True, stderr=True, stream=True, demux=True)
                      if options.output is not None else None)
            if options.stdin is not None:
                stdin = self.client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
            container.start()
        except docker.errors.APIError as exc:
            _close(frames)
            _close(stdin)
            if container is not None:
                self._remove(container)
            missing = _NOT_FOUND.search(str(exc.explanation or ""))
            if missing:  # the image lacks the program: the image's fault, not the engine's
                raise CommandNotFoundError(f"{ref} has no {missing.group(1)!r} to run ({exc.explanation})",
                                           command=missing.group(1)) from None
            hint = "for GPUs the NVIDIA Container Toolkit must be installed" if options.gpus else None
            raise EngineError(f"cannot start {ref}: {exc.explanation}", hint=hint) from None
        if options.tty is not None:  # the terminal's size, so full-screen programs and line wrapping fit the window
            ended = threading.Event()
            threading.Thread(target=_follow_size, args=(container, options.tty, ended), name="envkit-tty-size",
                             daemon=True).start()
            try:
                return self._wait(container, frames, stdin, options)
            finally:
                ended.set()
        return self._wait(container, frames, stdin, options)

    def _wait(self, container: Any, frames: Any, stdin: Any, options: RunOptions) -> RunResult:
        """Feed stdin, then stream or collect the started job's output until it ends or times out."""
        if stdin is not None:
            threading.Thread(target=_feed, args=(options.stdin, stdin), name="envkit-stdin", daemon=True).start()
        if frames is not None:
            return self._stream(container, frames, options)
        timed_out = False
        try:
            try:
                status = container.wait(timeout=options.timeout)
                code = int(status.get("StatusCode", 1))
            except requests.exceptions.ConnectionError:
                timed_out, code = True, 124
                container.kill()
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        finally:
            container.remove(force=True)
        return RunResult(code, stdout, stderr, timed_out)

    def _stream(self, container: Any, frames: Any, options: RunOptions) -> RunResult:
        """Pass the container's output to ``options.output`` as it comes (stdout and stderr apart, in order); a
        watchdog kills it after ``options.timeout`` seconds (exit 124, ``timed_out``). Interrupted, the container
        is removed all the same."""
        timed_out = threading.Event()

        def expire() -> None:
            try:
                container.kill()
                timed_out.set()  # only once killed: a job that ended on its own as the timer fired kept its status
            except (docker.errors.APIError, *ENGINE_GONE):
                pass  # it ended meanwhile

        watchdog = threading.Timer(options.timeout, expire)
        watchdog.daemon = True
        watchdog.start()
        output = options.output or (lambda _chunk, _is_err: None)
        try:
            for out, err in frames:
                if out:
                    output(out, False)
                if err:
                    output(err, True)
            code = int(container.wait().get("StatusCode", 1))
        finally:
            watchdog.cancel()
            _close(frames)
            self._remove(container)
        if timed_out.is_set():
            return RunResult(124, "", "", True)
        return RunResult(code, "", "", False)


def _follow_size(container: Any, size: Any, ended: threading.Event, every: float = 0.5) -> None:
    """Keep the job's pseudo-terminal at ``size()`` until ``ended``: set at once, then again whenever it changes."""
    last = None
    while not ended.is_set():
        try:
            now = size()
            if now != last:
                container.resize(height=now[0], width=now[1])
                last = now
        except (docker.errors.APIError, *ENGINE_GONE, OSError, ValueError):
            pass  # not running yet or any more, or no terminal to ask: tried again at the next tick
        ended.wait(every)


def _feed(source: Any, sock: Any) -> None:
    """Copy ``source`` to the job's attached stdin until its end, then close the connection: with StdinOnce the
    engine then closes the job's stdin, so a job reading it sees end-of-file. A job that ended first (its stdin
    gone) stops the copy; a source that never ends (a terminal nobody types into) leaves this daemon thread
    waiting until envkit exits."""
    raw = getattr(sock, "_sock", sock)  # the hijacked HTTP connection's socket
    try:
        try:  # a file's descriptor, unbuffered: a buffered reader's lock held by this daemon thread would stop
            fd = source.fileno()  # the interpreter at exit ("could not acquire lock ... at interpreter shutdown")
            read = functools.partial(os.read, fd)
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
            read = getattr(source, "read1", source.read)
        while chunk := read(65536):
            raw.sendall(chunk)
        raw.shutdown(socket.SHUT_WR)
    except (OSError, ValueError):
        pass  # the job or the engine closed it, or the source was closed
    finally:
        _close(sock)


def _close(frames: Any) -> None:
    """Close an attach stream (its socket), if there is one; one already closed or broken is left as it is."""
    close = getattr(frames, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - closing a socket the engine may have closed first
            pass
