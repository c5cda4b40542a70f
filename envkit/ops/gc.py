"""`envkit gc`: give a build host its disk back from the envkit images no one needs any more.

Every lock change leaves the previous multi-GB image behind. The candidates are only the images
envkit built: the engine's top-level images that carry all four of envkit's build labels (team,
image, lock hash, context hash). No other image is ever looked at: not a base (``envkit-base/*``), not
an image without those labels (another tool's, a test fixture's), not the classic builder's step
images (never top-level while used, and the build labels are only on a build's last image). BuildKit's
build cache only when asked (below).

Per (team, image name), by the image's Created time, an image is kept when it is:

* one of the ``keep`` newest builds (default 2);
* the newest one whose newest certificate on some GPU model is ``certified`` (per model: researchers
  may still run it; the gate of ``envkit run`` asks exactly that);
* the image a ``:certified`` reference points at, as the store's pushes say (the newest push of that
  reference), or one tagged ``...:certified`` here (what the nightly promoted from this host);
* used by a container, running or stopped (the engine would refuse it anyway: it is never forced);
* the parent of another image (something was built ``FROM`` it; the engine would refuse it too).

The rest is removed: every tag and digest reference untagged, which removes the image and the step
images only it used, as ``docker rmi`` does (steps shared with any other image stay, so rebuilds keep
their cache). Without ``--team`` that is across every envkit team on the host.

**Stage images.** A classic multi-stage build also leaves the last image of each stage nothing is built
``FROM`` (``extras``; devel: ``nvcc``, ``nvcc-tools``) as an untagged top-level image: the builder's
cache, holding the lock's venv (GBs). Those stages end with a label (``labels.STAGE_LABEL``, with the
team, image and lock hash; ``templates/Dockerfile.base.j2``'s ``stage_end``), so gc knows whose they are.
A stage image is kept while a build of its (team, image, lock hash) stays on the host after this run,
while it is younger than ``STAGE_GRACE`` (a build may be between that stage and its final image, or
have failed a moment ago), or while a container or an image uses it. The rest is removed with the step
images only it used; the engine keeps every step another image still uses (the framework layer that
several locks share). Stage images of builds by envkit before these labels carry none: gc cannot tell
them from anyone else's, so they stay.

**Leftover containers.** envkit labels every container it starts (``labels.CONTAINER_LABEL``: certify,
fetch-debs, run) and removes it when it ends; one still here, stopped, was left by an envkit that was
killed (SIGKILL, a lost runner) and would keep its image "used by a container" for ever. gc removes
those once they have been stopped for ``CONTAINER_GRACE`` (the envkit that ran one may still be reading
its output), before it decides on the images. A running container is never touched (a killed
``envkit run`` leaves its training job running), nor any container envkit did not start.

**Scratch directories.** A killed envkit also leaves its scratch directories under the temporary
directory (a build context, the build secrets' netrc, a payload, a debootstrap target with /proc maybe
still mounted in it): ``envkit-<kind>-<host>-<pid>-...`` (``support/scratch.py``). gc removes the ones made on
this host by this user whose process is gone, whatever ``--team`` says (they name no team), never
through a mount.

**BuildKit's build cache** (``--build-cache HOURS``, asked for; ``envkit nightly --gc`` asks when a BuildKit
build fills the disk). Removing a BuildKit build's image frees little: the cache's records hold the same
layers, the pip cache mounts and the contexts. After the images, gc prunes the records not used since the
cutoff, as the engine's own prune does (``docker builder prune --filter until=``): never a record a build
is using, one holding a layer of an image still here ("shared"), or BuildKit's internal and frontend ones.
The cache is the engine's, not a team's: ``--team`` does not narrow it. ``decide_build_cache`` is the
plan (what a dry run shows); what the engine deleted is what the report says was removed.

``decide``, ``decide_stages``, ``decide_containers`` and ``decide_build_cache`` are pure (tested on fake image
lists); the engine's side is
``engine/docker_gc.py``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping

from ..certify.gate import model_key
from ..engine.inventory import Candidate, ImageHost, Removal, StageImage
from ..errors import EnvkitError
from ..store.history import Store
from ..store.records import CertificateRecord
from ..support import scratch
from ..support.progress import Progress
from ..support.scratch import Leftover
from .gc_plan import (
    BUILD_CACHE_NOTE,
    DEFAULT_KEEP,
    UNLABELLED_STAGES_NOTE,
    CacheCutoff,
    CacheDecision,
    ContainerDecision,
    Decision,
    Protection,
    check_keep,
    check_team,
    decide,
    decide_build_cache,
    decide_containers,
    decide_stages,
)

# --- the store's side --------------------------------------------------------------------------

def store_protection(store: Store, ids: Iterable[str]) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(image id -> GPU models its newest certificate on is ``certified``, image id -> ``:certified``
    references whose newest push is that image), for ``ids`` (the candidates)."""
    ids = list(ids)
    certified = {}
    for image_id in ids:
        newest: dict[str, CertificateRecord] = {}
        for cert in store.certificates_for(image_id):  # oldest first: the last one per model wins
            newest[model_key(cert.gpu_model)] = cert
        models = tuple(sorted(c.gpu_model for c in newest.values() if c.status == "certified"))
        if models:
            certified[image_id] = models
    current: dict[str, tuple[str, str]] = {}  # ref -> (pushed_at, image id)
    for image_id in dict.fromkeys([*ids, *(row[0] for row in store.images())]):
        for push in store.pushes_for(image_id):
            if push.tag_kind == "certified" and (push.ref not in current or push.pushed_at >= current[push.ref][0]):
                current[push.ref] = (push.pushed_at, image_id)
    refs: dict[str, list[str]] = defaultdict(list)
    for ref, (_, image_id) in sorted(current.items()):
        refs[image_id].append(ref)
    return certified, {k: tuple(v) for k, v in refs.items()}


# --- the run -----------------------------------------------------------------------------------


@dataclass
class GcResult:
    team: str | None
    keep: int
    dry_run: bool
    store: str | None
    decisions: list[Decision]  # the builds
    stages: list[Decision] = field(default_factory=list)  # the labelled stage images
    removals: dict[str, Removal] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    layers: tuple[int, int] | None = None  # the engine's image layer bytes before and after the removals (measured)
    containers: list[ContainerDecision] = field(default_factory=list)  # the stopped containers envkit left
    container_removals: dict[str, str | None] = field(default_factory=dict)  # container id -> error (None: removed)
    scratch: list[Leftover] = field(default_factory=list)  # the scratch directories a killed envkit left
    scratch_removals: dict[str, str | None] = field(default_factory=dict)  # path -> error (None: removed)
    cache_cutoff: CacheCutoff | None = None  # the build cache was asked for (None: left alone)
    cache: list[CacheDecision] = field(default_factory=list)  # BuildKit's records, as read after the images went
    cache_pruned: tuple[tuple[str, ...], int] | None = None  # (record ids the engine deleted, bytes it freed)
    cache_error: str | None = None  # the engine would not list the cache, or refused the prune

    @property
    def cache_to_prune(self) -> list[CacheDecision]:
        return [d for d in self.cache if not d.keep]

    def cache_json(self) -> dict | None:
        if self.cache_cutoff is None:
            return None
        deleted, freed = self.cache_pruned or ((), 0)
        plan = self.cache_to_prune
        return {"unused_since": self.cache_cutoff.since.isoformat(), "since": self.cache_cutoff.what,
                "records": [d.to_json() for d in self.cache], "kept": sum(d.keep for d in self.cache),
                "would_prune": [d.record.id for d in plan] if self.dry_run else [],
                "would_free_bytes": sum(d.record.size for d in plan) if self.dry_run else 0,
                "pruned": list(deleted), "freed_bytes": freed, "error": self.cache_error}

    @property
    def removed_scratch(self) -> list[Leftover]:
        return [
            d for d in self.scratch if str(d.path) in self.scratch_removals and not self.scratch_removals[str(d.path)]
        ]

    @property
    def failed_scratch(self) -> list[Leftover]:
        return [d for d in self.scratch if self.scratch_removals.get(str(d.path))]

    @property
    def containers_to_remove(self) -> list[ContainerDecision]:
        return [d for d in self.containers if not d.keep]

    @property
    def removed_containers(self) -> list[ContainerDecision]:
        return [d for d in self.containers_to_remove
                if d.container.id in self.container_removals and not self.container_removals[d.container.id]]

    @property
    def failed_containers(self) -> list[ContainerDecision]:
        return [d for d in self.containers_to_remove if self.container_removals.get(d.container.id)]

    @property
    def to_remove(self) -> list[Decision]:
        """Builds first, then stage images (in the order they are removed)."""
        return [d for d in (*self.decisions, *self.stages) if not d.keep]

    @property
    def removed(self) -> list[Decision]:
        return [d for d in self.to_remove if d.image.id in self.removals and not self.removals[d.image.id].error
                and not self.removals[d.image.id].gone]

    @property
    def failed(self) -> list[Decision]:
        return [d for d in self.to_remove if d.image.id in self.removals and self.removals[d.image.id].error]

    def reclaimed(self) -> tuple[int, bool]:
        """(bytes, exact): the removed (dry run: to be removed) images' unique sizes; when the engine gave
        none for one of them, the sum of their whole sizes instead, an upper bound (exact False)."""
        done = self.to_remove if self.dry_run else self.removed
        if all(d.image.unique_size is not None for d in done):
            return sum(d.image.unique_size or 0 for d in done), True
        return sum(d.image.size for d in done), False

    def to_json(self) -> dict:
        reclaimed, exact = self.reclaimed()
        return {
            "team": self.team,
            "keep": self.keep,
            "dry_run": self.dry_run,
            "store": self.store,
            "images": [self._decision_json(d) for d in self.decisions],
            "stages": [self._decision_json(d) for d in self.stages],
            "kept": [d.image.id for d in (*self.decisions, *self.stages) if d.keep],
            "removed": [d.image.id for d in self.removed],
            "would_remove": [d.image.id for d in self.to_remove] if self.dry_run else [],
            "failed": [{"id": d.image.id, "error": self.removals[d.image.id].error} for d in self.failed],
            "containers": [
                dict(
                    d.to_json(),
                    **(
                        {
                            "removed": not self.container_removals[d.container.id],
                            "error": self.container_removals[d.container.id],
                        }
                        if d.container.id in self.container_removals
                        else {}
                    ),
                )
                for d in self.containers
            ],
            "removed_containers": [d.container.id for d in self.removed_containers],
            "would_remove_containers": [d.container.id for d in self.containers_to_remove] if self.dry_run else [],
            "failed_containers": [
                {"id": d.container.id, "error": self.container_removals[d.container.id]} for d in self.failed_containers
            ],
            "scratch": [
                dict(
                    d.to_json(),
                    **(
                        {"removed": not self.scratch_removals[str(d.path)], "error": self.scratch_removals[str(d.path)]}
                        if str(d.path) in self.scratch_removals
                        else {}
                    ),
                )
                for d in self.scratch
            ],
            "removed_scratch": [str(d.path) for d in self.removed_scratch],
            "would_remove_scratch": [str(d.path) for d in self.scratch] if self.dry_run else [],
            "failed_scratch": [
                {"path": str(d.path), "error": self.scratch_removals[str(d.path)]} for d in self.failed_scratch
            ],
            "reclaimed_bytes": reclaimed,
            "reclaimed_basis": "unique sizes"
            if exact
            else "upper bound (whole image sizes: the engine gave no unique sizes)",
            "engine_layers_bytes": (
                {"before": self.layers[0], "after": self.layers[1], "freed": self.layers[0] - self.layers[1]}
                if self.layers
                else None
            ),
            "build_cache": self.cache_json(),
            "notes": self.notes,
        }

    def _decision_json(self, d: Decision) -> dict:
        removal = self.removals.get(d.image.id)
        return dict(d.to_json(), **({"removal": _removal_json(removal)} if removal else {}))


def _removal_json(r: Removal) -> dict:
    return {"untagged": list(r.untagged), "deleted": list(r.deleted), "error": r.error}


def _remove_scratch(left: Iterable[Leftover], progress: Progress) -> dict[str, str | None]:
    """Remove the scratch directories killed envkits left: each path's error (None: removed)."""
    removals: dict[str, str | None] = {}
    for d in left:
        progress(f"removing {d.path} ({d.kind}), left by envkit process {d.pid}")
        try:
            scratch.remove(d.path)
            error = None
        except EnvkitError as exc:
            error = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
        removals[str(d.path)] = error
    return removals


def _store_protection(store_url: str | None, candidates: list[Candidate],
                      notes: list[str]) -> tuple[dict, dict, str | None]:
    """What the history store's certificates keep (``store_protection``) and where the store is; with no store,
    nothing, said in ``notes``."""
    store = Store.open_existing(store_url, must_exist=True)
    if store is None:
        notes.append("no history store here (--store, $ENVKIT_STORE or the default in this user's data directory): no "
                     "image is kept for a certificate or a :certified push; name the team's store to keep them")
        return {}, {}, None
    with store:
        certified, current = store_protection(store, [c.id for c in candidates])
        return certified, current, store.where


def _remove_images(host: ImageHost, result: GcResult, progress: Progress) -> None:
    """Remove the builds and stage images gc decided to remove, unless a container started using one meanwhile."""
    before = host.layers_size(fresh=False)
    for d in result.to_remove:
        using = host.containers().get(d.image.id)  # again: a container may have started since
        if using:
            result.removals[d.image.id] = Removal(
                error=f"a container started using it meanwhile: {', '.join(using)}"
            )
            continue
        progress(f"removing {d.image.name}" + ("" if isinstance(d.image, StageImage) else f" ({d.image.group})"))
        result.removals[d.image.id] = host.remove(d.image)
    after = host.layers_size(fresh=True)
    if before is not None and after is not None:
        result.layers = (before, after)


def collect_garbage(host: ImageHost, store_url: str | None, *, team: str | None = None, keep: int = DEFAULT_KEEP,
                    dry_run: bool = False, progress: Progress = lambda _: None,
                    now: datetime | None = None, scratch_root: Path | None = None,
                    needed: Mapping[str, str] | None = None, build_cache: CacheCutoff | None = None) -> GcResult:
    """Decide, and unless ``dry_run`` remove, the envkit images of ``team`` (None: every envkit team here):
    the stopped containers envkit left first, then builds, then the stage images no staying build has
    (``now``: the clock stage and container ages are read by). Before all that, the scratch directories
    killed envkits left in ``scratch_root`` (default: the temporary directory). ``needed``: image ids the
    caller keeps whatever their age, with the reason (``envkit nightly --gc``: the lock's current builds).
    ``build_cache``: then prune BuildKit's records not used since its cutoff (None: the cache is left alone)."""
    check_keep(keep)
    if team is not None:
        check_team(team)
    now = now or datetime.now(timezone.utc)
    left_dirs = scratch.leftovers(scratch_root)
    scratch_removals = {} if dry_run else _remove_scratch(left_dirs, progress)
    containers = decide_containers(host.leftover_containers(team), now)
    going = {d.container.id for d in containers if not d.keep}
    candidates = host.envkit_images(team)
    stages = host.stage_images(team)
    notes: list[str] = []
    certified, current, where = _store_protection(store_url, candidates, notes)
    # the containers this run removes keep no image (a dry run plans as if they were gone)
    protection = Protection(certified=certified, current_certified=current, containers=host.containers(skip=going),
                            children=host.children([i.id for i in (*candidates, *stages)]), caller=dict(needed or {}))
    decisions = decide(candidates, protection, keep)
    kept = [d.image for d in decisions if d.keep and isinstance(d.image, Candidate)]
    stage_decisions = decide_stages(stages, kept, protection, now)
    result = GcResult(team, keep, dry_run, where, decisions, stage_decisions, notes=notes, containers=containers,
                      scratch=left_dirs, scratch_removals=scratch_removals)
    if any(i.unique_size is None for i in (*candidates, *stages)):
        notes.append("the engine gave no unique size for some images: bytes reclaimed is an upper bound")
    if not dry_run:
        for d in result.containers_to_remove:
            progress(f"removing the stopped {d.container.role} container {d.container.name} of {d.container.image}")
            result.container_removals[d.container.id] = host.remove_container(d.container)
    if not dry_run and result.to_remove:
        _remove_images(host, result, progress)
    if build_cache is None:
        notes.append(BUILD_CACHE_NOTE)
    else:
        _prune_build_cache(host, result, build_cache, progress)
    notes.append(UNLABELLED_STAGES_NOTE)
    return result


def _prune_build_cache(host: ImageHost, result: GcResult, cutoff: CacheCutoff, progress: Progress) -> None:
    """Read the cache after the images went (their layers are no longer shared), plan, and prune by the cutoff."""
    result.cache_cutoff = cutoff
    try:
        records = host.build_cache()
    except EnvkitError as exc:  # the images' removal stands and is reported; the cache is left as it is
        result.cache_error = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
        return
    result.cache = decide_build_cache(records, cutoff.since, cutoff.what)
    if result.dry_run:
        if result.to_remove:
            result.notes.append("the build cache is read as it is now: records holding layers of the images this run "
                                "would remove are still shared, so the real run may prune more")
        return
    plan = result.cache_to_prune
    if not plan:
        return
    progress(f"pruning BuildKit's build cache: {len(plan)} record(s) not used since {cutoff.what}")
    try:
        result.cache_pruned = host.prune_build_cache(cutoff.since)
    except EnvkitError as exc:
        result.cache_error = f"{exc.message} ({exc.hint})" if exc.hint else exc.message
