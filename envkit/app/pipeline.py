"""The stages joined: spec -> lock -> rendered contexts -> built and verified images.

One typed function per pipeline command (resolve, lock, explain, render, build, bundle make, verify, certify,
catalog refresh, ls, show, run); each returns data the CLI formats. Commands that are one module's job (nightly,
doctor, gc, registry prune, catalog exclude/export, schema, bundle build) call that module directly.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ..build.builder import LOCK_LABEL, Outcome, Progress, build_image, require_builder
from ..payload.harness import Verification, expect_from_labels, run_payload
from ..catalog.models import Catalog, load_catalog
from ..index.closure import compile_closure
from ..engine.protocol import RUN_TIMEOUT
from ..errors import (EngineError, EnvkitError, LockError, PackageIndexError, ResolutionError, SpecError,
                      VerificationError)
from ..frameworks import require_buildable, require_bundle, expected
from ..index.client import DEFAULT_INDEX, PackageIndex
from ..index.login import check_netrc, check_netrc_text, keyring_logins
from ..support.labels import SHOWN
from ..support.atomic import check_writable
from ..lock import Lock, LockedImage, load_lock, lock_changes, write_lock
from ..render.files import Rendered, render
from ..resolve.resolver import check_frameworks, check_gpus, plan, resolve, spec_digests
from ..spec import Spec, env_ca_skip_note, load_spec
from ..store.history import Store


def lock_path_for(spec_path: Path, lock_path: Path | None = None) -> Path:
    """The lock of ``spec_path``: ``lock_path`` when given (``--lock``), else team.yaml -> team.lock beside it.
    Never the spec itself (``--lock`` naming it, or a spec named ``*.lock``): writing the lock would replace it."""
    path = lock_path or spec_path.with_suffix(".lock")
    if os.path.realpath(path) == os.path.realpath(spec_path) or _same_file(path, spec_path):
        given = f"--lock {lock_path}" if lock_path else "a spec named *.lock"
        raise SpecError(f"{spec_path} would be its own lock ({given}): writing the lock would replace the spec",
                        hint="give --lock another path, or name the spec *.yaml (its lock is then *.lock beside it)",
                        location=None)
    return path


def _same_file(a: Path, b: Path) -> bool:
    """Both name one existing file (a hard link too)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@dataclass
class Resolved:
    spec: Spec
    lock: Lock
    lock_path: Path
    reused: bool
    moved: dict[str, list[str]] | None = None  # per image, what changed since the lock this resolve replaced


def load(spec_path: Path) -> tuple[Spec, Catalog]:
    spec = load_spec(spec_path)
    catalog = load_catalog()
    check_frameworks(spec)
    check_gpus(spec, catalog)
    return spec, catalog


def drift(spec: Spec, catalog: Catalog, lock: Lock) -> list[str]:
    """Why ``lock`` no longer describes ``spec`` + ``catalog`` (empty when it still does)."""
    reasons = []
    if lock.spec_digest not in spec_digests(spec):
        reasons.append("the spec changed since the lock was written")
    if lock.catalog_digest != catalog.digest:
        reasons.append("the catalog changed since the lock was written")
    if lock.team != spec.team:
        reasons.append(f"the lock is for team {lock.team!r}, the spec for {spec.team!r}")
    if {i.name for i in lock.images} != {i.name for i in spec.images}:
        reasons.append("the lock's images differ from the spec's")
    return reasons


def resolve_spec(spec_path: Path, *, lock_path: Path | None = None, reuse: bool = False, locked: bool = False,
                 progress: Callable[[str], None] = lambda _: None) -> Resolved:
    """Resolve the spec and write its lock (or reuse a lock that still matches). ``locked``: use the lock as it
    is, never writing it; a missing or stale one is a ``LockError`` (exit 5) saying why."""
    spec, catalog = load(spec_path)
    lock_path = lock_path_for(spec_path, lock_path)
    if locked:
        return _locked(spec_path, spec, catalog, lock_path, progress)
    if reuse and lock_path.exists():
        # a lock that cannot be read (corrupt, edited by hand) is an error, never silently replaced: `envkit resolve`
        # rewrites it on purpose; a readable lock that no longer matches (drift) is re-resolved, as asked
        try:
            lock = load_lock(lock_path)
        except LockError as exc:
            raise LockError(exc.message, hint=f"`envkit resolve {spec_path}` writes a new one; envkit does not "
                                              "overwrite a lock it cannot read on its own") from None
        if not drift(spec, catalog, lock):
            progress(f"{lock_path} is up to date")
            return Resolved(spec, lock, lock_path, True)
    check_writable(lock_path)  # before minutes of resolving, not after
    if note := env_ca_skip_note(spec):
        progress(note)
    progress(f"resolving {len(spec.images)} image(s) against the catalog and the package index")
    # the CA bundle the builds get verifies the resolver's TLS too (a mirror signed by a company CA)
    ca = spec.ca_bundle_path()
    if spec.build.index_url or spec.build.variant_index_url:
        check_netrc()  # a company index's login: a malformed netrc fails here, with its line, not as a 401
    else:
        check_netrc_text()  # requests reads it even for PyPI
    index = PackageIndex(spec.build.index_url or DEFAULT_INDEX, ca_bundle=ca)
    # a login only the keyring holds, for envkit's requests and uv: the spec's index and its variant mirror's
    logins = [spec.build.index_url, *(variant_indexes(spec, catalog) if spec.build.variant_index_url else ())]
    try:
        with keyring_logins(logins):
            lock = resolve(spec, catalog, index, closure=functools.partial(compile_closure, ca_bundle=ca),
                           index_for=lambda url: PackageIndex(url, ca_bundle=ca))
    except (PackageIndexError, ResolutionError) as exc:
        _unreachable_variant(exc, spec, catalog)
        raise
    moved = lock_changes(_previous(lock_path), lock) if lock_path.exists() else None
    write_lock(lock, lock_path)
    return Resolved(spec, lock, lock_path, False, moved)


def _previous(lock_path: Path) -> Lock | None:
    """The lock a resolve replaces, to say what moved (one that cannot be read: every image counts as new)."""
    try:
        return load_lock(lock_path)
    except LockError:
        return None


def _planned(spec: Spec, catalog: Catalog) -> list:
    """The plan of each image that has one (an image the plan refuses is left out: resolve says why)."""
    plans = []
    for image in spec.images:
        try:
            plans += plan(spec, catalog, only=[image.name])
        except EnvkitError:
            continue
    return plans


def _builds(p) -> list:
    """The builds a plan may lock: its choice, then the others that fit."""
    return list(dict.fromkeys((p.chosen, *p.viable)))


def variant_indexes(spec: Spec, catalog: Catalog) -> list[str]:
    """The variant indexes (``build.variant_index_url`` filled in) the resolver may ask for the spec's images, from
    the plan alone: the keyring is asked for these URLs (then their host), as pip asks it."""
    return list(dict.fromkeys(c.index for p in _planned(spec, catalog) for c in _builds(p) if c.index))


def _unreachable(text: str, url: str) -> bool:
    """Whether ``text`` (envkit's index client's error, or uv's) says the index at ``url`` did not answer, or answered
    without the project or the simple API; never a login (a 401's hint says where one goes)."""
    at = re.escape(url.rstrip("/"))
    return bool(re.search(rf"(cannot reach the package index at|cannot fetch|Failed to fetch:|error sending request "
                          rf"for url \()\s*{at}/|the index {at} has no project|{at}/\S* answered \d+ without", text))


def _unreachable_variant(exc: EnvkitError, spec: Spec, catalog: Catalog) -> None:
    """An index error naming the variant index of an image's build (not a login: that hint says where one goes):
    the hint gains the ways out (``rules.unreachable_variant_ways_out``): a mirror, a build from the spec's own
    index, a driver that runs the release's default build."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from ..resolve.rules import unreachable_variant_ways_out

    text = " ".join(str(x) for x in (exc.message, exc.hint or "", getattr(exc, "cause", "")))
    if "ways out:" in (exc.hint or ""):
        return
    for p in _planned(spec, catalog):
        if not exc.message.startswith(f"image {p.target.name!r}") and len(spec.images) > 1:
            continue
        failed = next((c for c in _builds(p) if c.index and _unreachable(text, c.index)), None)
        if failed is None:
            continue
        ways = unreachable_variant_ways_out(
            failed, catalog, p.fleet, p.python, SpecifierSet(p.target.cuda) if p.target.cuda else None,
            Requirement(p.target.framework), spec.build.variant_index_url, spec.build.index_url)
        exc.hint = (f"{exc.hint}\n  " if exc.hint else "") + ways
        return


def _locked(spec_path: Path, spec: Spec, catalog: Catalog, lock_path: Path, progress) -> Resolved:
    if not lock_path.exists():
        raise LockError(f"--locked needs a lock at {lock_path}, and there is none",
                        hint=f"run `envkit resolve {spec_path}` first (and commit the lock), or drop --locked")
    lock = load_lock(lock_path)
    reasons = drift(spec, catalog, lock)
    if reasons:
        raise LockError(f"{lock_path} is stale for {spec_path} and --locked uses it as it is: {'; '.join(reasons)}",
                        hint=f"`envkit resolve {spec_path}` re-resolves it (commit the new lock), or drop --locked")
    progress(f"{lock_path} is up to date")
    return Resolved(spec, lock, lock_path, True)


def explain(spec_path: Path, image: str):
    """The plan for one image: every choice and rejected alternative (catalog only, no network)."""
    spec, catalog = load(spec_path)
    spec.image(image)
    return plan(spec, catalog, only=[image])[0]


def locked_image(spec_path: Path, image: str, lock_path: Path | None = None) -> LockedImage | None:
    """``image`` as SPEC's lock holds it, while that lock is current (what the extras made of the plan, and each
    pip: package's version and why); None without one."""
    spec, catalog = load(spec_path)
    path = lock_path_for(spec_path, lock_path)
    try:
        lock = load_lock(path)
    except LockError:
        return None
    if drift(spec, catalog, lock):
        return None
    return next((i for i in lock.images if i.name == image), None)


def check_lock(spec_path: Path, lock_path: Path | None = None) -> list[str]:
    spec, catalog = load(spec_path)
    lock = load_lock(lock_path_for(spec_path, lock_path))
    return drift(spec, catalog, lock)


def render_spec(spec_path: Path, out_root: Path, *, lock_path: Path | None = None, locked: bool = False,
                only: list[str] | None = None, progress=lambda _: None) -> tuple[Resolved, Rendered]:
    """Render the lock's images; a missing or stale lock is re-resolved and written first, unless ``locked``."""
    resolved = resolve_spec(spec_path, lock_path=lock_path, reuse=True, locked=locked, progress=progress)
    for name in only or ():
        resolved.spec.image(name)
    rendered = render(resolved.lock, out_root, _display(spec_path), only)
    return resolved, rendered


def build_spec(spec_path: Path, out_root: Path, engine, *, lock_path: Path | None = None, locked: bool = False,
               only: list[str] | None = None, verify: bool = True, builder: str = "classic",
               progress: Progress = lambda *_: None) -> tuple[Resolved, list[Outcome]]:
    require_builder(engine, builder)  # before resolving: BuildKit without its CLI fails at once
    resolved, _ = render_spec(spec_path, out_root, lock_path=lock_path, locked=locked, only=only,
                              progress=lambda msg: progress("*", msg))
    ca = resolved.spec.ca_bundle_path()
    if resolved.reused and (note := env_ca_skip_note(resolved.spec)):  # (a resolve said so already)
        progress("*", note)
    for image in resolved.lock.images:  # refuse before building any
        if not only or image.name in only:
            require_buildable(image)
    outcomes = []
    for image in resolved.lock.images:
        if only and image.name not in only:
            continue
        outcomes.append(build_image(engine, resolved.lock, image, _display(spec_path), ca_bundle=ca,
                                    progress=progress, verify=verify, builder=builder))
    return resolved, outcomes


@dataclass
class Bundled:
    resolved: Resolved
    image: LockedImage
    path: Path
    manifest: dict
    size: int

    def to_json(self) -> dict:
        return {"bundle": str(self.path), "image": self.image.name, "tag": self.manifest["tag"],
                "lock": str(self.resolved.lock_path), "lock_reused": self.resolved.reused,
                "lock_hash": self.image.hash, "base": self.manifest["base"], "files": len(self.manifest["files"]),
                "wheels": sum(1 for f in self.manifest["files"] if f.startswith("context/wheelhouse/")),
                "size_bytes": self.size}


def bundle_spec(spec_path: Path, out_dir: Path, engine, *, image: str | None = None,
                progress: Callable[[str], None] = lambda _: None) -> Bundled:
    """Resolve (or reuse the lock of) the spec and write an offline bundle of one image into ``out_dir``."""
    from ..build.bundle import MANIFEST, bundle_size, check_replaceable, make_bundle

    check_replaceable(Path(out_dir).absolute())  # before resolving: nothing is fetched for a bad --out
    resolved = resolve_spec(spec_path, reuse=True, progress=progress)
    if image is None:
        names = [i.name for i in resolved.lock.images]
        if len(names) != 1:
            raise SpecError(f"{spec_path} has {len(names)} images ({', '.join(names)}); a bundle holds one",
                            hint="choose it with --image NAME")
        image = names[0]
    resolved.spec.image(image)
    locked = resolved.lock.image(image)
    require_bundle(locked)
    progress(f"bundling {image} into {out_dir} (written beside it, renamed into place when complete)")
    path = make_bundle(engine, resolved.lock, image, out_dir, ca_bundle=resolved.spec.ca_bundle_path(),
                       spec_name=_display(spec_path), progress=progress,
                       extra_index_url=resolved.spec.build.index_url or DEFAULT_INDEX)  # as the resolver's
    manifest = json.loads((path / MANIFEST).read_text())
    return Bundled(resolved, locked, path, manifest, bundle_size(path))


def _display(spec_path: Path) -> str:
    try:
        return str(spec_path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(spec_path)


def expectations(engine, ref: str, lock_path: Path | None):
    """The image, its lock hash, and what must hold inside it: its pin labels, or the lock's entry."""
    info = engine.inspect(ref)
    if info is None:
        raise EngineError(f"no image {ref!r} in the engine", hint="build it with `envkit build SPEC`")
    lock_hash = info.labels.get(LOCK_LABEL)
    if not lock_hash:
        raise VerificationError(f"{ref} was not built by envkit (it has no {LOCK_LABEL} label)",
                                hint="envkit verifies and certifies the images it builds, by the pins their labels "
                                     "carry: build this stack with `envkit build SPEC` and verify that image "
                                     "(`envkit ls` and `docker images` list the envkit images here)")
    if lock_path is None:
        return info, lock_hash, expect_from_labels(info.labels)
    match = [i for i in load_lock(lock_path).images if i.hash == lock_hash]
    if not match:
        raise VerificationError(f"{ref} was built from lock hash {lock_hash[:19]}, which {lock_path} does not contain",
                                hint="rebuild it with `envkit build SPEC`, or pass the lock it came from")
    return info, lock_hash, expected(match[0])


def verify_image(engine, ref: str, *, lock_path: Path | None = None) -> Verification:
    """Check inside ``ref`` that what it holds equals its pin labels (and the lock, if given). The payload's
    own verdict is judged again by the host's rules (``certificate.decide``, as certify does): a document that
    says ``verified`` beside a failed check, or claims a GPU check passed with no GPU, fails here too."""
    from ..certify.certificate import decide

    _, _, expect = expectations(engine, ref, lock_path)
    v = run_payload(engine, ref, expect)
    status, reasons = decide(v.raw, expect, gpu_requested=False)
    if status == "failed":
        v.status = "failed"
        # a failed check is already in mismatches as "name: message"; add what only the host saw
        v.mismatches += [r for r in reasons if not r.startswith("check ")]
    return v


def certify(engine, ref: str, *, lock_path: Path | None, gpus: bool | None, out_dir: Path,
            store_url: str | None, timeout: int = 600):
    """Certify ``ref``; write the certificate and the reports into ``out_dir`` (one set, replacing what is there),
    then record the certificate in the store. Both places are tried before the payload runs, so a path that cannot
    be used fails in seconds, not after the run; the store is written last, as the record ``run``'s gate trusts."""
    from ..certify.certificate import certify_image, slug
    from ..support.atomic import check_writable
    from .nightly import perf_metrics
    from ..catalog.perf import load_perf
    from ..certify.report import FILES, write_reports

    info, lock_hash, expect = expectations(engine, ref, lock_path)
    load_perf()  # the floors the verdict judges: a broken team perf.yaml fails now, not after the payload ran
    for name in FILES.values():
        check_writable(out_dir / name)
    with Store.open(store_url):
        pass
    use_gpus = engine.nvidia_runtime() if gpus is None else gpus
    cert = certify_image(engine, ref, expect, gpus=use_gpus, timeout=timeout)
    paths = write_reports([cert], out_dir, also={"certificate": (f"certificate-{slug(cert.gpu_model)}.json",
                                                                 cert.to_bytes())})
    with Store.open(store_url) as store:
        store.record_certificate(info.id, cert.gpu_model, cert.driver, status=cert.status, lock_hash=lock_hash,
                                 document=cert.to_json(), metrics=perf_metrics(cert))
    return cert, paths


def refresh_catalog(*, apply: bool, frameworks=(), progress=lambda _: None) -> dict:
    """Propose catalog rows for new releases of ``frameworks`` (default: all); write them when ``apply``."""
    from datetime import date

    from ..catalog.refresh import parse_frameworks, refresh_catalog as refresh

    chosen = parse_frameworks(frameworks)
    progress(f"reading {', '.join(chosen)} releases from the package index")
    result = refresh(load_catalog(), PackageIndex(), today=date.today().isoformat(), frameworks=chosen)
    if apply and result.changed:
        for path in result.apply():
            progress(f"wrote {path}")
    return {**result.summary(), "applied": bool(apply and result.changed)}  # "files": what changes, or would


def check_catalog_arches(*, apply: bool, frameworks=(), progress=lambda _: None) -> dict:
    """Compare the catalog's compiled arch lists with the index's wheels; write the corrections when ``apply``."""
    from datetime import date

    from ..catalog.refresh.arches import ARCH_FRAMEWORKS, check_arches

    chosen = tuple(f for f in ARCH_FRAMEWORKS if not frameworks or f in frameworks)
    progress(f"reading the compiled arch lists of {', '.join(chosen)} wheels from the package index")
    index = PackageIndex()
    result = check_arches(load_catalog(), index, today=date.today().isoformat(), frameworks=chosen)
    if apply and result.changed:
        for path in result.apply():
            progress(f"wrote {path}")
    return {**result.summary(), "bytes_fetched": index.bytes_fetched, "applied": bool(apply and result.changed)}


def _store_images(store) -> dict[str, dict]:
    """image id -> {"tag", "created", "certificates": [(gpu model, status, created_at)], "records": [...]}."""
    out = {}
    for image_id, tag, created in store.images():
        records = store.certificates_for(image_id)
        out[image_id] = {"tag": tag, "created": created, "records": records,
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
    from ..support.labels import IMAGE_LABEL, TEAM_LABEL

    team, image = labels.get(TEAM_LABEL), labels.get(IMAGE_LABEL)
    if not team or not image:
        return None
    repo = f"{team}/{image}"
    mine = sorted(t for t in tags if t.rpartition(":")[0] == repo)
    if mine:
        return mine[0]
    version = labels.get("org.opencontainers.image.version")
    return f"{repo}:{version}" if version else None


def list_images(store_url: str | None, engine_of: Callable[[], object | None] | None = None) -> list[dict]:
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
        rows.append({"tag": tag, "reference": known["tag"], "image_id": image_id, "stack": stack_of(tag),
                     "certification": {c.gpu_model: c.status for c in certs},
                     "date": max([known["created"], *[c.created_at for c in certs]])[:10]})
    return sorted(rows, key=lambda r: r["tag"])


def _inspect_quietly(engine, ref: str):
    """``engine.inspect(ref)``, or None without an engine or when it cannot say (ls names the image as recorded)."""
    if engine is None:
        return None
    try:
        return engine.inspect(ref)
    except EnvkitError:
        return None


def list_registry_images(client, registry: str, store_url: str | None, **read) -> dict:
    """What the registry holds (every envkit image, certification per GPU model from its certificate
    artifacts), joined with the store's rows for the same images when a store is at hand."""
    from ..registry.remote import list_registry, merge_store

    store = Store.open_existing(store_url, must_exist=True)  # a named store adds to it: a typo fails at once
    listing = list_registry(client, registry, **read)
    if store is None:
        return {**listing.to_json(), "store": None}
    with store:
        known = _store_images(store)
        where = store.where
    return {**listing.to_json(), "images": merge_store(listing.rows, known), "store": where}


def _cert_doc(c) -> dict:
    return {"status": c.status, "gpu_model": c.gpu_model, "driver": c.driver, "created_at": c.created_at,
            "reasons": c.document.get("reasons", []), "source": "store"}


def show_image(engine, ref: str, store_url: str | None, **read) -> dict:
    """An image's pins, lock hash and certificates.

    From the local engine and the store when the engine has ``ref``; else, when ``ref`` names a
    registry (``host[:port]/repo:tag`` or ``...@sha256:``), from the registry without pulling it
    (manifest, config labels, certificate artifacts, ``:certified``). A local image named by a
    registry reference also gets the registry's view (under ``registry``).

    ``certificates`` holds every certificate the gate of ``envkit run`` weighs: the store's and, for a
    registry reference (local copy or not), the registry's artifacts, each with its ``source``. A store
    named (``store_url``, ``$ENVKIT_STORE``) that does not exist is an error, never read as no certificates.
    """
    from ..registry.remote import inspect_remote, parse_ref

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
                "registry": view}
    labels = {k: v for k, v in sorted(info.labels.items()) if k.startswith(SHOWN)}
    certs = []
    store = Store.open_existing(store_url, must_exist=True)  # reading leaves no empty history database behind
    if store is not None:
        with store:
            certs = [_cert_doc(c) for c in store.certificates_for(info.id)]
    doc = {"image": ref, "source": "local", "id": info.id, "size": info.size, "user": info.user,
           "require_cuda": info.env.get("NVIDIA_REQUIRE_CUDA"), "labels": labels, "certificates": certs}
    remote_ref = parse_ref(ref)
    if remote_ref is not None:  # a local copy of a registry image: add what the registry says
        try:
            doc["registry"] = inspect_remote(engine, remote_ref, **read).to_json()
        except EnvkitError as exc:
            doc["registry"] = {"error": exc.message, "hint": exc.hint}
        else:  # its certificates are this image's too, as the gate weighs them
            doc["certificates"] = [*certs, *doc["registry"]["certificates"]]
    return doc


def certification_gate(engine, ref: str, *, on_gpus: bool, store_url: str | None):
    """Whether ``ref`` was certified for this host's GPUs (``gate.judge``), from the certificates ``show_image``
    gives: the store's and, for a registry reference, the registry's certificate artifacts (unreadable: the
    store's alone, noted)."""
    from ..certify.gate import host_gpus, judge

    doc = show_image(engine, ref, store_url)
    registry = doc.get("registry") or {}
    gpus, unread = host_gpus() if on_gpus else ([], None)
    labels = doc.get("labels")
    verdict = judge(doc["certificates"], gpus, on_gpus=on_gpus, image=ref,
                    envkit_built=labels is None or bool(labels.get(LOCK_LABEL)))
    notes = [f"this host's GPUs could not be read ({unread}), so a certified certificate on any model counts"] if unread else []
    if registry.get("error") and not verdict.passed:
        notes.append(f"the registry's certificates could not be read: {registry['error']}")
    if notes:
        verdict = replace(verdict, message=f"{verdict.message} ({'; '.join(notes)})")
    return verdict


def run_in_image(engine, ref: str, command: list[str], *, gpus: bool | None, shm_size: str,
                 store_url: str | None = None, require_certified: bool = False, warn=lambda _: None,
                 timeout: int = RUN_TIMEOUT, output=None, stdin=None,
                 tty: Callable[[], tuple[int, int]] | None = None, around_job=contextlib.nullcontext):
    """Run ``command`` in ``ref`` with the flags it needs, after the certification gate: an image not certified
    for this host runs with ``warn(message)``, or (``require_certified``) is refused (exit 8). ``output``: stream
    the job's output to it as it comes (``RunOptions.output``); else it is collected in the result. Stopped after
    ``timeout`` seconds (the result's ``timed_out``, exit 124). ``stdin``: a binary stream fed to the job's stdin
    (``RunOptions.stdin``); None: the job's stdin is closed. ``tty``: a pseudo-terminal whose (rows, columns)
    this gives (``RunOptions.tty``). ``around_job``: a context manager factory entered around the job alone,
    after the gate has spoken (the CLI puts the user's terminal in raw mode there)."""
    from ..engine.protocol import GPU_ULIMITS, RunOptions

    use_gpus = engine.nvidia_runtime() if gpus is None else gpus
    verdict = certification_gate(engine, ref, on_gpus=use_gpus, store_url=store_url)
    if not verdict.passed:
        if require_certified:
            raise VerificationError(f"refusing to run it: {verdict.message}", hint=verdict.hint + " (or drop "
                                    "--require-certified / ENVKIT_REQUIRE_CERTIFIED to run it anyway, with a warning)")
        warn(f"warning: {verdict.message}\n  hint: {verdict.hint}")
    options = RunOptions(gpus=use_gpus, shm_size=shm_size, timeout=timeout, output=output, stdin=stdin, tty=tty,
                         ulimits=GPU_ULIMITS if use_gpus else {})
    with around_job():
        return engine.run(ref, command or ["python3", "/opt/envkit/envkit_check"], options), verdict
