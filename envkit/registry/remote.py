"""What the team registry holds, read over its HTTP API without pulling anything.

A researcher sees, before pulling, what a published image is and where it was certified:

* ``inspect_remote(engine, REF)``: one image (``host[:port]/repo:tag`` or ``...@sha256:...``):
  its manifest (digest, compressed size), its config's labels (the ``io.envkit.*`` pins, the
  lock hash), every certificate artifact attached to it (``<stack tag>.cert-<gpu>``, see
  ``artifacts.attach_certificate``) and whether the moving ``:certified`` tag points at it.
* ``list_registry(engine, HOST[:PORT][/path])``: every envkit image in the registry's
  repositories (``/v2/_catalog``, ``/v2/<repo>/tags/list``), with its certification per GPU
  model. Certificate artifacts, ``:certified``, base mirrors (tags ``sha256-<hex>``; a repository
  holding only those is skipped whole) and images without envkit's lock-hash label are not rows.

The pure half (references, what the answers mean) is ``remote_parse``; it is re-exported here.
The HTTP client is ``api._RegistryHTTP`` (credentials, scheme and trust from
``auth``: ``ENVKIT_REGISTRY_USER``/``ENVKIT_REGISTRY_PASSWORD``, else `docker login`;
https with the engine's certs.d CAs, the engine's fallbacks for insecure registries). ``engine``
may be None when no engine runs here: then only 127.0.0.0/8 registries count as insecure.
Every failure is an ``EngineError`` naming the registry and the reference, with a hint (a
``RegistryAuthError`` when credentials are missing, refused, or lack a right).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

import requests

from ..errors import EngineError
from ..lock import MIRROR_REPO_PREFIX  # nightly's base mirrors: <team>/base-<distro>-<suite>
from ..support.labels import LOCK_LABEL
from ..trust.keys import TrustedKeys
from .api import PASSWORD_ENV, USER_ENV, Retries, Sleep, _Failure, _Manifest, _RegistryHTTP, _retrying
from .artifacts import fetch_certificate_artifact
from .remote_parse import (
    CERTIFIED_TAG,
    REF_HINT,
    ImageFacts,
    RegistryRef,
    RemoteCertificate,
    certificate_of,
    classify_tags,
    config_facts,
    latest_per_gpu,
    manifest_parts,
    parse_ref,
    parse_registry,
    pick_platform,
    shown_labels,
)
from .verify import ImageTrust, judge_image

if TYPE_CHECKING:
    from ..engine.protocol import Engine

INDEX_TYPES = ("application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json")

_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")

T = TypeVar("T")


# --- reading the registry ---------------------------------------------------------------------

@dataclass(frozen=True)
class RemoteImage:
    ref: RegistryRef
    digest: str  # what the tag points to (for an index: the index)
    media_type: str
    facts: ImageFacts
    tags: list[str]  # tags of the repository that point at this digest (stack tags and :certified)
    certified: bool  # :certified points at this digest
    certified_digest: str | None  # where :certified points now (None: no such tag)
    certificates: list[RemoteCertificate] = field(default_factory=list)  # the ones that count (verified)
    trust: ImageTrust | None = None  # its signature, and the certificates that do not count with why

    @property
    def pinned(self) -> str:
        return f"{self.ref.repo}@{self.digest}"

    @property
    def stack_tags(self) -> list[str]:
        return [t for t in self.tags if t != CERTIFIED_TAG]

    def to_json(self) -> dict:
        f = self.facts
        return {"reference": str(self.ref), "registry": self.ref.registry, "repository": self.ref.repository,
                "tag": self.ref.tag, "digest": self.digest, "pinned": self.pinned, "media_type": self.media_type,
                "platform": f.platform, "id": f.config_digest, "compressed_size": f.compressed_size,
                "layers": f.layers, "created": f.created, "labels": shown_labels(f.labels), "user": f.user,
                "require_cuda": f.env.get("NVIDIA_REQUIRE_CUDA"), "lock_hash": f.labels.get(LOCK_LABEL),
                "tags": self.tags, "certified_tag": self.certified, "certified_digest": self.certified_digest,
                "certificates": [c.to_json() for c in self.certificates],
                **(self.trust.to_json() if self.trust else {})}


class _Reader:
    """One registry, read with retries; every failure becomes an EngineError naming registry and reference."""

    def __init__(self, engine: Engine | None, registry: str, *, retries: int, backoff: float, sleep: Sleep,
                 session: requests.Session | None = None) -> None:
        self.reg = _RegistryHTTP.at(engine, registry, session=session)
        self.registry = registry
        self.opts = Retries(retries=retries, backoff=backoff, sleep=sleep)
        self._repos: dict[str, _RegistryHTTP] = {}

    def repo(self, path: str) -> _RegistryHTTP:
        if path not in self._repos:
            self._repos[path] = self.reg.repository(path)
        return self._repos[path]

    def read(self, op: Callable[[], T], what: str) -> T:
        def fail(f: _Failure, attempts: int) -> EngineError:
            tries = f" (after {attempts} attempts)" if attempts > 1 else ""
            errno = _ERRNO.search(f.message)
            if errno:  # requests' "HTTPConnectionPool(...): Max retries exceeded ... [Errno 111] Connection refused"
                f = _Failure(f"cannot connect: {errno.group(1).strip()}", f.retryable)
            if f.retryable:
                hint = (f"is the registry up and reachable from here? (curl {self.reg.scheme}://{self.registry}/v2/)")
            elif re.search(r"HTTP 40[13]", f.message):
                hint = f"credentials come from `docker login {self.registry}` or {USER_ENV}/{PASSWORD_ENV}"
            else:
                hint = "check the reference: `envkit ls --registry REGISTRY` lists what the registry holds"
            return EngineError(f"cannot read {what} from registry {self.registry}{tries}: {f.message}", hint=hint)

        try:
            return _retrying(op, fail=fail, **self.opts)
        except requests.RequestException as exc:  # not a connection problem: a malformed URL, a bad redirect
            raise EngineError(f"cannot read {what} from registry {self.registry}: {exc}",
                              hint=f"check the registry address {self.registry}") from None

    def manifest(self, path: str, reference: str) -> _Manifest | None:
        return self.read(lambda: self.repo(path).get_manifest(reference), f"{self.registry}/{path}:{reference}")

    def tags(self, path: str) -> list[str] | None:
        return self.read(lambda: self.repo(path).list_tags(), f"the tags of {self.registry}/{path}")

    def facts(self, path: str, manifest: _Manifest, where: str) -> ImageFacts:
        platform = None
        if manifest.media_type in INDEX_TYPES:
            digest, platform = pick_platform(manifest.raw, where)
            child = self.manifest(path, digest)
            if child is None:
                raise EngineError(f"{where}: the index names {digest} ({platform}), which registry "
                                  f"{self.registry} does not hold", hint="re-push the image")
            manifest = child
        config, size, layers = manifest_parts(manifest.raw, where)
        blob = self.read(lambda: self.repo(path).get_blob(config), f"the config {config} of {where}")
        labels, env, user, created = config_facts(blob, where)
        return ImageFacts(config, size, layers, labels, env, user, created, platform)

    def certificate(self, path: str, tag: str) -> RemoteCertificate | None:
        artifact = self.read(lambda: fetch_certificate_artifact(self.repo(path), tag),
                             f"the certificate artifact {self.registry}/{path}:{tag}")
        return certificate_of(artifact) if artifact else None

    def trust(self, path: str, digest: str, facts: ImageFacts, trusted: TrustedKeys,
              legacy: list[RemoteCertificate]) -> ImageTrust:
        """What counts of the image's attestations (``verify.judge_image``); ``legacy``: its unsigned artifacts."""
        return self.read(lambda: judge_image(self.repo(path), digest, facts.labels.get(LOCK_LABEL), trusted, legacy),
                         f"the signatures and attestations of {self.registry}/{path}@{digest}")


def inspect_remote(engine: Engine | None, ref: str | RegistryRef, *, retries: int = 2, backoff: float = 0.5,
                   sleep: Sleep = time.sleep, session: requests.Session | None = None,
                   trusted: TrustedKeys | None = None) -> RemoteImage:
    """Read one image, its certificates and ``:certified`` from the registry (nothing is pulled). A tag is read as
    the digest it points to now, and only certificates verified with ``trusted`` about that digest count."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    if parsed is None:
        raise EngineError("not a registry reference", hint=REF_HINT)
    ref = parsed
    r = _Reader(engine, ref.registry, retries=retries, backoff=backoff, sleep=sleep, session=session)
    tags = r.tags(ref.repository)
    if tags is None:
        check_is_registry(r, ref.registry, f"GET /v2/{ref.repository}/tags/list")
        raise EngineError(f"registry {ref.registry} has no repository {ref.repository!r} (asked for {ref})",
                          hint=f"`envkit ls --registry {ref.registry}` lists its repositories")
    manifest = r.manifest(ref.repository, ref.reference)
    if manifest is None:
        near = ", ".join(classify_tags(tags).stacks[-5:]) or "none"
        what = f"manifest {ref.digest}" if ref.digest else f"tag {ref.tag!r}"
        raise EngineError(f"registry {ref.registry} has no {what} in repository {ref.repository} (asked for {ref})",
                          hint=f"its stack tags include: {near}; `envkit ls --registry {ref.registry}` lists them all")
    facts = r.facts(ref.repository, manifest, str(ref))
    sorted_tags = classify_tags(tags)
    certified_digest = (manifest.digest if ref.tag == CERTIFIED_TAG and not ref.digest else
                        digest_of(r, ref.repository, CERTIFIED_TAG) if sorted_tags.certified else None)
    if ref.tag in sorted_tags.stacks and not ref.digest:
        stacks = [ref.tag]  # stack tags are immutable, one per stack: no need to ask for the others
    else:  # a digest or :certified: which stack tag(s) hold it?
        stacks = [t for t in sorted_tags.stacks if digest_of(r, ref.repository, t) == manifest.digest]
    pointing = stacks + ([CERTIFIED_TAG] if certified_digest == manifest.digest else [])
    certs = []
    for stack in stacks:
        for tag in sorted_tags.certificates.get(stack, []):
            cert = r.certificate(ref.repository, tag)
            if cert is not None and cert.subject in (None, manifest.digest):
                certs.append(cert)
    trust = r.trust(ref.repository, manifest.digest, facts, trusted or TrustedKeys(), certs)
    return RemoteImage(ref, manifest.digest, manifest.media_type, facts, pointing, certified_digest == manifest.digest,
                       certified_digest, trust.certificates, trust)


def digest_of(r: _Reader, path: str, tag: str) -> str | None:
    """The digest ``path:tag`` points at; None when there is no such tag."""
    manifest = r.manifest(path, tag)
    return manifest.digest if manifest else None


def team_repositories(r: _Reader, registry: str, prefix: str) -> tuple[dict[str, list[str]], list[dict], list[str]]:
    """The repositories under ``prefix`` (the registry's catalog) with their tags, the base mirror
    repositories left out (``{"reference", "reason"}``), and warnings (a ``prefix`` matching no repository).

    A base mirror repository is known by what it holds, never by its name alone (nightly's
    ``<team>/base-<distro>-<suite>`` is also what an image named ``base-...`` gets): here, one whose every tag is
    a mirror's ``sha256-<hex>``. The others are read: envkit images carry its lock label, a mirror's base does not
    (``mirror_repository`` then names a ``base-*`` repository without envkit images as the mirror it is)."""
    repos, skipped, warnings = {}, [], []
    catalog = r.read(r.reg.catalog, "the catalog (/v2/_catalog)")
    if catalog is None:
        catalog = no_catalog(r, registry, prefix)
    under = [p for p in sorted(catalog) if not prefix or p == prefix or p.startswith(prefix + "/")]
    if prefix and not under:
        tops = sorted({p.split("/", 1)[0] for p in catalog})
        seen = f"its repositories are under: {', '.join(tops[:10])}{', ...' if len(tops) > 10 else ''}" if tops \
            else "it holds no repositories"
        warnings.append(f"no repository in registry {registry} is {prefix!r} or under it ({seen})")
    for path in under:
        tags = r.tags(path) or []
        sorted_tags = classify_tags(tags)
        if sorted_tags.mirrors and len(sorted_tags.mirrors) == len(set(tags)):
            skipped.append({"reference": f"{registry}/{path}",
                            "reason": "base mirror repository"})
            continue
        repos[path] = tags
    return repos, skipped, warnings


def mirror_repository(path: str, envkit_images: int) -> bool:
    """A repository read in full that is a base mirror: named as nightly names mirrors, and holding no envkit image
    (an envkit image named ``base-...`` shares the name, not the lack of envkit's label)."""
    return path.rsplit("/", 1)[-1].startswith(MIRROR_REPO_PREFIX) and envkit_images == 0


def check_is_registry(r: _Reader, registry: str, asked: str) -> None:
    """After a 404: is there a registry at all at that address? An ``EngineError`` saying what answered if not
    (a web server, a proxy's page), so that no 404 from one is read as "empty" or "no such repository"."""
    why = r.read(r.reg.not_a_registry, "the API's base (/v2/)")
    if why:
        raise EngineError(f"{registry} is not a container registry: {asked} answered 404, and {why}",
                          hint=f"check the address (host and port) of the registry: a registry answers "
                               f"`curl {r.reg.scheme}://{registry}/v2/` with 200 or 401 and the header "
                               f"Docker-Distribution-API-Version: registry/2.0")


def no_catalog(r: _Reader, registry: str, prefix: str) -> list[str]:
    """A registry whose ``/v2/_catalog`` answers 404 (hosted registries have none): ``prefix`` itself when it
    names a repository; else an ``EngineError`` saying to name one (or that this is no registry at all)."""
    check_is_registry(r, registry, "GET /v2/_catalog")
    if prefix and r.tags(prefix) is not None:
        return [prefix]
    there = f" and has no repository {prefix!r}" if prefix else ""
    raise EngineError(f"registry {registry} has no catalog endpoint (GET /v2/_catalog answered 404, as on hosted "
                      f"registries){there}, so envkit cannot list its repositories",
                      hint=f"name a repository instead: {registry}/TEAM/IMAGE (e.g. {registry}/vision/torch25), "
                           f"as nightly pushed it")


# --- listing the registry -----------------------------------------------------------------------

@dataclass(frozen=True)
class Listing:
    registry: str
    prefix: str
    rows: list[dict]
    skipped: list[dict]  # {"reference", "reason"}: what is in the registry but is no envkit image
    warnings: list[str] = field(default_factory=list)  # e.g. a path matching no repository

    def to_json(self) -> dict:
        return {"registry": self.registry, "prefix": self.prefix or None, "images": self.rows, "skipped": self.skipped,
                "warnings": self.warnings}


def list_registry(engine: Engine | None, where: str, *, retries: int = 2, backoff: float = 0.5,
                  sleep: Sleep = time.sleep, session: requests.Session | None = None,
                  trusted: TrustedKeys | None = None) -> Listing:
    """Every envkit image in the registry (under ``path``), with its certification per GPU model (from the
    certificates verified with ``trusted``; the others are listed with why they do not count)."""
    registry, prefix = parse_registry(where)
    r = _Reader(engine, registry, retries=retries, backoff=backoff, sleep=sleep, session=session)
    repos, skipped, warnings = team_repositories(r, registry, prefix)
    rows: list[dict] = []
    for path, found in repos.items():
        tags = classify_tags(found)
        before_rows, before_skipped = len(rows), len(skipped)
        certified_digest = digest_of(r, path, CERTIFIED_TAG) if tags.certified else None
        for tag in tags.stacks:
            ref = f"{registry}/{path}:{tag}"
            manifest = r.manifest(path, tag)
            if manifest is None:  # deleted between the listing and now
                continue
            facts = r.facts(path, manifest, ref)
            if LOCK_LABEL not in facts.labels:
                skipped.append({"reference": ref, "reason": f"no {LOCK_LABEL} label: not an envkit image"})
                continue
            certs = [c for c in (r.certificate(path, t) for t in tags.certificates.get(tag, []))
                     if c is not None and c.subject in (None, manifest.digest)]
            trust = r.trust(path, manifest.digest, facts, trusted or TrustedKeys(), certs)
            rows.append({**registry_row(ref, manifest.digest, facts, trust.certificates, certified_digest),
                         **trust.to_json()})
        if mirror_repository(path, len(rows) - before_rows):  # one entry for the mirror, not one per base in it
            skipped[before_skipped:] = [{"reference": f"{registry}/{path}", "reason": "base mirror repository"}]
    return Listing(registry, prefix, rows, skipped, warnings)


def registry_row(ref: str, digest: str, facts: ImageFacts, certs: list[RemoteCertificate],
                 certified_digest: str | None) -> dict:
    repository, stack = ref.rsplit(":", 1)
    dates = [d for d in [facts.created, *(c.created_at for c in certs)] if d]
    return {"tag": ref, "repository": repository, "stack": stack, "digest": digest,
            "pinned": f"{repository}@{digest}", "image_id": facts.config_digest, "labels": shown_labels(facts.labels),
            "created": facts.created,
            "lock_hash": facts.labels.get(LOCK_LABEL), "compressed_size": facts.compressed_size,
            "certified_tag": certified_digest == digest,
            "certification": latest_per_gpu([(c.gpu_model, c.status, c.created_at) for c in certs]),
            "certificates": [c.to_json() for c in certs], "date": max(dates)[:10] if dates else None,
            "sources": ["registry"], "local_tag": None}


def merge_store(rows: list[dict], store: dict[str, dict]) -> list[dict]:
    """Registry rows joined with the store's knowledge of the same images (by image id = config digest).

    ``store``: image id -> {"tag", "created", "certificates": [(gpu model, status, created_at)]}.
    A GPU model certified in both keeps its newest status; the date is the newest of both.
    """
    merged = []
    for row in rows:
        known = store.get(row["image_id"])
        if known is None:
            merged.append(row)
            continue
        remote = [(c["gpu_model"], c["status"], c["created_at"]) for c in row["certificates"]]
        dates = [d for d in [row["date"], known["created"][:10], *(c[2][:10] for c in known["certificates"])] if d]
        merged.append({**row, "certification": latest_per_gpu([*known["certificates"], *remote]),
                       "date": max(dates), "sources": ["registry", "store"], "local_tag": known["tag"]})
    return merged
