"""The nightly's publishing: push the stack tag, move `:certified` for a certified image, attach its certificate,
mirror its base and (a reproducible or a BuildKit build's) its OS stage by digest, and restore a missing one from
that mirror; what an earlier run published is trusted only while the registry named this run still holds it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..certify.certificate import Certificate, slug
from ..errors import EnvkitError
from ..images import os_stage
from ..lock import LockedImage
from ..registry.artifacts import attach_certificate
from ..registry.publish import mirror_base, promote, pull_by_digest, remote_digest
from ..registry.remote_parse import certificate_tag
from ..registry.signing import sign_published
from ..support import layer_moves
from ..support.labels import OS_KEY_LABEL
from ..support.progress import Progress, transfer_lines
from ..trust.keys import SigningKey
from .image_attestations import Documents

if TYPE_CHECKING:
    from ..engine.protocol import Engine, ImageInfo
    from ..lock import Lock
    from ..store.history import Store


@dataclass
class ImageReport:
    name: str
    tag: str
    changes: list[str] = field(default_factory=list)
    build: str = "pending"  # built | skipped | failed | not built (the engine's disk was full)
    status: str = "pending"  # certified | verified | failed | (pending)
    reasons: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    pushed: list[str] = field(default_factory=list)
    publish_error: str | None = None
    notes: list[str] = field(default_factory=list)  # what the run did about it that was not asked (a gc to make room)
    worked: bool = False  # anything was done for it in this run
    layers: dict | None = None  # --reproducible: its layers and their check (``nightly_layers.layers_doc``)
    layers_built: dict | None = None  # which layers its build made, which the engine had (``Outcome.moves``)
    layers_pushed: dict | None = None  # what its push did per layer, with bytes (``LayerMoves.to_json``)

    def to_json(self) -> dict:
        return dict(self.__dict__)


def note_built(engine: Engine, report: ImageReport, info: ImageInfo) -> None:
    """The report's ``layers_built`` of an image this run did not build (an earlier build of its lock): every layer
    the engine's already. (A build's own: ``Outcome.moves``, which ``build_image`` reads.)"""
    report.layers_built = layer_moves.held(info.layers, engine.layer_sizes(info.id)).to_json()


@dataclass
class Asked:
    """What this run learnt of the registry: once it could not be asked, the other images do not wait on it."""

    unanswered: str | None = None


def _publish(
    engine: Engine,
    store: Store,
    run_id: int,
    lock: Lock,
    image: LockedImage,
    report: ImageReport,
    info: ImageInfo,
    registry: str,
    progress: Progress,
    cert: Certificate | None = None,
    asked: Asked | None = None,
    key: SigningKey | None = None,
    documents: Callable[[str], Documents] | None = None,
) -> None:
    """``documents``: given the pushed manifest digest, the SBOM and provenance to attest beside the image's
    signature (``app.image_attestations``)."""
    repo = f"{registry.rstrip('/')}/{lock.team}/{image.name}"
    stack_tag = report.tag.split(":", 1)[1]
    if _published(engine, store, repo, stack_tag, image, report, info, cert, asked or Asked()):
        if key is not None and (asked is None or asked.unanswered is None):  # published unsigned: sign it now
            pushed = [p for p in store.pushes_for(info.id) if p.ref.startswith(f"{repo}:") and p.tag_kind == "stack"]
            if pushed:
                _sign(engine, repo, pushed[-1].digest, key, cert, report, documents)
        return
    store.mark_step(run_id, image.name, "publish", "started", image.hash)
    progress(f"[{image.name}] pushing to {repo}")
    try:
        result = promote(engine, repo, stack_tag, certified=report.status == "certified", image=report.tag,
                         progress=lambda msg: None, transfer=transfer_lines(progress, f"[{image.name}] pushed"))
    except EnvkitError as exc:
        report.publish_error = exc.message
        report.worked = True
        return
    store.record_push(info.id, result.stack.ref, result.stack.digest, "stack")
    report.pushed.append(result.stack.pinned)
    if result.stack.layers is not None:
        report.layers_pushed = result.stack.layers.to_json()
        progress(f"[{image.name}] {result.stack.layers.words()}")
    if cert is not None:  # the certificate travels with the image: an artifact whose subject is it
        try:
            report.pushed.append(attach_certificate(engine, repo, stack_tag, cert.to_bytes(),
                                                    gpu_slug=slug(cert.gpu_model), status=cert.status))
        except EnvkitError as exc:
            report.publish_error = exc.message
    if key is not None:
        _sign(engine, repo, result.stack.digest, key, cert, report, documents)
    if result.certified:
        store.record_push(info.id, result.certified.ref, result.certified.digest, "certified")
        report.pushed.append(result.certified.ref)
    _mirror_base(engine, store, lock, image, registry, report)
    _mirror_os_stage(engine, store, lock, image, registry, report)
    store.mark_step(run_id, image.name, "publish", "done", image.hash)
    report.worked = True


def _sign(engine: Engine, repo: str, digest: str, key: SigningKey, cert: Certificate | None,
          report: ImageReport, documents: Callable[[str], Documents] | None = None) -> None:
    """The image's cosign signature, its certificate, SBOM and provenance as signed attestations
    (``registry.signing``)."""
    try:
        report.pushed += sign_published(engine, repo, digest, key, [cert] if cert is not None else [],
                                        documents(digest) if documents is not None else None)
    except EnvkitError as exc:
        report.publish_error = exc.message


def _published(
    engine: Engine,
    store: Store,
    repo: str,
    stack_tag: str,
    image: LockedImage,
    report: ImageReport,
    info: ImageInfo,
    cert: Certificate | None,
    asked: Asked,
) -> bool:
    """Whether ``repo`` (the registry named this run) already holds what this run would publish: the stack tag with
    the digest the store recorded (asked of the registry, which may have lost it to a prune or a reset since),
    the certificate artifact, the base mirror, and a recorded ``:certified`` push when certified (where
    ``:certified`` points now is not asked: a newer image may have moved it). A push recorded for another registry
    or path counts for nothing here. A registry that cannot be asked changes nothing that was published: the run
    notes it (once it failed, the other images do not ask again) and publishes nothing more for the image."""
    pushes = [p for p in store.pushes_for(info.id) if p.ref.startswith(f"{repo}:")]
    kinds = {p.tag_kind for p in pushes}
    if not ({"stack", "certified"} if report.status == "certified" else {"stack"}) <= kinds:
        return False
    if _base_unmirrored(engine, store, repo.rsplit("/", 1)[0], image):
        return False
    if asked.unanswered is None:
        try:
            stack = next(p.digest for p in reversed(pushes) if p.tag_kind == "stack")
            if remote_digest(engine, repo, stack_tag, retries=1) != stack:
                return False
            if cert is not None and remote_digest(engine, repo, certificate_tag(stack_tag, slug(cert.gpu_model)),
                                                  retries=1) is None:
                return False
            return True
        except EnvkitError as exc:
            asked.unanswered = exc.message
    report.notes.append(f"published by an earlier run, not confirmed in {repo} now (the registry did not answer: "
                        f"{asked.unanswered}); the next run checks again")
    return True


def restore_stages(engine: Engine, store: Store, image: LockedImage, tag: str, files: dict[str, bytes] | None,
                   progress: Progress) -> None:
    """What a build of ``image`` as ``tag`` stands on, from the team registry's mirrors where the engine lacks it:
    its base (``restore_base``) and, for a reproducible or a BuildKit build (``files``: its rendered context), its
    OS stage (``restore_os_stage``)."""
    restore_base(engine, store, image, progress)
    if files is not None:
        restore_os_stage(engine, store, image, tag, os_stage.os_key(files["Dockerfile"]), progress)


def restore_os_stage(engine: Engine, store: Store, image: LockedImage, tag: str, key: str,
                     progress: Progress = lambda _: None) -> str | None:
    """A runner whose engine lacks the OS stage of ``key`` as ``<tag>-os`` (``images.os_stage``) pulls it from the
    team registry's mirror, by digest (newest first), and tags it so: the build then stands on the OS layers the
    last one did, and every layer above them is the same chain, which fleet nodes holding that image need not pull
    again. Returns the mirror used, or None (there already, never mirrored, or no mirror answered: the builder
    builds the stage). The build takes it only on the very base it was made on (``os_stage.find``): restored from
    its mirror first (``restore_base``), as ``restore_stages`` does."""
    os_tag = os_stage.os_tag(tag)
    if os_stage.find(engine, key, os_tag, image.base.ref) is not None:
        return None
    for pinned in reversed(store.mirrors_for(os_stage.mirror_key(key))):
        try:
            info = pull_by_digest(engine, pinned, retries=2)
        except EnvkitError as exc:
            progress(f"OS stage mirror {pinned} did not answer: {exc.message}")
            continue
        engine.tag(info.id, os_tag)
        progress(f"restored the OS stage {key[7:19]} as {os_tag} from the team registry ({pinned})")
        return pinned
    return None


def restore_base(engine: Engine, store: Store, image: LockedImage, progress: Progress = lambda _: None) -> str | None:
    """A runner whose engine lacks the image's base gets it back from the team registry's
    mirror, by digest (newest mirror first), instead of pulling upstream or bootstrapping a
    new one: the rebuild then stands on the very base the last one did. Returns the mirror
    used, or None (base present, never mirrored, or no mirror answered: the build then makes
    or finds the base as usual and says why if it cannot)."""
    if engine.inspect(image.base.ref) is not None:
        return None
    for pinned in reversed(store.mirrors_for(image.base.ref)):
        try:
            info = pull_by_digest(engine, pinned, retries=2)
        except EnvkitError as exc:
            progress(f"base mirror {pinned} did not answer: {exc.message}")
            continue
        engine.tag(info.id, image.base.ref)
        progress(f"restored base {image.base.ref} from the team registry ({pinned})")
        return pinned
    return None


def _base_mirror_repo(team_repo: str, image: LockedImage) -> str:
    return f"{team_repo}/{image.base.mirror_name}"


def _base_unmirrored(engine: Engine, store: Store, team_repo: str, image: LockedImage) -> bool:
    """The image's base is on this engine and not mirrored (by its digest) in ``team_repo``'s registry path."""
    base = engine.inspect(image.base.ref)
    if base is None:
        return False
    mirrored = {m for m in store.mirrors_for(image.base.ref) if m.startswith(_base_mirror_repo(team_repo, image) + "@")}
    return not mirrored & set(base.repo_digests)


def _mirror_base(
    engine: Engine, store: Store, lock: Lock, image: LockedImage, registry: str, report: ImageReport
) -> None:
    """Keep the image's base in the team registry, pinned by digest, so an upstream
    deletion never breaks a rebuild (``envkit`` records where the mirror is)."""
    team_repo = f"{registry.rstrip('/')}/{lock.team}"
    if not _base_unmirrored(engine, store, team_repo, image):
        return  # no base here, or this very base (by digest) is mirrored there already
    try:
        pinned = mirror_base(engine, image.base.ref, _base_mirror_repo(team_repo, image))
    except EnvkitError as exc:
        report.publish_error = exc.message
        return
    store.record_mirror(image.base.ref, pinned)
    report.pushed.append(pinned)


def _mirror_os_stage(
    engine: Engine, store: Store, lock: Lock, image: LockedImage, registry: str, report: ImageReport
) -> None:
    """Keep a reproducible or a BuildKit build's OS stage (``<tag>-os``, labelled with its key:
    ``images.os_stage``) in the team registry, pinned by digest, in its base's mirror repository (tagged
    ``os-<key>``), so a runner without it pulls those bytes back (``restore_os_stage``) instead of building other
    ones."""
    info = engine.inspect(os_stage.os_tag(report.tag))
    key = info.labels.get(OS_KEY_LABEL) if info is not None else None
    if info is None or key is None:
        return  # a builder's build (no OS stage of its own), or its OS stage is gone from this engine
    repo = _base_mirror_repo(f"{registry.rstrip('/')}/{lock.team}", image)
    if {m for m in store.mirrors_for(os_stage.mirror_key(key)) if m.startswith(repo + "@")} & set(info.repo_digests):
        return  # this very stage (by digest) is mirrored there already
    try:
        pinned = mirror_base(engine, info.id, repo, tag=os_stage.mirror_tag(key))
    except EnvkitError as exc:
        report.publish_error = exc.message
        return
    store.record_mirror(os_stage.mirror_key(key), pinned)
    report.pushed.append(pinned)
