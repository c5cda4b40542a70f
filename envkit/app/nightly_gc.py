"""`envkit nightly --gc`: the nightly's gc policy. `envkit gc --team TEAM --keep N` for the spec's team, never
removing the builds of the lock the nightly runs: once during the run when a build fills the engine's disk
(``reclaim``; with BuildKit also pruning the build cache records this run has not used), after the run (``after``:
the builds it made or kept; BuildKit's cache only with ``--build-cache HOURS``), and after a run that failed
(``after_failure``: the builds of the lock on disk). A gc's failure is reported (progress, and the JSON's
``gc.error``), never the nightly's exit code: the images are already judged."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EnvkitError
from ..lock import load_lock
from ..ops.gc import collect_garbage
from ..ops.gc_plan import CacheCutoff, unused_for
from ..render.files import image_tag
from ..support.progress import Progress, decimal_size
from .resolve import load, lock_path_for

if TYPE_CHECKING:
    from ..engine.protocol import Engine
    from .nightly import NightlyResult


@dataclass(frozen=True)
class NightlyGc:
    """The gc steps of one nightly run (``--gc``): ``cache_hours`` is ``--build-cache HOURS``, ``builder`` the
    run's ``--builder``; ``started``: when the run started (the reclaim prunes BuildKit's records unused since)."""

    engine: Engine
    spec: Path
    store_url: str | None
    keep: int
    cache_hours: int | None
    builder: str
    progress: Progress
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def reclaim(self, tags: list[str]) -> dict:
        """During the run, when a build filled the engine's disk (``run_nightly``'s ``reclaim``): keep ``tags``;
        with BuildKit, also prune the build cache this run has not used."""
        cutoff = CacheCutoff(self.started, "this nightly run started") if self.builder != "classic" else None
        return self.sweep(tags, cutoff)

    def after(self, result: NightlyResult) -> dict:
        """After the run: keep the builds it made or kept; the cache by age only with ``--build-cache``."""
        return self.sweep([r.tag for r in result.images if r.build in ("built", "skipped")], self._by_age())

    def after_failure(self) -> None:
        """After a run that failed: keep the builds of the lock on disk; never raises (the run's exit code stays)."""
        try:
            self.sweep(lock_tags(self.spec), self._by_age())
        except Exception as exc:  # noqa: BLE001 - the run's own exit code is the one to keep
            self.progress(f"gc for the nightly failed: {exc}")

    def _by_age(self) -> CacheCutoff | None:
        return None if self.cache_hours is None else unused_for(self.cache_hours)

    def sweep(self, tags: list[str], build_cache: CacheCutoff | None) -> dict:
        """`envkit gc --team TEAM --keep N`, never removing the images ``tags`` name; ``build_cache``: also prune
        BuildKit's records not used since that cutoff. The gc's JSON document, or ``{"error": ...}``."""
        try:
            team = load(self.spec)[0].team
            needed = {}
            for tag in tags:
                info = self.engine.inspect(tag)
                if info is not None:
                    needed[info.id] = f"the build of the lock this nightly ran ({tag})"
            swept = collect_garbage(self.engine.image_host(), self.store_url, team=team, keep=self.keep,
                                    needed=needed, progress=self.progress, build_cache=build_cache)
        except EnvkitError as exc:
            self.progress(f"gc for the nightly failed: {exc}")
            return {"error": exc.to_json()}
        reclaimed, exact = swept.reclaimed()
        self.progress(
            f"gc: removed {len(swept.removed)} image(s) of team {team}, {decimal_size(reclaimed)}"
            + ("" if exact else " at most")
            + (f"; {len(swept.failed)} could not be removed" if swept.failed else "")
        )
        cache = swept.cache_json()
        if cache is not None:
            self.progress(f"gc: the prune of BuildKit's build cache failed: {cache['error']}" if cache["error"] else
                          f"gc: pruned {len(cache['pruned'])} record(s) of BuildKit's build cache not used since "
                          f"{cache['since']}, {decimal_size(cache['freed_bytes'])}")
        return swept.to_json()


def lock_tags(spec: Path) -> list[str]:
    """The image tags of the spec's lock as it is on disk (none when there is no readable lock)."""
    try:
        lock = load_lock(lock_path_for(spec))
    except (EnvkitError, OSError):
        return []
    return [image_tag(lock.team, image) for image in lock.images]
