"""The engine's disk through one nightly run (``nightly --gc``: ``Disk``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..support.progress import Progress


@dataclass
class Disk:
    """The engine's disk through one run. The first build that fills it may be tried once more after
    ``reclaim`` (``nightly --gc``: gc for the team, given the tags it must keep; with BuildKit, also the build
    cache this run has not used) removed something;
    once it is full for good, no further build is tried: each would download gigabytes to fail the
    same way. Images already built are still certified and published."""

    reclaim: Callable[[list[str]], dict] | None = None
    reclaimed: dict | None = None  # reclaim's result: gc's JSON, or {"error": ...}
    full: str | None = None  # the image whose build found it full for good

    def try_reclaim(self, tags: list[str], progress: Progress) -> bool:
        """Reclaim once per run; True when something was removed (the build is worth trying again)."""
        if self.reclaim is None or self.reclaimed is not None:
            return False
        progress("the engine's disk is full: running gc for the team now, then building it again")
        self.reclaimed = self.reclaim(tags)
        cache = self.reclaimed.get("build_cache") or {}
        return bool(
            self.reclaimed.get("removed") or self.reclaimed.get("removed_containers") or cache.get("freed_bytes")
        )

    def said(self) -> str:
        """What the reclaim removed, for the image's notes."""
        cache = (self.reclaimed or {}).get("build_cache") or {}
        return (f"gc removed {len((self.reclaimed or {}).get('removed', []))} image(s)"
                + (f" and {len(cache['pruned'])} build cache record(s) ({cache['freed_bytes'] / 1e6:.0f} MB)"
                   if cache.get("pruned") else ""))
