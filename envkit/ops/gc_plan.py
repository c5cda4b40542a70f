"""gc's decisions, pure (tested on fake image lists): which builds, stage images, stopped containers and BuildKit
cache records stay, each with its reasons; the run that asks the engine and the store is `gc.collect_garbage`."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterable, Mapping

from ..catalog.perf import model_key
from ..engine.inventory import (
    IDENTITY,
    STAGE_IDENTITY,
    CacheRecord,
    Candidate,
    LeftContainer,
    StageImage,
    is_candidate,
    is_stage,
)
from ..errors import EnvkitError
from ..registry.remote_parse import CERTIFIED_TAG
from ..support.grammar import NAME_RE

DEFAULT_KEEP = 2
STAGE_GRACE = timedelta(hours=1)  # a stage image this young may belong to a build still running
CONTAINER_GRACE = timedelta(minutes=10)  # a container stopped this recently may still be read by its envkit


BUILD_CACHE_NOTE = ("BuildKit's build cache is left alone (`envkit gc --build-cache HOURS` prunes what was not used "
                    "in that time; so does `docker builder prune`)")


UNLABELLED_STAGES_NOTE = ("the classic builder's stage images without envkit's stage label (from builds by an envkit "
                          "before it) are left alone; `docker image prune` removes them, with every other dangling "
                          "image on the host")


BUILDKIT_OWN = ("internal", "frontend")  # record types the engine's prune keeps unless told --all


@dataclass(frozen=True)
class Protection:
    """What, besides age, keeps an image (from the store and the engine), by image id."""

    certified: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # GPU models its newest certificate on is certified
    current_certified: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # :certified refs the store says point at it
    containers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # containers using it ("name (state)")
    children: Mapping[str, int] = field(default_factory=dict)  # images built on it
    caller: Mapping[str, str] = field(
        default_factory=dict
    )  # what the caller still needs, and why (nightly's current builds)


@dataclass(frozen=True)
class Decision:
    image: Candidate | StageImage
    keep: bool
    reasons: tuple[str, ...]

    def to_json(self) -> dict:
        return {**self.image.to_json(), "keep": self.keep, "reasons": list(self.reasons)}


def _protected(c: Candidate, protection: Protection) -> list[str]:
    """What keeps build ``c`` whatever its age: the store's current certified reference, a :certified tag here,
    a container, an image built on it, the caller's need."""
    why = [f"the store's current {ref}" for ref in protection.current_certified.get(c.id, ())]
    why += [f"tagged {t} here" for t in c.tags if t.endswith(":" + CERTIFIED_TAG)]
    why += [f"used by container {name}" for name in protection.containers.get(c.id, ())]
    if protection.children.get(c.id):
        why.append(f"{protection.children[c.id]} other image(s) are built on it")
    if c.id in protection.caller:
        why.append(protection.caller[c.id])
    return why


def decide(candidates: Iterable[Candidate], protection: Protection, keep: int) -> list[Decision]:
    """Keep or remove each candidate (pure). Ordered by group, newest first."""
    check_keep(keep)
    groups: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates:
        if not is_candidate(c.labels, c.tags):  # a caller's list is not trusted to be filtered
            raise EnvkitError(f"{c.name} is not an envkit build (labels {', '.join(IDENTITY)}), or is a base image",
                              hint="gc only ever considers images that carry all of envkit's build labels")
        groups[c.group].append(c)
    out = []
    for group in sorted(groups):
        images = sorted(groups[group], key=lambda c: (c.created, c.id), reverse=True)
        newest_certified: dict[str, str] = {}  # model key -> image id (the first, i.e. newest, certified there)
        for c in images:
            for model in protection.certified.get(c.id, ()):
                newest_certified.setdefault(model_key(model), c.id)
        for rank, c in enumerate(images):
            why = [f"one of the {keep} newest builds of {group}"] if rank < keep else []
            models = [m for m in protection.certified.get(c.id, ()) if newest_certified.get(model_key(m)) == c.id]
            if models:
                why.append(f"the newest image of {group} certified on {', '.join(models)}")
            why += _protected(c, protection)
            if why:
                out.append(Decision(c, True, tuple(why)))
            else:
                out.append(Decision(c, False, (f"older than the {keep} newest builds of {group}; no certificate, "
                                               f":certified reference or container keeps it",)))
    return out


def decide_stages(stages: Iterable[StageImage], kept: Iterable[Candidate], protection: Protection,
                  now: datetime) -> list[Decision]:
    """Keep or remove each stage image (pure), given the builds that stay on the host (``kept``).
    Ordered by group, newest first."""
    staying = {(c.team, c.image, c.lock_hash) for c in kept}
    stages = list(stages)
    for s in stages:  # a caller's list is not trusted to be filtered
        if not is_stage(s.labels):
            raise EnvkitError(f"{s.id[:19]} is not one of envkit's labelled stage images ({', '.join(STAGE_IDENTITY)})",
                              hint="gc only ever removes stage images that carry envkit's stage labels")
    out = []
    for s in sorted(stages, key=lambda s: (s.group, s.created, s.id), reverse=True):
        why = []
        if (s.team, s.image, s.lock_hash) in staying:
            why.append(f"its build of {s.group} (lock {s.lock_hash[:19]}) stays")
        age = now - s.created
        if age < STAGE_GRACE:
            why.append(
                f"made {max(age.total_seconds(), 0) / 60:.0f} min ago, under {STAGE_GRACE.total_seconds() / 3600:g} h: "
                "a build may still be using it"
            )
        why += [f"tagged {t} here" for t in s.tags]
        why += [f"used by container {name}" for name in protection.containers.get(s.id, ())]
        if protection.children.get(s.id):
            why.append(f"{protection.children[s.id]} other image(s) are built on it")
        out.append(Decision(s, bool(why), tuple(why) or (
            f"no build of {s.group} with lock {s.lock_hash[:19]} stays here: the {s.stage} stage's cache is for a "
            "build that is gone",)))
    return sorted(out, key=lambda d: d.image.group)


@dataclass(frozen=True)
class ContainerDecision:
    container: LeftContainer
    keep: bool
    reasons: tuple[str, ...]

    def to_json(self) -> dict:
        return {**self.container.to_json(), "keep": self.keep, "reasons": list(self.reasons)}


def decide_containers(containers: Iterable[LeftContainer], now: datetime) -> list[ContainerDecision]:
    """Keep or remove each stopped envkit container (pure), oldest first."""
    out = []
    for c in sorted(containers, key=lambda c: (c.ended, c.id)):
        if c.state not in ("created", "exited", "dead"):  # a caller's list is not trusted to be filtered
            raise EnvkitError(f"container {c.name} is {c.state}", hint="gc only ever removes stopped containers")
        age = now - c.ended
        if age < CONTAINER_GRACE:
            out.append(
                ContainerDecision(
                    c,
                    True,
                    (
                        f"stopped {max(age.total_seconds(), 0) / 60:.0f} min ago, "
                        f"under {CONTAINER_GRACE.total_seconds() / 60:g} "
                        "min: the envkit that started it may still be reading its output",
                    ),
                )
            )
        else:
            out.append(ContainerDecision(c, False, (
                f"the {c.role} container of {c.image}, {c.state}: envkit removes its containers when they end, "
                "so the envkit that started this one was stopped before it could",)))
    return out


@dataclass(frozen=True)
class CacheCutoff:
    """Prune the build cache records last used before ``since``; ``what`` names that instant in the reasons
    ("24 h ago", "this nightly run started")."""

    since: datetime
    what: str


def unused_for(hours: int, now: datetime | None = None) -> CacheCutoff:
    """``--build-cache HOURS``: the records not used in the last ``hours`` hours (0: none kept for its age)."""
    now = now or datetime.now(timezone.utc)
    return CacheCutoff(now - timedelta(hours=hours),
                       f"{hours} h ago (--build-cache {hours})" if hours else "now (--build-cache 0)")


@dataclass(frozen=True)
class CacheDecision:
    record: CacheRecord
    keep: bool
    reasons: tuple[str, ...]

    def to_json(self) -> dict:
        return {**self.record.to_json(), "keep": self.keep, "reasons": list(self.reasons)}


def decide_build_cache(records: Iterable[CacheRecord], unused_since: datetime, since_what: str) -> list[CacheDecision]:
    """Keep or prune each build cache record (pure), by the rule of the engine's prune with an ``until`` filter:
    prune what no build uses, no image shares, is not BuildKit's own, and was last used before ``unused_since``
    (``since_what`` says what that instant is, for the reasons). Largest first. The engine draws its line from its
    own clock when asked (``prune_build_cache``): a record used within that request's latency of the instant may
    fall the other way."""
    out = []
    for r in sorted(records, key=lambda r: (-r.size, r.id)):
        why = []
        if r.in_use:
            why.append("a build is using it now")
        if r.shared:
            why.append("it holds a layer of an image still here (pruning it would free nothing)")
        if r.kind in BUILDKIT_OWN:
            why.append(f"BuildKit's own ({r.kind})")
        if r.last_used is not None and r.last_used >= unused_since:
            why.append(f"used since {since_what}")
        used = f"last used {r.last_used.strftime('%Y-%m-%d %H:%M')}" if r.last_used else "never used"
        out.append(CacheDecision(r, bool(why), tuple(why) or (
            f"{used}, before {since_what}; no build uses it and no image shares it",)))
    return out


def check_keep(keep: int) -> None:
    if not isinstance(keep, int) or keep < 1:
        raise EnvkitError(f"--keep {keep!r}: gc keeps at least the newest build of each image",
                          hint=f"use --keep 1 or more (default {DEFAULT_KEEP})")


def check_team(team: str) -> None:
    """A team name as team.yaml's ``team:`` gives it (``--team``: the CLI checks it as it reads the command line)."""
    if not team.strip():
        raise EnvkitError("the team is empty", hint="name a team (its io.envkit.team label), or leave --team out")
    if not NAME_RE.fullmatch(team):
        raise EnvkitError(f"{team[:60]!r} is not a team name (lowercase letters, digits, '-', as in team.yaml)",
                          hint="name a team as its spec's `team:` does, or leave --team out")
