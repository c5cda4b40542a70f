"""Publish images to the team registry: push, promote, mirror bases, pull by digest.

Tags:
  ``<repo>:<stack tag>``  immutable: one stack (lock hash) forever. Pushing a different image
                          under an existing stack tag is refused.
  ``<repo>:certified``    moves: set to the stack tag's exact manifest digest, and only when
                          that image is certified.

Pushes and pulls go through the engine (docker-py), so the engine's own registry settings
apply (an engine treats 127.0.0.0/8 registries as "insecure": https unverified, else http). Reading a
tag's manifest and re-pointing ``:certified`` use the registry's HTTP API directly
(``api``): that is the only way to give a second tag *exactly* the first tag's digest.

Credentials come from ``ENVKIT_REGISTRY_USER`` / ``ENVKIT_REGISTRY_PASSWORD``, else from what
``docker login`` stored (config.json, credential helpers), resolved by ``auth`` for
every push and pull and handed to the engine as the call's ``auth_config`` (so the engine uses
the same account as envkit's own HTTP calls); never from a spec. A refusal is a
``RegistryAuthError`` naming the registry, the account and where its credentials came from.

Connection errors and 5xx/429 answers are retried with exponential backoff; anything else
(denied, unknown image, a bad manifest) fails at once. Failures raise ``EngineError`` naming
the registry and the image left unpushed. Callers record a push in the ``Store`` only after
the call returned.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import requests

from ..engine.protocol import Engine, EngineCallError, ImageInfo, ImageMissing
from ..errors import EngineError, EnvkitError
from ..support import layer_moves
from ..support.layer_moves import LayerMoves, StreamStatuses
from ..support.progress import LayerBytes, Progress, Transfer
from .api import (
    PASSWORD_ENV,
    USER_ENV,
    Retries,
    Sleep,
    _classify,
    _Failure,
    _insecure,
    _Manifest,
    _RegistryHTTP,
    _retrying,
)
from .auth import AuthFailure, Credentials, credentials_for, engine_refusal, engine_tls_failure
from .remote_parse import CERTIFIED_TAG, _strip_tag, split_repository

_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_PINNED = re.compile(r"^(?P<repo>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")
_DIGEST = re.compile(r"\bdigest: (sha256:[0-9a-f]{64})\b")
_REFUSED = re.compile(r"unauthori[sz]ed|authentication required|denied|forbidden|incorrect username or password|"
                      r"no basic auth credentials", re.IGNORECASE)


@dataclass(frozen=True)
class PushResult:
    ref: str  # registry/repo:tag
    digest: str  # sha256:... of the manifest the tag points to
    layers: LayerMoves | None = None  # what the push did with each layer, with its bytes (``support.layer_moves``)

    @property
    def repository(self) -> str:
        return _strip_tag(self.ref)

    @property
    def pinned(self) -> str:
        """registry/repo@sha256:..., immune to tag moves."""
        return f"{self.repository}@{self.digest}"


@dataclass(frozen=True)
class PromoteResult:
    stack: PushResult
    certified: PushResult | None  # set only when promoted as certified
    pushed: bool  # False when the stack tag already held this very image

    @property
    def digest(self) -> str:
        return self.stack.digest


# --- small helpers --------------------------------------------------------------------------------

def _check_tag(tag: str) -> None:
    if not _TAG.fullmatch(tag or ""):
        raise EngineError(f"bad tag {tag!r}: tags are 1-128 of [A-Za-z0-9_.-], not starting with . or -")


def _auth_config(registry: str) -> tuple[dict | None, Credentials | None]:
    """The engine's ``auth_config`` for a push or pull, resolved now (the environment, then `docker login`)."""
    creds = credentials_for(registry)
    if creds is None:
        return None, None
    if creds.identity_token:
        return {"identitytoken": creds.secret, "serveraddress": registry}, creds
    return {"username": creds.user, "password": creds.secret, "serveraddress": registry}, creds


def _stream(chunks: Iterable[dict], progress: Progress | None, refused: Callable[[str], AuthFailure] | None = None,
            registry: str | None = None, transfer: Transfer | None = None,
            statuses: StreamStatuses | None = None) -> str | None:
    """Consume a push/pull progress stream; return the digest it reports; raise on an error line
    (``refused(message)`` when the registry refused the credentials; what ``engine_tls_failure`` makes
    of the engine's TLS to ``registry``: an untrusted certificate, a client certificate refused or missing).
    ``progress`` gets each layer's status changes, ``transfer`` the bytes moved on each layer ("Pushing",
    "Downloading": the engine's ``progressDetail``), ``statuses`` each layer's last status (what happened to it)."""
    digest = None
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk or "errorDetail" in chunk:
            raise _stream_error(chunk, refused, registry)
        if statuses is not None:
            statuses.feed(chunk)
        aux = chunk.get("aux") or {}
        if aux.get("Digest"):
            digest = aux["Digest"]
        status = chunk.get("status") or ""
        m = _DIGEST.search(status)
        if m and digest is None:
            digest = m.group(1)
        detail = chunk.get("progressDetail") or {}
        if transfer and status in ("Pushing", "Downloading") and chunk.get("id") and _count(detail.get("total")):
            transfer(LayerBytes(str(chunk["id"]), _count(detail.get("current")), _count(detail.get("total"))))
        if progress and status and status not in ("Pushing", "Downloading", "Extracting", "Waiting"):
            progress(f"{chunk['id']}: {status}" if chunk.get("id") else status)
    return digest


def _stream_error(chunk: dict, refused: Callable[[str], AuthFailure] | None, registry: str | None) -> Exception:
    """What an error line of the stream means (``_stream``)."""
    message = (chunk.get("errorDetail") or {}).get("message") or chunk.get("error") or "unknown error"
    message = " ".join(str(message).split())
    if refused is not None and _REFUSED.search(message):
        return refused(message)
    tls = engine_tls_failure(registry, message) if registry is not None else None
    return tls if tls is not None else _Failure(message, _classify(message))


def _count(value: object) -> int:
    """A byte count of the engine's progressDetail (0 for anything else)."""
    return value if isinstance(value, int) and value > 0 else 0


# --- the API -----------------------------------------------------------------------------------

def _unpushed(image: str, ref: str, registry: str, failure: _Failure, attempts: int,
              scheme: str = "https") -> EngineError:
    tries = f"after {attempts} attempts" if attempts > 1 else "at the first attempt"
    if failure.retryable:
        hint = (f"is the registry up and reachable from the engine host? (curl {scheme}://{registry}/v2/) "
                f"{image} is still local; rerun the publish step when the registry is back")
    else:
        hint = (f"credentials come from `docker login {registry}` or {USER_ENV}/{PASSWORD_ENV}; "
                f"check the repository exists and you may push to it. {image} is still local")
    return EngineError(f"could not push {image} to registry {registry} as {ref} ({tries}): {failure.message}; "
                       f"{image} is left unpushed", hint=hint)


def push(engine: Engine, image_ref_local: str, registry_repo: str, tag: str, *, retries: int = 4, backoff: float = 1.0,
         sleep: Sleep = time.sleep, progress: Progress | None = None, transfer: Transfer | None = None) -> PushResult:
    """Tag ``image_ref_local`` as ``registry_repo:tag`` and push it; return the pushed manifest digest (``transfer``:
    the bytes pushed per layer)."""
    registry, _ = split_repository(registry_repo)
    _check_tag(tag)
    ref = f"{registry_repo}:{tag}"
    try:
        engine.tag_image(image_ref_local, registry_repo, tag)
    except ImageMissing:
        raise EngineError(f"cannot push {image_ref_local} to registry {registry}: the engine has no such image",
                          hint="build it first (envkit build SPEC), or check the reference") from None
    except EngineCallError as exc:
        raise EngineError(f"cannot tag {image_ref_local} as {ref}: {exc.explanation}") from None
    auth, creds = _auth_config(registry)
    statuses = StreamStatuses()

    def attempt() -> str:
        chunks = engine.push(registry_repo, tag, auth)
        digest = _stream(chunks, progress, lambda message: engine_refusal(registry, creds, message), registry,
                         transfer, statuses)
        if not digest:
            raise _Failure("the engine finished the push without reporting a manifest digest", False)
        return digest

    digest = _retrying(attempt, retries=retries, backoff=backoff, sleep=sleep, registry=registry,
                       fail=lambda f, n: _unpushed(image_ref_local, ref, registry, f, n,
                                                   "http" if _insecure(engine, registry) else "https"))
    info = engine.inspect(image_ref_local)
    diff_ids = info.layers if info is not None else ()
    return PushResult(ref, digest, layer_moves.pushed(statuses.last, diff_ids, _blobs(engine, registry_repo, digest)))


def _blobs(engine: Engine, registry_repo: str, digest: str) -> list[tuple[str, int]] | None:
    """The layers (blob digest, compressed size) of manifest ``digest`` in the registry; None when it cannot be read
    now (the push or pull itself succeeded: its layers are then reported without bytes)."""
    try:
        manifest = _RegistryHTTP(engine, registry_repo).get_manifest(digest)
    except (EnvkitError, _Failure, requests.RequestException):
        return None
    return manifest.blobs if manifest is not None else None


def remote_digest(engine: Engine, registry_repo: str, tag: str, *, retries: int = 4, backoff: float = 1.0,
                  sleep: Sleep = time.sleep) -> str | None:
    """The manifest digest ``registry_repo:tag`` points to in the registry, or None if no such tag."""
    reg = _RegistryHTTP(engine, registry_repo)
    manifest = _retrying(lambda: reg.get_manifest(tag), retries=retries, backoff=backoff, sleep=sleep,
                         fail=lambda f, n: EngineError(f"cannot read {registry_repo}:{tag} from registry "
                                                       f"{reg.registry}: {f.message}"))
    return manifest.digest if manifest else None


def _check_same_image(existing: _Manifest, registry_repo: str, ref: str, local: str, info: ImageInfo) -> None:
    """Refuse to move stack tag ``ref``, which holds ``existing``, to another image than the local ``info``."""
    same = (existing.config_digest == info.id if existing.config_digest
            else f"{registry_repo}@{existing.digest}" in set(info.repo_digests))
    if not same:
        raise EngineError(
            f"refusing to overwrite {ref}: stack tags are immutable, and it already points to "
            f"{existing.digest} (image {existing.config_digest or 'unknown'}), not to {local} ({info.id})",
            hint="a changed stack gets a new lock hash and so a new stack tag: re-resolve and rebuild; "
                 "to replace the tag anyway, delete it in the registry first, deliberately",
        )


def promote(engine: Engine, registry_repo: str, stack_tag: str, *, certified: bool, image: str | None = None,
            retries: int = 4, backoff: float = 1.0, sleep: Sleep = time.sleep,
            progress: Progress | None = None, transfer: Transfer | None = None) -> PromoteResult:
    """Publish the immutable ``stack_tag``; when ``certified``, point ``:certified`` at the same digest
    (``transfer``: the bytes pushed per layer).

    ``image``: the local image to publish (default: the local ``registry_repo:stack_tag``).
    An existing stack tag holding the same image is left as it is (no re-push); one holding a
    different image is refused. ``:certified`` is re-pointed by copying the stack tag's
    manifest, so both tags share one digest byte for byte.
    """
    _check_tag(stack_tag)
    if stack_tag == CERTIFIED_TAG:
        raise EngineError(f"{CERTIFIED_TAG!r} is not a stack tag: it is the tag promote moves",
                          hint="give the immutable stack tag (e.g. 2.5.1-cu124-py3.11-<lock hash>)")
    local = image or f"{registry_repo}:{stack_tag}"
    info = engine.inspect(local)
    if info is None:
        raise EngineError(f"cannot promote {local}: the engine has no such image",
                          hint="build it first (envkit build SPEC), or pass the local image reference")
    reg = _RegistryHTTP(engine, registry_repo)
    ref = f"{registry_repo}:{stack_tag}"
    opts = Retries(retries=retries, backoff=backoff, sleep=sleep)

    def unreadable(what: str) -> Callable[[_Failure, int], EngineError]:
        return lambda f, n: EngineError(f"cannot {what} in registry {reg.registry}: {f.message}; {local} is "
                                        f"left unpromoted", hint="is the registry up, and may you push to it?")

    existing = _retrying(lambda: reg.get_manifest(stack_tag), fail=unreadable(f"read {ref}"), **opts)
    if existing is None:
        stack = push(engine, local, registry_repo, stack_tag, progress=progress, transfer=transfer, **opts)
        pushed = True
    else:
        _check_same_image(existing, registry_repo, ref, local, info)
        if progress:
            progress(f"{ref} already holds this image ({existing.digest}); not pushing again")
        stack = PushResult(ref, existing.digest, layer_moves.present(info.layers, existing.blobs))
        pushed = False

    moved = None
    if certified:
        manifest = existing or _retrying(lambda: reg.get_manifest(stack.digest),
                                         fail=unreadable(f"read {registry_repo}@{stack.digest}"), **opts)
        if manifest is None:
            raise EngineError(f"{registry_repo}@{stack.digest} vanished from registry {reg.registry} right after "
                              f"the push", hint="is something deleting manifests? rerun promote")
        cert_ref = f"{registry_repo}:{CERTIFIED_TAG}"
        digest = _retrying(lambda: reg.put_manifest(CERTIFIED_TAG, manifest),
                           fail=unreadable(f"move {cert_ref} to {stack.digest}"), **opts)
        if digest != stack.digest:
            raise EngineError(f"the registry {reg.registry} stored {cert_ref} as {digest}, not {stack.digest}",
                              hint="the registry rewrote the manifest; promote by pushing the image instead")
        moved = PushResult(cert_ref, digest)
        if progress:
            progress(f"{cert_ref} -> {digest}")
    return PromoteResult(stack, moved, pushed)


def mirror_base(engine: Engine, base_ref: str, registry_repo: str, *, tag: str | None = None, retries: int = 4,
                backoff: float = 1.0, sleep: Sleep = time.sleep, progress: Progress | None = None) -> str:
    """Push a (local) base image into the team registry; return ``registry/repo@sha256:...``.

    Rebuilds that use the returned reference depend on the team registry only, never on
    upstream. ``tag`` defaults to the base's own tag (``sha256-<hex>`` for a digest reference).
    """
    if tag is None:
        m = _PINNED.fullmatch(base_ref)
        if m:
            tag = m.group("digest").replace(":", "-")
        else:
            last = base_ref.rpartition("/")[2]
            tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
    result = push(engine, base_ref, registry_repo, tag, retries=retries, backoff=backoff, sleep=sleep,
                  progress=progress)
    return result.pinned


def pull_by_digest(engine: Engine, ref_with_digest: str, *, retries: int = 4, backoff: float = 1.0,
                   sleep: Sleep = time.sleep, progress: Progress | None = None,
                   transfer: Transfer | None = None) -> ImageInfo:
    """Pull ``registry/repo@sha256:...`` into the engine and return what the engine now holds (``transfer``: the
    bytes downloaded per layer)."""
    return pull_layers(engine, ref_with_digest, retries=retries, backoff=backoff, sleep=sleep, progress=progress,
                       transfer=transfer)[0]


def pull_layers(engine: Engine, ref_with_digest: str, *, retries: int = 4, backoff: float = 1.0,
                sleep: Sleep = time.sleep, progress: Progress | None = None,
                transfer: Transfer | None = None) -> tuple[ImageInfo, LayerMoves]:
    """``pull_by_digest``, with what the pull did with each layer (pulled, or already present) and its bytes."""
    m = _PINNED.fullmatch(ref_with_digest or "")
    if not m:
        raise EngineError(f"{ref_with_digest!r} is not pinned by digest",
                          hint="give REGISTRY/REPO@sha256:<64 hex digits>")
    registry, _ = split_repository(m.group("repo"))
    auth, creds = _auth_config(registry)
    statuses = StreamStatuses()

    def attempt() -> None:
        _stream(engine.pull(m.group("repo"), m.group("digest"), auth),
                progress, lambda message: engine_refusal(registry, creds, message), registry, transfer, statuses)

    def fail(f: _Failure, n: int) -> EngineError:
        tries = f"after {n} attempts" if n > 1 else "at the first attempt"
        return EngineError(f"could not pull {ref_with_digest} from registry {registry} ({tries}): {f.message}",
                           hint=f"is the registry up, does it still hold that digest, and may you pull from it "
                                f"(`docker login {registry}` or {USER_ENV}/{PASSWORD_ENV})?")

    _retrying(attempt, retries=retries, backoff=backoff, sleep=sleep, fail=fail, registry=registry)
    info = engine.inspect(ref_with_digest)
    if info is None:
        raise EngineError(f"pulled {ref_with_digest} but the engine does not list it")
    blobs = _blobs(engine, m.group("repo"), m.group("digest"))
    return info, layer_moves.pulled(statuses.last, info.layers, blobs)


