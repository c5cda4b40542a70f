"""A small engine interface: build, inspect, run, import, tag, push, pull, save, load.

Docker types stay inside the adapter (``docker_engine``, ``docker_registry``, ``docker_gc``: the only
modules that import docker-py); the rest of envkit sees these value objects, a stream of ``BuildEvent``s, the
engine's push and pull progress records (the Engine API's JSON objects: ``status``, ``error``, ``aux``), and
``EngineCallError`` for a call the engine refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Protocol

from ..errors import EngineError
from .inventory import ImageHost


class EngineCallError(EngineError):
    """The engine refused a call: its own words (``explanation``) and the HTTP status it answered with."""

    def __init__(self, explanation: str, status_code: int | None = None):
        super().__init__(explanation)
        self.explanation = explanation
        self.status_code = status_code


class ImageMissing(EngineError):
    """The engine has no image by that reference."""


@dataclass(frozen=True)
class ImageInfo:
    id: str
    tags: tuple[str, ...]
    size: int
    labels: dict[str, str]
    env: dict[str, str]
    user: str
    repo_digests: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()  # RootFS.Layers: each layer's diff_id, lowest first


@dataclass(frozen=True)
class BuildEvent:
    kind: str  # "step" | "log" | "done" | "error"
    text: str
    step: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True


BUILDERS = ("classic", "buildkit")  # the engine's API (docker-py) | BuildKit through the docker CLI (buildkit.py)
# What a build may be asked for: "auto" (the default) is BuildKit where it can build here, else classic
# (``images.builder.require_builder`` decides).
AUTO = "auto"
BUILDER_CHOICES = (AUTO, *BUILDERS)
RUN_TIMEOUT = 24 * 3600  # envkit run's default limit for a job, seconds
# /dev/shm of a job (`envkit run --shm-size`'s default) and of certification, so a certificate's DataLoader and
# NCCL checks ran with the shared memory researchers' jobs get (PyTorch's workers and NCCL's SHM transport use it)
RUN_SHM_SIZE = "16g"
# On GPUs, for jobs and certification alike: NCCL wants unlimited locked memory and a large stack (64 MiB)
GPU_ULIMITS = {"memlock": -1, "stack": 64 * 2**20}


@dataclass(frozen=True)
class RunOptions:
    gpus: bool = False
    shm_size: str = "2g"
    timeout: int = 600
    mounts: tuple[Mount, ...] = ()
    network: bool = True
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    # NCCL wants unlimited locked memory and a large stack; set on GPU hosts (certify).
    ulimits: dict[str, int] = field(default_factory=dict)
    role: str = "run"  # the container's labels.CONTAINER_LABEL: certify, fetch-debs, run
    # Streamed output: each chunk as it comes, (bytes, is_stderr); RunResult then holds no output. None: collected.
    output: Callable[[bytes, bool], None] | None = field(default=None, compare=False)
    # The job's stdin (`docker run -i`): this binary stream's bytes until its end, which closes the job's stdin.
    # None: the job's stdin is closed from the start (a read gets end-of-file at once).
    stdin: BinaryIO | None = field(default=None, compare=False)
    # A pseudo-terminal for the job (`docker run -t`): its stdout and stderr are one stream, as on a terminal. The
    # callable gives its (rows, columns), asked at the start and twice a second while the job runs, so a resized
    # window reaches the job. None: no terminal.
    tty: Callable[[], tuple[int, int]] | None = field(default=None, compare=False)


class Engine(Protocol):
    def version(self) -> dict: ...
    def find_image(self, labels: dict[str, str]) -> ImageInfo | None: ...
    def find_images(self, labels: dict[str, str]) -> Iterator[ImageInfo]: ...
    def inspect(self, ref: str) -> ImageInfo | None: ...
    def build(self, context: Path, tag: str, labels: dict[str, str], *, dockerfile: str = "Dockerfile",
              network: bool = True, no_cache: bool = False,
              build_args: dict[str, str] | None = None, target: str | None = None) -> Iterator[BuildEvent]: ...
    def import_rootfs(self, tarball: Path, ref: str, labels: dict[str, str]) -> ImageInfo: ...
    def run(self, ref: str, command: list[str], options: RunOptions) -> RunResult: ...
    def nvidia_runtime(self) -> bool: ...
    def local(self) -> bool: ...  # on this host (a unix socket): a directory here can be bind-mounted
    def data_root(self) -> str | None: ...  # where images and build layers live, on the engine's host
    def disk_usage(self) -> dict: ...  # {"root", "images_bytes", "build_cache_bytes"}
    def tag(self, image_id: str, ref: str) -> None: ...
    def untag(self, ref: str) -> None: ...  # remove the tag ``ref`` (and its image, unless another needs it)
    # registries: the engine pushes and pulls (with the auth_config envkit resolved), yielding its progress records
    def tag_image(self, ref: str, repository: str, tag: str) -> None: ...  # ImageMissing, EngineCallError
    def push(self, repository: str, tag: str, auth_config: dict | None) -> Iterator[dict]: ...
    def pull(self, repository: str, tag: str, auth_config: dict | None) -> Iterator[dict]: ...
    def registry_config(self) -> dict: ...  # `docker info`'s RegistryConfig ({} when the engine cannot say)
    # image archives (offline bundles): `docker save` one image with its tag, `docker load` an archive
    def save(self, ref: str, path: Path) -> None: ...
    # `docker save` as a stream of chunks, no file (images.saved_layers); ImageMissing for an image it lacks
    def save_stream(self, ref: str) -> Iterator[bytes]: ...
    def load(self, path: Path) -> list[str]: ...  # the ids of the images loaded
    # an archive ``write`` makes, streamed into `docker load` (images.reproducible: no 5 GB file on disk); ``what``
    # names it in an error
    def load_stream(self, write: Callable[[BinaryIO], None], what: str) -> list[str]: ...
    # whether `docker load` takes a layer it already has (by chain id) without its file in the archive
    def loads_known_layers(self) -> bool: ...
    # a build's report of its layers (``support.layer_moves.built``): every layer chain of the engine's images, and
    # each layer's size unpacked (None: the engine cannot say which size is which layer's)
    def layer_chains(self) -> set[tuple[str, ...]]: ...
    def layer_sizes(self, ref: str) -> tuple[int, ...] | None: ...
    # what `envkit gc` and doctor ask of the engine: its images, containers and build cache (inventory.ImageHost)
    def image_host(self) -> ImageHost: ...
