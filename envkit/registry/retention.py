"""Retention for the team registry: which published images to keep, and deleting the rest.

Every nightly pushes new stack tags; nothing else ever removes them. ``prune_registry(engine,
"HOST[:PORT][/PATH]", keep=N, older_than_days=D)`` decides per repository (image name):

* kept: the image ``:certified`` points at; the ``keep`` newest envkit images ("newest" by the
  ``created`` time of the image's config, the time it was built: immutable, the same in every
  registry, unlike certificate dates, which move when an old image is certified again); with
  ``older_than_days``, every image built less than that long ago; every image whose build time is
  unknown; every image that is not envkit's (no lock-hash label) and every digest another kind of
  tag points at (a base mirror's ``sha256-<hex>``). Decisions are per manifest digest, so every tag
  of a kept digest is kept.
* deleted: the other envkit images' manifests (``DELETE /v2/<repo>/manifests/<digest>``, which
  removes every tag pointing at that digest) and then the certificate artifacts
  (``<stack>.cert-<gpu>``) whose subject is a deleted image, or whose image is no longer in the
  registry at all (left over by an interrupted prune).

Base mirror repositories are known by what they hold, not by name alone (an image may be named
``base-...`` too): one with only ``sha256-<hex>`` tags is not read further; a ``*/base-*`` one
holding no envkit image is skipped after reading. Its images carry no envkit label, so they would
be kept anyway; an envkit image in a ``base-...`` repository is pruned as any other. Tags are sorted into stack tags,
certificate artifacts, ``:certified`` and mirrors by ``remote_parse.classify_tags``; reads go
through ``remote``'s reader (retries, errors naming the registry). ``plan_repository`` is the
pure decision; the rest reads and deletes.

Deleting a manifest does not free disk: the blobs stay until the registry's garbage collector
runs (``registry garbage-collect``, on the registry's host), which envkit cannot run. A registry
without ``storage.delete.enabled: true`` answers 405 UNSUPPORTED: ``DeleteDisabledError``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable

import requests

from ..errors import EngineError
from ..support.labels import LOCK_LABEL
from ..support.progress import Progress
from .api import PASSWORD_ENV, USER_ENV, DeleteUnsupported, Retries, Sleep, _Failure, _retrying
from .remote import INDEX_TYPES, _Reader, digest_of, mirror_repository, team_repositories
from .remote_parse import CERTIFIED_TAG, classify_tags, envkit_made, parse_registry

if TYPE_CHECKING:
    from ..engine.protocol import Engine

DEFAULT_KEEP = 5
GC_NOTE = ("deleting manifests frees no disk by itself: the registry reclaims the blobs only when its garbage "
           "collector runs (`registry garbage-collect /etc/docker/registry/config.yml` on the registry's host, "
           "with the registry read-only or stopped), which envkit cannot run")
DELETE_SETTING = "storage.delete.enabled: true"


class DeleteDisabledError(EngineError):
    """The registry refuses deletes (HTTP 405 UNSUPPORTED): its ``storage.delete.enabled`` is off."""


# --- what a repository holds, and the decision (pure) ----------------------------------------------

@dataclass(frozen=True)
class Image:
    """One manifest of a repository, with the tags (other than ``:certified``) that point at it."""

    digest: str
    tags: tuple[str, ...]
    created: str | None  # the config's ``created``
    envkit: bool  # carries envkit's lock-hash label


@dataclass(frozen=True)
class Artifact:
    """A certificate artifact (``<stack>.cert-<gpu>``), or a signature or attestation manifest (``sha256-<hex>.sig``,
    ``.att``: no stack)."""

    tag: str
    digest: str
    subject: str | None  # the image manifest it certifies
    stack: str  # the stack tag its name starts with


@dataclass(frozen=True)
class Listing:
    repository: str
    images: tuple[Image, ...]
    certified: str | None  # the digest :certified points at
    protected: dict[str, str]  # digest -> why (another kind of tag points at it)
    artifacts: tuple[Artifact, ...]
    held: frozenset[str]  # artifact subjects the registry still holds (those not among ``images``)


@dataclass(frozen=True)
class Decision:
    digest: str
    tags: tuple[str, ...]
    created: str | None
    delete: bool
    reasons: tuple[str, ...]
    done: str | None = None  # after deleting: "deleted" or "already gone"

    def to_json(self) -> dict:
        return {"digest": self.digest, "tags": list(self.tags), "created": self.created,
                "action": "delete" if self.delete else "keep", "reasons": list(self.reasons), "result": self.done}


@dataclass(frozen=True)
class ArtifactDecision:
    tag: str
    digest: str
    subject: str | None
    delete: bool
    reason: str
    done: str | None = None

    def to_json(self) -> dict:
        return {"tag": self.tag, "digest": self.digest, "subject": self.subject,
                "action": "delete" if self.delete else "keep", "reason": self.reason, "result": self.done}


@dataclass(frozen=True)
class RepositoryPlan:
    repository: str
    certified: str | None
    images: tuple[Decision, ...]
    artifacts: tuple[ArtifactDecision, ...]

    def to_json(self) -> dict:
        return {"repository": self.repository, "certified_digest": self.certified,
                "images": [d.to_json() for d in self.images], "artifacts": [a.to_json() for a in self.artifacts]}


def parse_created(value: str | None) -> datetime | None:
    """An image config's ``created`` (RFC 3339, nanoseconds allowed) as an aware datetime; None if absent or odd."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _decide(image: Image, listing: Listing, rank: dict[str, int], *, keep: int, older_than: timedelta | None,
            now: datetime) -> Decision:
    """Keep or delete one image (``rank``: its place among the repository's dated envkit images, newest first)."""
    why: list[str] = []
    when = parse_created(image.created)
    if image.digest == listing.certified:
        why.append(f":{CERTIFIED_TAG} points at it")
    if image.digest in listing.protected:
        why.append(listing.protected[image.digest])
    if not image.envkit:
        why.append(f"not an envkit image (no {LOCK_LABEL} label)")
    elif when is None:
        why.append("its build time is unknown (no created time in its config)")
    else:
        if rank[image.digest] <= keep:
            why.append(f"one of the {keep} newest (#{rank[image.digest]})")
        if older_than is not None and now - when < older_than:
            why.append(f"built less than {older_than.days} day(s) ago")
    if why or when is None:
        return Decision(image.digest, image.tags, image.created, False, tuple(why))
    age = f"built {(now - when).days} day(s) ago" if older_than is not None else ""
    why = [f"not one of the {keep} newest (#{rank[image.digest]})", *([age] if age else [])]
    return Decision(image.digest, image.tags, image.created, True, tuple(why))


def plan_repository(listing: Listing, *, keep: int, older_than: timedelta | None, now: datetime) -> RepositoryPlan:
    """Keep or delete each image of one repository, and each certificate artifact, with the reasons."""
    dated = [(parse_created(i.created), i) for i in listing.images if i.envkit]
    ranked = sorted((p for p in dated if p[0] is not None), key=lambda p: (p[0], max(p[1].tags, default="")),
                    reverse=True)
    rank = {image.digest: n for n, (_, image) in enumerate(ranked, 1)}
    decisions = [_decide(image, listing, rank, keep=keep, older_than=older_than, now=now) for image in listing.images]
    deleted = {d.digest for d in decisions if d.delete}
    deleted_tags = {t for d in decisions if d.delete for t in d.tags}
    present = {i.digest for i in listing.images} | set(listing.held)
    live_tags = {t for i in listing.images for t in i.tags}
    artifacts = []
    for a in listing.artifacts:
        if a.subject in deleted:
            artifacts.append(ArtifactDecision(a.tag, a.digest, a.subject, True, f"certifies {a.subject}, deleted"))
        elif a.subject is None and a.stack in deleted_tags:
            artifacts.append(ArtifactDecision(a.tag, a.digest, None, True, f"belongs to {a.stack}, deleted"))
        elif a.subject is not None and a.subject not in present and a.stack not in live_tags:
            artifacts.append(ArtifactDecision(a.tag, a.digest, a.subject, True,
                                              f"its image {a.subject} is no longer in the registry"))
        else:
            artifacts.append(ArtifactDecision(a.tag, a.digest, a.subject, False, "its image is kept"))
    return RepositoryPlan(listing.repository, listing.certified, tuple(decisions), tuple(artifacts))


# --- the result ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class PruneResult:
    registry: str
    prefix: str
    dry_run: bool
    keep: int
    older_than_days: int | None
    now: str
    repositories: tuple[RepositoryPlan, ...]
    skipped: tuple[dict, ...]  # {"reference", "reason"}: repositories prune does not touch
    warnings: tuple[str, ...] = ()  # a path matching no repository; a dry run where deletes are disabled

    def counts(self) -> dict[str, int]:
        images = [d for r in self.repositories for d in r.images]
        artifacts = [a for r in self.repositories for a in r.artifacts]
        return {"images_kept": sum(not d.delete for d in images), "images_deleted": sum(d.delete for d in images),
                "artifacts_kept": sum(not a.delete for a in artifacts),
                "artifacts_deleted": sum(a.delete for a in artifacts)}

    def to_json(self) -> dict:
        return {"registry": self.registry, "prefix": self.prefix or None, "dry_run": self.dry_run,
                "keep": self.keep, "older_than_days": self.older_than_days, "now": self.now,
                "repositories": [r.to_json() for r in self.repositories], "skipped": list(self.skipped),
                "summary": self.counts(), "garbage_collection": GC_NOTE, "warnings": list(self.warnings)}


# --- reading and deleting ------------------------------------------------------------------------

def _subject(raw: bytes) -> str | None:
    try:
        subject = (json.loads(raw).get("subject") or {}).get("digest")
    except (ValueError, AttributeError):
        return None
    return subject if isinstance(subject, str) else None


def _stack_images(r: _Reader, path: str, stacks: Iterable[str]) -> dict[str, tuple[list[str], str | None, bool]]:
    """Each manifest the stack tags point at: its tags, its created time and whether envkit built it."""
    by_digest: dict[str, tuple[list[str], str | None, bool]] = {}
    for tag in stacks:
        manifest = r.manifest(path, tag)
        if manifest is None:  # deleted since the listing
            continue
        if manifest.digest not in by_digest:
            if manifest.config_digest is None and manifest.media_type not in INDEX_TYPES:
                by_digest[manifest.digest] = ([], None, False)  # not an image: kept
            else:
                facts = r.facts(path, manifest, f"{r.registry}/{path}:{tag}")
                by_digest[manifest.digest] = ([], facts.created, LOCK_LABEL in facts.labels)
        by_digest[manifest.digest][0].append(tag)
    return by_digest


def _protected(r: _Reader, path: str, images: tuple[Image, ...], mirrors: Iterable[str]) -> dict[str, str]:
    """The images a tag envkit did not make, or a base mirror's tag, also points at: deleting the manifest would
    take that tag (a user's :prod) with it."""
    protected = {}
    for image in images:
        theirs = [t for t in image.tags if not envkit_made(t)]
        if image.envkit and theirs:
            protected[image.digest] = (f"also tagged {', '.join(theirs)}: a tag envkit did not make (its stack tags "
                                       f"are <version>-<variant>-py<python>-<lock hash>)")
    for tag in mirrors:
        digest = digest_of(r, path, tag)
        if digest:
            why = f"also tagged {tag} (a base mirror)"
            protected[digest] = f"{protected[digest]}; {why}" if digest in protected else why
    return protected


def _listing(r: _Reader, path: str, found: list[str]) -> Listing:
    """Read one repository (``found``: its tags): every stack tag's manifest and config, :certified, mirrors and
    artifacts."""
    tags = classify_tags(found)
    by_digest = _stack_images(r, path, tags.stacks)
    images = tuple(Image(d, tuple(t), created, envkit) for d, (t, created, envkit) in by_digest.items())
    certified = digest_of(r, path, CERTIFIED_TAG) if tags.certified else None
    protected = _protected(r, path, images, tags.mirrors)
    artifacts, held = [], set()
    for stack, cert_tags in sorted(tags.certificates.items()):
        for tag in cert_tags:
            manifest = r.manifest(path, tag)
            if manifest is None:
                continue
            subject = _subject(manifest.raw)
            artifacts.append(Artifact(tag, manifest.digest, subject, stack))
            if subject and subject not in by_digest and stack not in tags.stacks and r.manifest(path, subject):
                held.add(subject)
    for tag in tags.signed:  # cosign's sha256-<hex>.sig/.att: they go with the image they name
        manifest, subject = r.manifest(path, tag), "sha256:" + tag[7:71]
        if manifest is not None:
            artifacts.append(Artifact(tag, manifest.digest, subject, ""))
            held |= {subject} if subject not in by_digest and r.manifest(path, subject) else set()
    return Listing(path, images, certified, protected, tuple(artifacts), frozenset(held))


NO_SUCH_MANIFEST = "sha256:" + "0" * 64  # a digest no manifest has


class _Deleter:
    def __init__(self, r: _Reader, opts: Retries):
        self.r, self.opts, self.count = r, opts, 0

    def disabled(self, path: str) -> bool:
        """For a dry run: does the registry refuse deletes? Asked by deleting a manifest that cannot exist
        (distribution answers 405 UNSUPPORTED when deletes are off, else 404). Any other answer or failure
        (an account without ``delete``, a registry that is down) says nothing: False."""
        try:
            self.r.reg.repository(path, actions="delete").delete_manifest(NO_SUCH_MANIFEST)
        except DeleteUnsupported:
            return True
        except Exception:  # noqa: BLE001 - only a clear 405 is worth a warning; the real run reports the rest
            return False
        return False

    def __call__(self, path: str, digest: str) -> str:
        reg = self.r.reg.repository(path, actions="delete")
        registry = self.r.registry

        def fail(f: _Failure, attempts: int) -> EngineError:
            done = f" ({self.count} manifest(s) were deleted before this)" if self.count else ""
            if isinstance(f, DeleteUnsupported):
                return DeleteDisabledError(
                    f"registry {registry} refuses to delete manifests ({f.message}): deletion is disabled in "
                    f"its config, which needs `{DELETE_SETTING}`{done}",
                    hint=f"set `{DELETE_SETTING}` in the registry's config (storage: delete: enabled: true; env "
                         f"REGISTRY_STORAGE_DELETE_ENABLED=true) and restart it; then rerun prune. Note: "
                         f"{GC_NOTE}")
            tries = f" (after {attempts} attempts)" if attempts > 1 else ""
            hint = (f"may this account delete in {registry}? (token auth: repository:{path}:delete; credentials "
                    f"from `docker login {registry}` or {USER_ENV}/{PASSWORD_ENV}); rerun prune: it picks up where "
                    f"it stopped")
            return EngineError(f"cannot delete {registry}/{path}@{digest}{tries}: {f.message}{done}", hint=hint)

        try:
            gone = _retrying(lambda: reg.delete_manifest(digest), fail=fail, **self.opts)
        except DeleteDisabledError:
            raise
        except requests.RequestException as exc:
            raise EngineError(f"cannot delete {registry}/{path}@{digest}: {exc}",
                              hint=f"check the registry address {registry}") from None
        if gone:
            self.count += 1
        return "deleted" if gone else "already gone"


def prune_registry(engine: Engine | None, where: str, *, keep: int = DEFAULT_KEEP, older_than_days: int | None = None,
                   dry_run: bool = False, now: datetime | None = None, retries: int = 2, backoff: float = 0.5,
                   sleep: Sleep = time.sleep, session: requests.Session | None = None,
                   progress: Progress | None = None) -> PruneResult:
    """Decide per repository under ``HOST[:PORT][/PATH]`` what to keep, and (unless ``dry_run``) delete the rest."""
    if keep < 0 or (older_than_days is not None and older_than_days < 0):
        raise EngineError(f"--keep {keep} / --older-than {older_than_days}: both must be 0 or more",
                          hint=f"e.g. --keep {DEFAULT_KEEP} --older-than 30")
    registry, prefix = parse_registry(where)
    now = now or datetime.now(timezone.utc)
    older = timedelta(days=older_than_days) if older_than_days is not None else None
    opts = Retries(retries=retries, backoff=backoff, sleep=sleep)
    r = _Reader(engine, registry, session=session, **opts)
    repos, skipped, warnings = team_repositories(r, registry, prefix)
    delete = _Deleter(r, opts)
    plans = []
    probed = False
    for path, found in repos.items():
        listing = _listing(r, path, found)
        if mirror_repository(path, sum(i.envkit for i in listing.images)) and not listing.artifacts:
            skipped.append({"reference": f"{registry}/{path}", "reason": "base mirror repository"})
            continue  # nothing of envkit's in it: not shown as a plan (its images would all be kept anyway)
        plan = plan_repository(listing, keep=keep, older_than=older, now=now)
        if not dry_run and any(d.delete for d in plan.images + plan.artifacts):
            certified = digest_of(r, path, CERTIFIED_TAG)  # :certified moved since the listing? decide again
            if certified != listing.certified:
                plan = plan_repository(replace(listing, certified=certified), keep=keep, older_than=older, now=now)
            plan = _carry_out(plan, path, delete, progress)
        elif dry_run and not probed and any(d.delete for d in plan.images + plan.artifacts):
            probed = True
            if delete.disabled(path):
                warnings.append(f"registry {registry} refuses deletes (HTTP 405 to deleting a manifest that cannot "
                                f"exist): the real run would fail; it needs `{DELETE_SETTING}` in the registry's "
                                f"config (REGISTRY_STORAGE_DELETE_ENABLED=true)")
        plans.append(plan)
    return PruneResult(registry, prefix, dry_run, keep, older_than_days, now.isoformat(timespec="seconds"),
                       tuple(plans), tuple(skipped), tuple(warnings))


def _carry_out(plan: RepositoryPlan, path: str, delete: _Deleter,
               progress: Progress | None) -> RepositoryPlan:
    """Images first, then their artifacts: an interrupted prune leaves artifacts whose image is gone,
    which the next prune deletes; the other order would leave images without their certificates."""
    def carry(items: Iterable[Any], name: Callable[[Any], str]) -> tuple:
        done = []
        for item in items:
            if item.delete:
                item = replace(item, done=delete(path, item.digest))
                if progress:
                    progress(f"{item.done} {delete.r.registry}/{path}{name(item)}")
            done.append(item)
        return tuple(done)

    images = carry(plan.images, lambda d: f"@{d.digest} ({', '.join(d.tags)})")
    artifacts = carry(plan.artifacts, lambda a: f":{a.tag}")
    return replace(plan, images=images, artifacts=artifacts)
