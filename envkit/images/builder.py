"""Build each locked image (skipping ones already built from the same lock and context, unless asked to build
again), then verify it with the payload.

Two builders: ``classic`` (the engine's API through docker-py) and ``buildkit`` (the docker
CLI; pip's cache in a cache mount, the site CA as a build secret). Each renders its own
Dockerfile, so the context hash differs and switching builders rebuilds. ``pick_builder`` decides once which
builds; the functions here take its pick (``classic`` | ``buildkit``) without asking the CLI again.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..engine.buildkit import BuildKitBuilder
from ..engine.protocol import AUTO, BUILDER_CHOICES, BUILDERS, BuildEvent, EngineCallError
from ..engine.space import build_need, low_space
from ..errors import BuildError
from ..frameworks import expected, require_buildable
from ..index.login import SECRET_ID, login_refused, netrc_for, refused_index
from ..lock import Lock, LockedImage, wheel_bytes
from ..payload.harness import Verification, run_payload
from ..render.files import CA_ARG, OS_ARG, context_for, context_hash, image_tag, index_urls, render_files
from ..support import layer_moves, scratch
from ..support.ca_bundle import site_certificates
from ..support.labels import BASE_LABEL, CONTEXT_LABEL, LOCK_LABEL, OS_KEY_LABEL, STAGE_LABEL  # noqa: F401
from ..support.layer_moves import LayerMoves
from ..support.progress import Phase, Planned
from . import os_stage
from .base import ensure_base
from .reproducible import Assembled, DevelSteps, assemble, env_tag, made_how, require_local

if TYPE_CHECKING:
    from ..engine.protocol import Engine

BuildProgress = Callable[[str, BuildEvent | Planned | Phase | str], None]  # (image name, an event, a plan or a line)


@dataclass
class Outcome:
    name: str
    tag: str
    action: str  # built | skipped
    image_id: str = ""
    size: int = 0
    seconds: float = 0.0
    verification: Verification | None = None
    labels: dict = field(default_factory=dict)
    layers: dict[str, str] = field(default_factory=dict)  # --reproducible: layer group -> diff_id
    phases: dict[str, float] = field(default_factory=dict)  # --reproducible: where the build's time went, seconds
    reused: tuple[str, ...] = ()  # --reproducible: the layer groups taken from an image on the engine, not installed
    builder: str = ""  # which built it (classic | buildkit); "" when skipped
    context_hash: str = ""  # the build context's identity (its io.envkit.context-hash label), as the store records it
    rebuilt: bool = False  # built again (--no-cache) though an image of the same lock and context was on the engine
    diff_ids: tuple[str, ...] = ()  # the image's layers, lowest first, as the engine lists them
    moves: LayerMoves | None = None  # each layer: reused (the engine had it before the build) or built, with bytes

    @property
    def status(self) -> str:
        return self.verification.status if self.verification else "built"

    @property
    def made_by(self) -> str:
        """Which builder made the image, as the store records it and its provenance says: reproducible (envkit
        wrote the environment layers, the builder only the OS stage), else classic | buildkit; "" when skipped."""
        if self.action != "built" or not self.builder:
            return ""
        return "reproducible" if self.layers else self.builder

    def to_json(self) -> dict:
        return {"name": self.name, "tag": self.tag, "action": self.action, "image_id": self.image_id,
                "size_bytes": self.size, "build_seconds": round(self.seconds, 1), "status": self.status,
                "builder": self.builder or None, "context_hash": self.context_hash or None,
                **({"rebuilt": True} if self.rebuilt else {}),
                "verification": self.verification.to_json() if self.verification else None,
                **({"layers": self.layers, "phases_seconds": self.phases, "reused": list(self.reused)}
                   if self.layers else {}),
                **({"layers_built": self.moves.to_json()} if self.moves is not None else {})}


def build_image(engine: Engine, lock: Lock, image: LockedImage, spec_name: str, *, ca_bundle: Path | None,
                progress: BuildProgress, verify: bool = True, builder: str = AUTO,
                reproducible: bool = False, no_cache: bool = False, files: dict[str, bytes] | None = None,
                keep_os_stage: bool = False) -> Outcome:
    """Build ``image`` with ``builder`` ("auto" | "classic" | "buildkit") unless an identical build exists;
    ``reproducible``: the builder makes the OS stage, envkit the environment layers (``reproducible.assemble``).
    ``no_cache``: build again even when an identical image exists, every step run again (the builder's cache unused;
    a reproducible build reuses no image's layers either). ``files``: the context already rendered for ``builder``
    (then the builder its caller picked: ``pick_builder``); rendered here when not given. ``keep_os_stage`` (the
    nightly): a BuildKit build makes its OS stage ``<tag>-os`` first, as the mirror's (``_os_stage``)."""
    require_buildable(image)  # nightly builds through here too
    if reproducible:
        require_local(engine)
    builder = picked(engine, builder)
    buildkit = builder == "buildkit"
    if files is None:
        files = render_files(lock, image, spec_name, buildkit=buildkit)
    # a reproducible build's identity says so (and how its layers are made): it is never taken for a builder's
    identity = {LOCK_LABEL: image.hash,
                CONTEXT_LABEL: context_hash({**files, **made_how(reproducible)})}
    tag = image_tag(lock.team, image)
    started = time.monotonic()
    existing = engine.find_image(identity)
    if existing is not None and not no_cache:
        if tag not in existing.tags:
            engine.tag(existing.id, tag)
        progress(image.name, f"unchanged since its last build ({existing.id[:19]}); skipping")
        outcome = Outcome(image.name, tag, "skipped", existing.id, existing.size, context_hash=identity[CONTEXT_LABEL],
                          diff_ids=existing.layers)
        outcome.moves = layer_moves.held(existing.layers, engine.layer_sizes(existing.id))
        return verified(engine, image, outcome, verify, progress)
    if existing is not None:
        progress(image.name, f"unchanged since its last build ({existing.id[:19]}); building again (--no-cache)")
    wheels = wheel_bytes(image.packages)
    if (warning := low_space(engine, build_need([wheels]) if wheels is not None else None)) is not None:
        progress(image.name, warning)
    before = engine.layer_chains()  # what the build may reuse (read only when it builds): which layers it made
    base = ensure_base(engine, image.base, lambda msg: progress(image.name, msg),
                       lambda phase: progress(image.name, phase))
    labels = dict(identity, **{BASE_LABEL: base.id})
    if reproducible:
        outcome = _build_reproducible(engine, lock, image, spec_name, files, tag, labels, builder=builder,
                                      ca_bundle=ca_bundle, progress=progress, no_cache=no_cache)
    else:
        outcome = _build(engine, lock, image, files, tag, labels, builder=builder, ca_bundle=ca_bundle,
                         progress=progress, no_cache=no_cache, keep_os_stage=keep_os_stage)
    outcome.seconds = time.monotonic() - started
    outcome.context_hash, outcome.rebuilt = identity[CONTEXT_LABEL], existing is not None
    outcome.moves = layer_moves.built(outcome.diff_ids, before, engine.layer_sizes(outcome.image_id))
    return verified(engine, image, outcome, verify, progress)


def _build(engine: Engine, lock: Lock, image: LockedImage, files: dict[str, bytes], tag: str,
           labels: dict[str, str], *, builder: str, ca_bundle: Path | None, progress: BuildProgress,
           no_cache: bool, keep_os_stage: bool = False) -> Outcome:
    """The builder's build of the rendered ``files``; BuildKit's on the OS stage of its key (``_os_stage``)."""
    buildkit = builder == "buildkit"
    with scratch.directory(f"ctx-{image.name}") as tmp, \
            scratch.directory("secrets") as secrets:
        # BuildKit gets the CA and the index logins as build secrets, the classic builder the CA as a build
        # argument: neither is written into the context
        ctx = stage_context(Path(tmp), files)
        netrc = _index_netrc(image, Path(secrets)) if buildkit else None
        args = _os_stage(engine, lock, image, files, ctx, tag, ca_bundle=ca_bundle, progress=progress,
                         no_cache=no_cache, keep=keep_os_stage) if buildkit else None

        def build(args: dict[str, str] | None) -> str:
            image_id = ""
            try:  # on the OS stage image, the image is not a stage itself
                for event in run_build(engine, ctx, tag, {**labels, STAGE_LABEL: ""} if args else labels,
                                       builder=builder, ca_bundle=ca_bundle, netrc=netrc, no_cache=no_cache,
                                       build_args=args):
                    if event.kind == "done":
                        image_id = event.text
                    progress(image.name, event)
            except BuildError as exc:
                raise _login_failure(exc, image, builder, netrc is not None) from None
            return image_id

        image_id = build(args)
        if buildkit and keep_os_stage and args is None and not _on_os_stage(engine, tag):
            progress(image.name, f"BuildKit's cache gave the os stage other layers than {os_stage.os_tag(tag)} (it "
                                 "holds two results of a step, as after a --no-cache build); building again on "
                                 f"{os_stage.os_tag(tag)}, which the nightly mirrors")
            first, image_id = image_id, build({OS_ARG: os_stage.os_tag(tag)})
            if first and first != image_id:
                with contextlib.suppress(EngineCallError):  # (in use: gc takes it once it is not)
                    engine.untag(first)  # untagged by now: the image goes
    info = engine.inspect(tag)
    return Outcome(image.name, tag, "built", info.id if info else image_id, info.size if info else 0,
                   builder=builder, diff_ids=info.layers if info else ())


def _os_stage(engine: Engine, lock: Lock, image: LockedImage, files: dict[str, bytes], ctx: Path, tag: str, *,
              ca_bundle: Path | None, progress: BuildProgress, no_cache: bool, keep: bool) -> dict[str, str] | None:
    """The build argument that has BuildKit's build stand on ``<tag>-os``, or None: the Dockerfile's own os stage.

    ``<tag>-os`` found on the engine with the stage's key (a nightly restored it from the team registry's mirror:
    then every layer above is the same chain as last night's): stood on. Missing, with ``keep`` (the nightly, which
    mirrors it): built first (``--target os``) and kept so, as a reproducible build's (``images.os_stage``); the
    build then stands on its own os stage, which BuildKit's cache answers with those very layers, so its steps are
    the ones `envkit build` and every earlier lock on this engine ran: cached, not run again. (Standing on the image
    would make every step above another cache key, as its labels name the build: run again, each a layer the engine
    may already hold, which Docker 20.10 then never frees: docs/images.md, "Where Docker 20.10 loses disk space to
    BuildKit".) BuildKit's cache can hold two results of one step (a ``--no-cache`` build adds one) and answer the
    two builds with different ones: ``_build`` checks and then builds again on ``<tag>-os``. With ``no_cache`` the
    stage is built anew both times, other bytes each: then the build stands on the one kept."""
    os_tag = os_stage.os_tag(tag)
    os_labels = os_stage.labels(files["Dockerfile"], context_for(lock, image, "", buildkit=True).stage_labels)
    have = None if no_cache else os_stage.find(engine, os_labels[OS_KEY_LABEL], os_tag, image.base.ref)
    if have is None and not keep:
        return None
    built = os_stage.take_or_build(engine, os_tag, os_labels,
                                   lambda: run_build(engine, ctx, os_tag, os_labels, builder="buildkit",
                                                     ca_bundle=ca_bundle, target="os", no_cache=no_cache),
                                   base_ref=image.base.ref, reuse=False, have=have,  # (looked for above)
                                   say=lambda e: progress(image.name, e))
    return None if built and not no_cache else {OS_ARG: os_tag}


def _on_os_stage(engine: Engine, tag: str) -> bool:
    """Whether ``tag``'s layers start with those of ``<tag>-os``."""
    info, os_info = engine.inspect(tag), engine.inspect(os_stage.os_tag(tag))
    return info is not None and os_info is not None and info.layers[:len(os_info.layers)] == os_info.layers


def _build_reproducible(engine: Engine, lock: Lock, image: LockedImage, spec_name: str, files: dict[str, bytes],
                        tag: str, labels: dict[str, str], *, builder: str, ca_bundle: Path | None,
                        progress: BuildProgress, no_cache: bool) -> Outcome:
    """The builder makes the OS stage (``--target os``) and a devel image's devel steps, envkit the rest
    (``reproducible.assemble``)."""
    with scratch.directory("secrets") as secrets:  # the index logins uv reads, as a BuildKit build's
        netrc = _index_netrc(image, Path(secrets))

        def build_os(ctx: Path, os_tag: str, os_labels: dict[str, str]) -> Iterator[BuildEvent]:
            return run_build(engine, ctx, os_tag, os_labels, builder=builder, ca_bundle=ca_bundle, target="os",
                             no_cache=no_cache)

        def build_devel(ctx: Path, devel_tag: str, devel_labels: dict[str, str]) -> Iterator[BuildEvent]:
            return run_build(engine, ctx, devel_tag, devel_labels, builder=builder, ca_bundle=ca_bundle,
                             netrc=netrc if builder == "buildkit" else None, no_cache=no_cache)

        devel = None if image.flavour == "runtime" else DevelSteps(
            render_files(lock, image, spec_name, buildkit=builder == "buildkit", env_image=env_tag(tag)), build_devel)
        made = assemble(engine, lock, image, files, tag=tag, labels=labels, build_os=build_os, stage=stage_context,
                        ca_bundle=ca_bundle, netrc=netrc, say=lambda e: progress(image.name, e),
                        reuse=not no_cache, devel=devel)
    return assembled_outcome(engine, image, tag, made, builder)


def assembled_outcome(engine: Engine, image: LockedImage, tag: str, made: Assembled, builder: str) -> Outcome:
    """The outcome of a build ``reproducible.assemble`` made (online or from a bundle): the engine's id and size, as a
    builder's build reports them, the layers, where the time went and what was reused."""
    info = engine.inspect(tag)
    return Outcome(image.name, tag, "built", info.id if info else made.image_id, info.size if info else 0,
                   layers=made.layers, phases=made.seconds, builder=builder, reused=made.reused,
                   diff_ids=info.layers if info else ())


def verified(engine: Engine, image: LockedImage, outcome: Outcome, verify: bool, progress: BuildProgress) -> Outcome:
    """``outcome``, with the payload's verification inside the image when ``verify``."""
    if verify:
        progress(image.name, "verifying inside the image")
        outcome.verification = run_payload(engine, outcome.tag, expected(image))
    return outcome


def _index_netrc(image: LockedImage, directory: Path) -> Path | None:
    """The netrc lines for the lock's own index hosts (nothing else of the user's file), as a private file."""
    text = netrc_for(index_urls(image))
    if text is None:
        return None
    scratch.sweep_secrets()
    path = directory / "netrc"
    path.touch(mode=0o600)
    path.write_bytes(text)
    return path


def _login_failure(exc: BuildError, image: LockedImage, builder: str, passed: bool) -> BuildError:
    """A build whose pip met a 401/403 from one of the lock's indexes, with what to do about it."""
    url = refused_index(f"{exc.message}\n{exc.hint or ''}", index_urls(image))
    if url is None:
        return exc
    return BuildError(exc.message, hint=login_refused(url, builder=builder, passed=passed) + "\n  " + (exc.hint or ""))


def check_builder(builder: str) -> None:
    if builder not in BUILDER_CHOICES:
        raise BuildError(f"unknown builder {builder!r}", hint=f"use one of: {', '.join(BUILDER_CHOICES)}")


def require_builder(engine: Engine, builder: str) -> None:
    """Fail before any work when ``builder`` is unknown or is BuildKit, asked for by name, that cannot build here
    (its CLI missing); ``auto`` is decided when a build starts (``pick_builder``)."""
    check_builder(builder)
    if builder == "buildkit":
        BuildKitBuilder(engine).require()


def picked(engine: Engine, builder: str) -> str:
    """``builder`` when it is already a pick (``classic`` | ``buildkit``: ``pick_builder`` asked the CLI once), else
    ``pick_builder``'s."""
    return builder if builder in BUILDERS else pick_builder(engine, builder)


def pick_builder(engine: Engine, builder: str) -> str:
    """The builder that builds (``classic`` | ``buildkit``): ``auto`` is BuildKit where it can build here (a cold
    build in about half a naive Dockerfile's time, the site CA as a secret: docs/images.md), else classic."""
    require_builder(engine, builder)
    if builder == AUTO:
        return "buildkit" if BuildKitBuilder(engine).available() else "classic"
    return builder


MAX_ARG = 120_000  # a build argument reaches the step as an environment variable: at most 128 kB (MAX_ARG_STRLEN)


def _site_ca_arg(ca_bundle: Path) -> str:
    """The classic builder's ENVKIT_SITE_CA: the bundle's certificates that are not public roots (the image's
    ca-certificates has those; the step appends these to them)."""
    text = site_certificates(ca_bundle)
    if len(text) > MAX_ARG:
        raise BuildError(f"the CA bundle {ca_bundle} holds {len(text) // 1000} kB of certificates that are not public "
                         f"roots; the classic builder passes them as a build argument, which holds at most "
                         f"{MAX_ARG // 1000} kB",
                         hint="name a bundle of only the site's CA (ENVKIT_CA_BUNDLE), or build with "
                              "--builder buildkit (which mounts the bundle as a secret)")
    return text


def stage_context(directory: Path, files: dict[str, bytes]) -> Path:
    """Write rendered ``files`` into ``directory``."""
    for rel, data in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        (directory / rel).write_bytes(data)
    return directory


def run_build(engine: Engine, context: Path, tag: str, labels: dict[str, str], *, builder: str = AUTO,
              ca_bundle: Path | None = None, dockerfile: str = "Dockerfile", network: bool = True,
              no_cache: bool = False, netrc: Path | None = None, target: str | None = None,
              build_args: dict[str, str] | None = None) -> Iterator[BuildEvent]:
    """Build a staged context with either builder; ``network=False`` cuts RUN steps off the network.

    The classic builder gets ``ca_bundle``'s text as the build argument ``ENVKIT_SITE_CA`` (its install steps
    write it to /tmp and remove it; it stays in no layer, but `docker history` shows build arguments); BuildKit
    gets it as the build secret ``site-ca``, and ``netrc`` (the index hosts' logins) as ``index-netrc``.
    """
    builder = picked(engine, builder)
    if builder == "buildkit":
        secrets = {sid: path for sid, path in (("site-ca", ca_bundle), (SECRET_ID, netrc)) if path is not None} or None
        yield from BuildKitBuilder(engine).build(context, tag, labels, secrets=secrets, network=network,
                                                 no_cache=no_cache, target=target, build_args=build_args,
                                                 dockerfile=None if dockerfile == "Dockerfile" else dockerfile)
    else:
        args = {**({CA_ARG: _site_ca_arg(ca_bundle)} if ca_bundle is not None else {}), **(build_args or {})}
        yield from engine.build(context, tag, labels, dockerfile=dockerfile, network=network, no_cache=no_cache,
                                build_args=args or None, target=target)
