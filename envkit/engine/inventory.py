"""What the engine holds that `envkit gc` decides about, as the engine lists it: envkit's builds (top-level images with
all four build labels), the classic builder's labelled stage images, the stopped containers envkit left, BuildKit's
cache records, and what a removal did; `ImageHost`: the engine as gc needs it (`docker_gc.DockerImageHost`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Iterable, Mapping, Protocol

from ..support.labels import CONTEXT_LABEL, IMAGE_LABEL, LOCK_LABEL, PREFIX, STAGE_LABEL, TEAM_LABEL

OFFLINE_LABEL = PREFIX + "build"  # "offline" on images built from a bundle (templates/Dockerfile.base.j2)
IDENTITY = (TEAM_LABEL, IMAGE_LABEL, LOCK_LABEL, CONTEXT_LABEL)  # all four, or the image is not a candidate
BASE_REPO = "envkit-base/"
STAGE_IDENTITY = (STAGE_LABEL, TEAM_LABEL, IMAGE_LABEL, LOCK_LABEL)


@dataclass(frozen=True)
class EngineImage:
    """A top-level image as the engine describes it, labelled with the team and image it belongs to."""

    id: str
    tags: tuple[str, ...]
    digests: tuple[str, ...]  # repo@sha256 references (pushed or pulled)
    labels: Mapping[str, str]
    created: datetime
    size: int
    unique_size: int | None = None  # size minus the layers other images share; None when the engine does not say

    @property
    def team(self) -> str:
        return self.labels[TEAM_LABEL]

    @property
    def image(self) -> str:
        return self.labels[IMAGE_LABEL]

    @property
    def lock_hash(self) -> str:
        return self.labels[LOCK_LABEL]

    @property
    def group(self) -> str:
        return f"{self.team}/{self.image}"

    def to_json(self) -> dict:
        return {"id": self.id, "team": self.team, "image": self.image, "tags": list(self.tags),
                "created": self.created.isoformat(), "size": self.size, "unique_size": self.unique_size,
                "lock_hash": self.lock_hash}


class Candidate(EngineImage):
    """One top-level image carrying envkit's build labels: a build."""

    @property
    def name(self) -> str:
        return self.tags[0] if self.tags else f"{self.id[:19]} (untagged)"

    def to_json(self) -> dict:
        return {**super().to_json(), "digests": list(self.digests),
                "offline": self.labels.get(OFFLINE_LABEL) == "offline"}


def is_candidate(labels: Mapping[str, str] | None, tags: Iterable[str]) -> bool:
    """Built by envkit (all four build labels set) and not a base image."""
    labels = labels or {}
    return all(labels.get(k) for k in IDENTITY) and not any(t.startswith(BASE_REPO) for t in tags)


class StageImage(EngineImage):
    """The last image of a build stage nothing is built FROM (the classic builder's cache), labelled
    with the stage and its build's team, image and lock hash; untagged, unless someone tagged it."""

    @property
    def stage(self) -> str:
        return self.labels[STAGE_LABEL]

    @property
    def name(self) -> str:
        return f"{self.id[:19]} (stage {self.stage} of {self.group})"

    def to_json(self) -> dict:
        return {**super().to_json(), "stage": self.stage}


def is_stage(labels: Mapping[str, str] | None) -> bool:
    """A stage image envkit labelled (stage, team, image, lock hash) that is not also a final build."""
    labels = labels or {}
    return all(labels.get(k) for k in STAGE_IDENTITY) and not labels.get(CONTEXT_LABEL)


@dataclass(frozen=True)
class LeftContainer:
    """A stopped container envkit started (``labels.CONTAINER_LABEL``): left by an envkit that was killed."""

    id: str
    name: str
    role: str  # certify, fetch-debs, run
    state: str  # created, exited or dead: never running, paused or restarting
    image: str  # the reference it was started from
    image_id: str
    ended: datetime  # when it stopped (one never started: when it was created)
    team: str | None = None  # its image's team label (a container carries its image's labels)

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "role": self.role, "state": self.state, "image": self.image,
                "image_id": self.image_id, "ended": self.ended.isoformat(), "team": self.team}


@dataclass(frozen=True)
class CacheRecord:
    """One record of BuildKit's build cache, as the engine lists it (`docker system df -v`)."""

    id: str
    kind: str  # regular (a layer), exec.cachemount (a RUN --mount=type=cache), source.local (a context), ...
    description: str
    size: int
    in_use: bool  # a build holds it now
    shared: bool  # its layer is also an image's: pruning it frees nothing while that image is here
    last_used: datetime | None  # None: never used since it was made

    def to_json(self) -> dict:
        return {"id": self.id, "type": self.kind, "description": self.description, "size": self.size,
                "in_use": self.in_use, "shared": self.shared,
                "last_used": self.last_used.isoformat() if self.last_used else None}


@dataclass(frozen=True)
class Removal:
    untagged: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()  # image ids the engine deleted (the image and the step images only it used)
    error: str | None = None
    gone: bool = False  # the engine no longer had it (another gc removed it meanwhile): not ours to count


class ImageHost(Protocol):
    """The engine as gc needs it (``engine/docker_gc.DockerImageHost``)."""

    def envkit_images(self, team: str | None) -> list[Candidate]: ...
    def stage_images(self, team: str | None) -> list[StageImage]: ...
    def containers(self, skip: Iterable[str] = ()) -> dict[str, tuple[str, ...]]: ...  # image id -> "name (state)"
    def leftover_containers(self, team: str | None) -> list[LeftContainer]: ...
    def children(self, ids: Iterable[str]) -> dict[str, int]: ...
    def remove(self, image: Candidate | StageImage) -> Removal: ...
    def remove_container(self, container: LeftContainer) -> str | None: ...  # the engine's error, if any
    def layers_size(self, fresh: bool = True) -> int | None: ...  # every image layer's bytes (`docker system df`)
    def build_cache(self) -> list[CacheRecord]: ...  # read now (shared flags change as images go)
    def prune_build_cache(self, unused_since: datetime) -> tuple[tuple[str, ...], int]: ...  # (ids deleted, bytes)
