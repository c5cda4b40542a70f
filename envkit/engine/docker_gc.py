"""The engine's side of ``envkit gc`` over docker-py: list envkit's images, who uses them, remove one;
read and prune BuildKit's build cache.

Candidates come from the top-level images only (``docker images``, not ``-a``), filtered by the engine
on envkit's build labels, so the classic builder's step images are never among them (all images are
read only to count the images built on a candidate). Stage images likewise: top-level images with
envkit's stage label (the last image of a stage nothing is built FROM has no child).
Containers: the stopped ones envkit started (its container label; state created, exited or dead) are
listed for gc to remove, unforced, with their anonymous volumes. Removal of an image is never forced:
every tag and digest reference is untagged, and the engine deletes the
image (with the step images no other image uses) when the last one goes, as ``docker rmi`` does.
The build cache's records come from ``docker system df -v``; the prune is the engine's own (``POST
/build/prune`` with an ``until`` filter, never ``all``), so it decides, by the rule gc's plan mirrors.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

import docker.errors

from ..errors import EngineError
from ..support.labels import CONTAINER_LABEL, CONTEXT_LABEL, IMAGE_LABEL, LOCK_LABEL, STAGE_LABEL, TEAM_LABEL
from .docker_df import read_df
from .inventory import CacheRecord, Candidate, LeftContainer, Removal, StageImage, is_candidate, is_stage

_NONE = ("<none>:<none>", "<none>@<none>")
STOPPED = ("created", "exited", "dead")


_CREATED = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def parse_created(text: str) -> datetime:
    """The engine's RFC 3339 time with nanoseconds ("2026-12-03T10:05:42.563498639Z") as an aware UTC datetime."""
    m = _CREATED.fullmatch(text.strip())
    if not m:
        raise EngineError(f"the engine gave an image creation time envkit cannot read: {text!r}",
                          hint="expected RFC 3339, e.g. 2026-12-03T10:05:42.563498639Z")
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    when = datetime.fromisoformat(f"{m.group(1)}.{(m.group(2) or '0')[:6].ljust(6, '0')}{zone}")
    return when.astimezone(timezone.utc)


class OverClient:
    """What holds a docker-py client (``DockerEngine``'s base): ``Engine.image_host``, the gc side over it, and
    ``Engine.disk_usage``."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def image_host(self) -> "DockerImageHost":
        return DockerImageHost(self.client)

    def disk_usage(self) -> dict:
        """Where the engine keeps its data, and what its images and BuildKit's cache take (bytes)."""
        df = read_df(self.client)
        return {"root": self.client.info().get("DockerRootDir"), "images_bytes": int(df.get("LayersSize") or 0),
                "build_cache_bytes": sum(int(e.get("Size") or 0) for e in df.get("BuildCache") or []
                                         if not e.get("Shared"))}


class DockerImageHost:
    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self._usage: dict | None = None

    def _api(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot {what}: {exc.explanation}",
                              hint="is the engine healthy? (`docker info`); nothing was removed by this step") from None

    def _inspect(self, what: str, call: Callable[[], dict]) -> dict | None:
        """``call()``'s answer, or None when the object was removed meanwhile."""
        try:
            return call()
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot inspect {what}: {exc.explanation}") from None

    def _df(self, fresh: bool) -> dict:
        """The engine's `docker system df -v`: read now, or (not ``fresh``) the last one read, if any."""
        if fresh or self._usage is None:
            try:
                self._usage = read_df(self.client)
            except docker.errors.APIError:
                self._usage = {}
        return self._usage

    def _unique_sizes(self) -> dict[str, int]:
        """Image id -> size minus the layers other top-level images share (the engine's `docker system df -v`)."""
        return {i["Id"]: int(i["Size"]) - int(i["SharedSize"]) for i in self._df(fresh=True).get("Images") or []
                if isinstance(i.get("SharedSize"), int) and i["SharedSize"] >= 0}

    def _top_level(self, kind: Any, labels: list[str], team: str | None, accept: Callable[[Any, Any], bool]) -> list:
        """The top-level images with all of ``labels`` (and ``team``'s) that ``accept(labels, tags)`` takes,
        each as a ``kind`` (Candidate or StageImage)."""
        wanted = [f"{TEAM_LABEL}={team}" if team else TEAM_LABEL, *labels]
        summaries = self._api("list images", lambda: self.client.api.images(filters={"label": wanted}))
        unique = self._unique_sizes() if summaries else {}
        out = []
        for s in summaries:
            tags = tuple(t for t in s.get("RepoTags") or () if t not in _NONE)
            found = dict(s.get("Labels") or {})
            if not accept(found, tags) or (team and found.get(TEAM_LABEL) != team):
                continue
            attrs = self._inspect(f"image {s['Id'][:19]}", lambda: self.client.api.inspect_image(s["Id"]))
            if attrs is None:
                continue
            digests = tuple(d for d in attrs.get("RepoDigests") or () if d not in _NONE)
            out.append(kind(id=s["Id"], tags=tags, digests=digests, labels=found,
                            created=parse_created(attrs["Created"]), size=int(attrs.get("Size") or s["Size"]),
                            unique_size=unique.get(s["Id"])))
        return out

    def envkit_images(self, team: str | None) -> list[Candidate]:
        return self._top_level(Candidate, [IMAGE_LABEL, LOCK_LABEL, CONTEXT_LABEL], team, is_candidate)

    def stage_images(self, team: str | None) -> list[StageImage]:
        return self._top_level(StageImage, [STAGE_LABEL, IMAGE_LABEL, LOCK_LABEL], team,
                               lambda labels, _tags: is_stage(labels))

    def layers_size(self, fresh: bool = True) -> int | None:
        """The bytes of every image layer the engine holds (`docker system df`'s Images SIZE), or None;
        not ``fresh``: as the last listing read them (gc's "before", without another slow `df`)."""
        size = self._df(fresh).get("LayersSize")
        return int(size) if isinstance(size, int) else None

    def build_cache(self) -> list[CacheRecord]:
        """BuildKit's build cache records, read now (an engine without BuildKit has none)."""
        self._usage = self._api("read the engine's disk usage", lambda: read_df(self.client))
        return [CacheRecord(id=r["ID"], kind=r.get("Type") or "regular", description=r.get("Description") or "",
                            size=int(r.get("Size") or 0), in_use=bool(r.get("InUse")), shared=bool(r.get("Shared")),
                            last_used=parse_created(r["LastUsedAt"]) if r.get("LastUsedAt") else None)
                for r in self._usage.get("BuildCache") or []]

    def prune_build_cache(self, unused_since: datetime) -> tuple[tuple[str, ...], int]:
        """The engine prunes the records not used since ``unused_since``; (ids it deleted, bytes it freed). Its
        ``until`` is a duration back from its own now: in milliseconds, rounded up (whole seconds kept records
        used up to a second before the instant: an earlier build just before a nightly started)."""
        back = max(0, math.ceil((datetime.now(timezone.utc) - unused_since).total_seconds() * 1000))
        answer = self._api("prune BuildKit's build cache",
                           lambda: self.client.api.prune_builds(filters={"until": f"{back}ms"})) or {}
        return tuple(answer.get("CachesDeleted") or ()), int(answer.get("SpaceReclaimed") or 0)

    def containers(self, skip: Iterable[str] = ()) -> dict[str, tuple[str, ...]]:
        """Image id -> the containers (all, stopped too) using it, as "name (state)"; but not those in ``skip``."""
        skip = set(skip)
        rows = self._api("list containers", lambda: self.client.api.containers(all=True))
        using: dict[str, list[str]] = {}
        for r in rows:
            if r["Id"] in skip:
                continue
            name = ((r.get("Names") or [r["Id"][:12]])[0]).lstrip("/")
            using.setdefault(r.get("ImageID") or "", []).append(f"{name} ({r.get('State') or 'unknown'})")
        return {k: tuple(v) for k, v in using.items() if k}

    def leftover_containers(self, team: str | None) -> list[LeftContainer]:
        """The stopped containers envkit started (of ``team``'s images; None: all of them)."""
        rows = self._api("list containers",
                         lambda: self.client.api.containers(all=True, filters={"label": CONTAINER_LABEL}))
        out = []
        for r in rows:
            labels = r.get("Labels") or {}
            if r.get("State") not in STOPPED or (team and labels.get(TEAM_LABEL) != team):
                continue
            attrs = self._inspect(f"container {r['Id'][:12]}", lambda: self.client.api.inspect_container(r["Id"]))
            if attrs is None:
                continue
            finished = (attrs.get("State") or {}).get("FinishedAt") or ""
            never_ran = not finished or finished.startswith("0001-")  # the engine's zero time
            out.append(LeftContainer(
                id=r["Id"], name=((r.get("Names") or [r["Id"][:12]])[0]).lstrip("/"), role=labels[CONTAINER_LABEL],
                state=r["State"], image=r.get("Image") or "", image_id=r.get("ImageID") or "",
                ended=parse_created(attrs["Created"] if never_ran else finished), team=labels.get(TEAM_LABEL)))
        return out

    def remove_container(self, container: LeftContainer) -> str | None:
        try:
            self.client.api.remove_container(container.id, v=True, force=False)
        except docker.errors.NotFound:
            return None  # gone meanwhile: what gc wanted
        except docker.errors.APIError as exc:
            return str(exc.explanation or exc)
        return None

    def children(self, ids: Iterable[str]) -> dict[str, int]:
        ids = set(ids)
        if not ids:
            return {}
        counts: dict[str, int] = {}
        for s in self._api("list images", lambda: self.client.api.images(all=True)):
            parent = s.get("ParentId") or ""
            if parent in ids:
                counts[parent] = counts.get(parent, 0) + 1
        return counts

    def remove(self, image: Candidate | StageImage) -> Removal:
        api = self.client.api
        untagged: list[str] = []
        deleted: list[str] = []

        def record(answer: dict) -> None:
            for item in answer or ():
                untagged.extend([item["Untagged"]] if "Untagged" in item else [])
                deleted.extend([item["Deleted"]] if "Deleted" in item else [])

        found = False  # any of it still here: otherwise another gc removed it meanwhile, and it is not ours to count
        try:
            for ref in (*image.tags, *image.digests):
                try:
                    record(api.remove_image(ref, force=False, noprune=False))
                    found = True
                except docker.errors.ImageNotFound:
                    continue
            if image.id not in deleted:
                try:
                    record(api.remove_image(image.id, force=False, noprune=False))
                    found = True
                except docker.errors.ImageNotFound:
                    pass
        except docker.errors.APIError as exc:
            return Removal(tuple(untagged), tuple(deleted), error=str(exc.explanation or exc))
        return Removal(tuple(untagged), tuple(deleted), gone=not found)
