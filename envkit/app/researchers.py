"""What researchers ask: the images built and certified (``envkit ls``, ``show``: the store, the engine and the
registry), and running one after the certification gate (``envkit run``)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from ..certify.gate import Verdict, host_gpus, judge
from ..engine.protocol import GPU_ULIMITS, RUN_TIMEOUT, RunOptions
from ..errors import EngineError, EnvkitError, VerificationError
from ..images.builder import LOCK_LABEL
from ..registry.remote import inspect_remote, list_registry, merge_store
from ..registry.remote_parse import parse_ref
from ..store.history import Store
from ..support.labels import IMAGE_LABEL, SHOWN, TEAM_LABEL
from ..trust.dsse import TAMPERED
from ..trust.keys import GET_KEY_HINT, load_trusted_keys
from .standing import certified_on, described, from_json, summary

if TYPE_CHECKING:
    from typing import Any, BinaryIO, ContextManager

    from ..certify.gate import Verdict
    from ..engine.protocol import Engine, ImageInfo, RunResult
    from ..store.history import Store
    from ..store.records import CertificateRecord


def _store_images(store: Store) -> dict[str, dict]:
    """image id -> {"tag", "created", "certificates": [(gpu model, status, created_at)], "records": [...],
    "docs": [certificate dicts, as show gives them]}."""
    out = {}
    for image_id, tag, created in store.images():
        records = store.certificates_for(image_id)
        out[image_id] = {"tag": tag, "created": created, "records": records, "docs": [_cert_doc(c) for c in records],
                         "certificates": [(c.gpu_model, c.status, c.created_at) for c in records]}
    return out


def stack_of(ref: str) -> str | None:
    """The tag of ``ref`` (``host:port/team/image:TAG@digest`` -> TAG), or None for a reference without one (an
    image id, ``name@sha256:...``): the port of a registry host is not a tag."""
    name = ref.partition("@")[0]
    last = name.rpartition("/")[2]
    if ":" not in last or re.fullmatch(r"sha256:[0-9a-f]{12,64}", name):
        return None
    return last.rpartition(":")[2]


def envkit_tag(labels: dict[str, str], tags: tuple[str, ...] = ()) -> str | None:
    """An envkit image's own tag (``<team>/<image>:<stack>``) from its labels, preferring one of ``tags`` with that
    name; None when the labels do not name a team and an image."""
    team, image = labels.get(TEAM_LABEL), labels.get(IMAGE_LABEL)
    if not team or not image:
        return None
    repo = f"{team}/{image}"
    mine = sorted(t for t in tags if t.rpartition(":")[0] == repo)
    if mine:
        return mine[0]
    version = labels.get("org.opencontainers.image.version")
    return f"{repo}:{version}" if version else None


def list_images(store_url: str | None, engine_of: Callable[[], Engine | None] | None = None) -> list[dict]:
    """Every image the store knows (built by nightly, or certified), with its certifications. The store keeps the
    reference an image was certified by (an id, a registry tag); with an engine (``engine_of()``, asked only when
    the store knows an image; None: no engine), an envkit image still there is named by its own tag
    (``<team>/<image>:<stack>``, from its labels). ``reference``: what the store recorded."""
    store = Store.open_existing(store_url, must_exist=True)  # creates none; a named one must be there
    if store is None:
        return []
    with store:
        images = _store_images(store)
    engine = engine_of() if images and engine_of is not None else None
    rows = []
    for image_id, known in images.items():
        certs = known["records"]
        info = _inspect_quietly(engine, image_id)
        tag = (envkit_tag(info.labels, info.tags) if info is not None else None) or known["tag"]
        rows.append(described({"tag": tag, "reference": known["tag"], "image_id": image_id, "stack": stack_of(tag),
                               "certification": {c.gpu_model: c.status for c in certs},
                               "date": max([known["created"], *[c.created_at for c in certs]])[:10],
                               "sources": ["store"]},
                              known["docs"], info.labels if info is not None else None))
    return sorted(rows, key=lambda r: r["tag"])


def _inspect_quietly(engine: Engine | None, ref: str) -> ImageInfo | None:
    """``engine.inspect(ref)``, or None without an engine or when it cannot say (ls names the image as recorded)."""
    if engine is None:
        return None
    try:
        return engine.inspect(ref)
    except EnvkitError:
        return None


def list_registry_images(engine: Engine | None, registry: str, store_url: str | None, *,
                         trusted_keys: str | None = None, **read: Any) -> dict:
    """What the registry holds (every envkit image, certification per GPU model from its certificates that verify
    with the trusted keys: ``--trusted-keys``, else ``$ENVKIT_TRUSTED_KEYS``), joined with the store's rows for the
    same images when a store is at hand."""
    store = Store.open_existing(store_url, must_exist=True)  # a named store adds to it: a typo fails at once
    trusted = load_trusted_keys(trusted_keys)
    listing = list_registry(engine, registry, trusted=trusted, **read)
    known: dict[str, dict] = {}
    where = None
    if store is not None:
        with store:
            known = _store_images(store)
            where = store.where
    rows = [described(row, [*row["certificates"], *known.get(row["image_id"], {}).get("docs", [])],
                      row["labels"]) for row in merge_store(listing.rows, known)]
    return {**listing.to_json(), "images": rows, "store": where, "trusted_keys": trusted.to_json()}


def _cert_doc(c: CertificateRecord) -> dict:
    return {"status": c.status, "gpu_model": c.gpu_model, "driver": c.driver, "created_at": c.created_at,
            "reasons": c.document.get("reasons", []), "source": "store", "metrics": c.metrics,
            "expect": c.document.get("expect") or {}, "document": c.document}


def show_image(engine: Engine | None, ref: str, store_url: str | None, *, trusted_keys: str | None = None,
               **read: Any) -> dict:
    """An image's pins, lock hash and certificates.

    From the local engine and the store when the engine has ``ref``; else, when ``ref`` names a
    registry (``host[:port]/repo:tag`` or ``...@sha256:``), from the registry without pulling it
    (manifest, config labels, certificate artifacts, ``:certified``). A local image named by a
    registry reference also gets the registry's view (under ``registry``).

    ``certificates`` holds every certificate the gate of ``envkit run`` weighs: the store's and, for a
    registry reference (local copy or not), the registry's artifacts, each with its ``source``. A store
    named (``store_url``, ``$ENVKIT_STORE``) that does not exist is an error, never read as no certificates.
    A registry certificate counts only when it verifies with a trusted key (``trusted_keys``, else
    ``$ENVKIT_TRUSTED_KEYS``) for the digest read; the others are under ``uncounted_certificates``, with why.
    """
    trusted = load_trusted_keys(trusted_keys)
    read = {**read, "trusted": trusted}
    info = engine.inspect(ref) if engine is not None else None
    if info is None:
        remote_ref = parse_ref(ref)
        if remote_ref is None:
            raise EngineError(f"no image {ref!r} in the engine",
                              hint="pull it, build it with `envkit build SPEC`, or name it in the registry "
                                   "(host[:port]/repository:tag) to read it from there without pulling")
        store = Store.open_existing(store_url, must_exist=True)  # before the registry: a typo fails at once
        remote = inspect_remote(engine, remote_ref, **read)
        view = remote.to_json()
        certs = list(view["certificates"])
        if store is not None:
            with store:
                certs = certs + [_cert_doc(c) for c in store.certificates_for(remote.facts.config_digest)]
        return {"image": ref, "source": "registry", "id": view["id"], "size": None,
                "compressed_size": view["compressed_size"], "user": view["user"],
                "require_cuda": view["require_cuda"], "labels": view["labels"], "certificates": certs,
                "uncounted_certificates": view.get("uncounted_certificates", []), "registry": view,
                "trusted_keys": trusted.to_json()}
    labels = {k: v for k, v in sorted(info.labels.items()) if k.startswith(SHOWN)}
    certs = []
    store = Store.open_existing(store_url, must_exist=True)  # reading leaves no empty history database behind
    if store is not None:
        with store:
            certs = [_cert_doc(c) for c in store.certificates_for(info.id)]
    doc: dict[str, Any] = {"image": ref, "source": "local", "id": info.id, "size": info.size, "user": info.user,
           "require_cuda": info.env.get("NVIDIA_REQUIRE_CUDA"), "labels": labels, "certificates": certs,
           "uncounted_certificates": [], "trusted_keys": trusted.to_json()}
    remote_ref = parse_ref(ref)
    if remote_ref is not None:  # a local copy of a registry image: add what the registry says
        try:
            doc["registry"] = inspect_remote(engine, remote_ref, **read).to_json()
        except EnvkitError as exc:
            doc["registry"] = {"error": exc.message, "hint": exc.hint}
        else:  # its certificates are this image's too, as the gate weighs them
            doc["certificates"] = [*certs, *doc["registry"]["certificates"]]
            doc["uncounted_certificates"] = doc["registry"].get("uncounted_certificates", [])
    return doc


def certification_gate(engine: Engine | None, ref: str, *, on_gpus: bool, store_url: str | None,
                       trusted_keys: str | None = None) -> Verdict:
    """Whether ``ref`` was certified for this host's GPUs (``gate.judge``), from the certificates ``show_image``
    gives: the store's and, for a registry reference, the registry's that verify with a trusted key (unreadable:
    the store's alone, noted)."""
    return gate_of(show_image(engine, ref, store_url, trusted_keys=trusted_keys), ref, on_gpus=on_gpus)


def gate_of(doc: dict, ref: str, *, on_gpus: bool) -> Verdict:
    """``certification_gate`` for what ``show_image`` gave (``envkit pull`` reads the image once for both)."""
    registry: dict = doc.get("registry") or {}
    gpus, unread = host_gpus() if on_gpus else ([], None)
    labels = doc.get("labels")
    verdict = judge(doc["certificates"], gpus, on_gpus=on_gpus, image=ref,
                    envkit_built=labels is None or bool(labels.get(LOCK_LABEL)))
    notes = (
        [f"this host's GPUs could not be read ({unread}), so a certified certificate on any model counts"]
        if unread
        else []
    )
    if registry.get("error") and not verdict.passed:
        notes.append(f"the registry's certificates could not be read: {registry['error']}")
    uncounted = doc.get("uncounted_certificates") or []
    if uncounted and not verdict.passed:
        notes.append("registry certificates that do not count: " + "; ".join(
            f"{u.get('status') or '?'} on {u.get('gpu_model') or '?'}: {u['why']}" for u in uncounted))
    hint = verdict.hint
    tampered = [a for a in registry.get("attestations") or [] if a.get("why") in TAMPERED]
    if tampered:  # evidence that someone changed what was signed: nothing about this image is taken on trust
        verdict = replace(verdict, passed=False, message=f"{ref}: " + "; ".join(
            f"its {a.get('predicate_type') or 'unnamed'} attestation was {a['why']}" for a in tampered),
            hint="the registry holds attestations changed after signing: tell the platform team; pull the "
                 "image again after the next signed nightly run re-attests it")
    if registry and not (doc.get("trusted_keys") or {}).get("fingerprints") and not verdict.passed:
        notes.append("no trusted key configured, so no registry certificate counts")
        hint = f"{GET_KEY_HINT}; or {hint}"
    if notes:
        verdict = replace(verdict, message=f"{verdict.message} ({'; '.join(notes)})", hint=hint)
    return verdict


def run_in_image(engine: Engine, ref: str, command: list[str], *, gpus: bool | None, shm_size: str,
                 store_url: str | None = None, require_certified: bool = False,
                 warn: Callable[[str], None] = lambda _: None, timeout: int = RUN_TIMEOUT,
                 output: Callable[[bytes, bool], None] | None = None, stdin: BinaryIO | None = None,
                 tty: Callable[[], tuple[int, int]] | None = None,
                 around_job: Callable[[], ContextManager[object]] = contextlib.nullcontext,
                 trusted_keys: str | None = None,
                 ) -> tuple[RunResult, Verdict]:
    """Run ``command`` in ``ref`` with the flags it needs, after the certification gate: an image not certified
    for this host runs with ``warn(message)``, or (``require_certified``) is refused (exit 8). ``output``: stream
    the job's output to it as it comes (``RunOptions.output``); else it is collected in the result. Stopped after
    ``timeout`` seconds (the result's ``timed_out``, exit 124). ``stdin``: a binary stream fed to the job's stdin
    (``RunOptions.stdin``); None: the job's stdin is closed. ``tty``: a pseudo-terminal whose (rows, columns)
    this gives (``RunOptions.tty``). ``around_job``: a context manager factory entered around the job alone,
    after the gate has spoken (the CLI puts the user's terminal in raw mode there)."""
    use_gpus = engine.nvidia_runtime() if gpus is None else gpus
    verdict = certification_gate(engine, ref, on_gpus=use_gpus, store_url=store_url, trusted_keys=trusted_keys)
    if not verdict.passed:
        if require_certified:
            raise VerificationError(f"refusing to run it: {verdict.message}", hint=verdict.hint + " (or drop "
                                    "--require-certified / ENVKIT_REQUIRE_CERTIFIED to run it anyway, with a warning)")
        warn(f"warning: {verdict.message}\n  hint: {verdict.hint}")
    options = RunOptions(gpus=use_gpus, shm_size=shm_size, timeout=timeout, output=output, stdin=stdin, tty=tty,
                         ulimits=GPU_ULIMITS if use_gpus else {})
    with around_job():
        return engine.run(ref, command or ["python3", "/opt/envkit/envkit_check"], options), verdict


def list_team_images(store_url: str | None, engine_of: Callable[[], Engine | None] | None, *,
                     registry: str | None = None, client: Engine | None = None, gpu: str | None = None,
                     certified: bool = False, trusted_keys: str | None = None, **read: Any) -> dict:
    """`envkit ls`: the team's images, from the store (what build, certify and nightly recorded) and, with a
    ``registry`` (HOST[:PORT][/PATH]), every envkit image there joined with the store's knowledge of it, plus the
    store's images under that path the registry does not hold. Each row has its framework, CUDA and where it
    stands per GPU model (``standing``). ``gpu``: each row's ``status`` is its state on that model;
    ``certified``: only the images certified (on ``gpu``, else on any GPU model)."""
    if registry is None:
        doc: dict = {"images": list_images(store_url, engine_of), "registry": None}
    else:
        doc = list_registry_images(client, registry, store_url, trusted_keys=trusted_keys, **read)
        if doc["store"] is not None:
            seen = {r["image_id"] for r in doc["images"]}
            doc["images"] += [r for r in list_images(store_url, engine_of)
                              if r["image_id"] not in seen and _under(r["tag"], doc["prefix"] or "")]
    doc["images"] = [r for r in (_for_gpu(r, gpu) for r in doc["images"])
                     if not certified or certified_on(from_json(r["standing"]), gpu)]
    return {**doc, "gpu": gpu, "certified_only": certified}


def _for_gpu(row: dict, gpu: str | None) -> dict:
    return row if gpu is None else {**row, "status": summary(from_json(row["standing"]), gpu)}


def _under(tag: str, prefix: str) -> bool:
    """A store row's tag (``team/image:stack``, or a registry reference) under a registry path prefix."""
    repository = tag.rpartition(":")[0] if ":" in tag.rpartition("/")[2] else tag
    names = {repository, repository.partition("/")[2]}
    return not prefix or any(n == prefix or n.startswith(prefix + "/") for n in names)
