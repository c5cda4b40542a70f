"""spec -> lock: ``envkit resolve``, ``lock --check``, ``explain``; and the lock every later command starts from
(``resolve_spec``: resolved and written, reused while current, or used as it is with ``--locked``).

The app package joins the stages for the CLI, one typed function per command, each returning data the CLI formats:
``resolve`` (this module), ``build`` (render, build, bundle make), ``certify`` (verify, certify), ``researchers``
(ls, show, run), ``catalog`` (catalog refresh, check-arches) and ``nightly``. Commands that are one module's job
(doctor, gc, registry prune, catalog exclude/export, schema, bundle build) call that module directly.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..catalog.files import load_catalog
from ..catalog.models import Catalog
from ..errors import EnvkitError, LockError, PackageIndexError, ResolutionError, SpecError
from ..index.client import PackageIndex
from ..index.closure import compile_closure
from ..index.login import check_netrc, check_netrc_text, keyring_logins
from ..index.sizes import uv_known, with_sizes
from ..index.urls import DEFAULT_INDEX
from ..lock import Lock, LockedImage, load_lock, lock_changes, write_lock
from ..resolve.plan import check_frameworks, check_gpus, plan, spec_digests
from ..resolve.resolver import resolve
from ..resolve.rules import unreachable_variant_ways_out
from ..spec import Spec, env_ca_skip_note, load_spec
from ..support.atomic import check_writable
from ..support.progress import Progress

if TYPE_CHECKING:
    from ..resolve.plan import ImagePlan


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
    """The spec, checked against the catalog (``check_spec``), for a command that does not plan it."""
    spec, catalog = _read(spec_path)
    check_spec(spec, catalog)
    return spec, catalog


def _read(spec_path: Path) -> tuple[Spec, Catalog]:
    """The spec and the catalog, not yet checked together: ``plan`` checks them when it runs, ``check_spec`` when
    it does not (each is checked once per command)."""
    return load_spec(spec_path), load_catalog()


def check_spec(spec: Spec, catalog: Catalog) -> None:
    """The checks of the spec that need the catalog, as ``plan`` makes them first: frameworks and fleet GPUs."""
    check_frameworks(spec)
    check_gpus(spec, catalog)


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
                 progress: Progress = lambda _: None, loaded: tuple[Spec, Catalog] | None = None) -> Resolved:
    """Resolve the spec and write its lock (or reuse a lock that still matches). ``locked``: use the lock as it
    is, never writing it; a missing or stale one is a ``LockError`` (exit 5) saying why. ``loaded``: the spec (of
    ``spec_path``) and the catalog, when the caller has read them already (the nightly): not read again."""
    spec, catalog = loaded or _read(spec_path)  # checked by plan when resolving, by check_spec when not
    lock_path = lock_path_for(spec_path, lock_path)
    if locked:
        return _locked(spec_path, spec, catalog, lock_path, progress)
    previous = _current(spec_path, spec, catalog, lock_path) if reuse and lock_path.exists() else None
    if previous is not None and not drift(spec, catalog, previous):
        check_spec(spec, catalog)
        progress(f"{lock_path} is up to date")
        return Resolved(spec, previous, lock_path, True)
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
    indexes = {index.url: index}

    def index_for(url: str) -> PackageIndex:  # one client per index (its listings cached), for the sizes too
        if url.rstrip("/") not in indexes:
            indexes[url.rstrip("/")] = PackageIndex(url, ca_bundle=ca)
        return indexes[url.rstrip("/")]

    try:
        with keyring_logins(logins):
            lock = resolve(spec, catalog, index, closure=functools.partial(compile_closure, ca_bundle=ca),
                           index_for=index_for,
                           sizes=lambda image: with_sizes(image, index_for, uv_known(ca), memo=index))
    except (PackageIndexError, ResolutionError) as exc:
        _unreachable_variant(exc, spec, catalog)
        raise
    if previous is None and lock_path.exists():
        previous = _previous(lock_path)
    moved = lock_changes(previous, lock) if lock_path.exists() else None
    write_lock(lock, lock_path)
    return Resolved(spec, lock, lock_path, False, moved)


def _current(spec_path: Path, spec: Spec, catalog: Catalog, lock_path: Path) -> Lock:
    """The lock on disk, read once: for the drift check, then for what a resolve moved. A lock that cannot be read
    (corrupt, edited by hand) is an error, never silently replaced: `envkit resolve` rewrites it on purpose; a
    readable lock that no longer matches (drift) is re-resolved, as asked."""
    try:
        return load_lock(lock_path)
    except LockError as exc:
        check_spec(spec, catalog)  # the spec's own error first
        raise LockError(exc.message, hint=f"`envkit resolve {spec_path}` writes a new one; envkit does not "
                                          "overwrite a lock it cannot read on its own") from None


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


def _builds(p: ImagePlan) -> list:
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


def _locked(spec_path: Path, spec: Spec, catalog: Catalog, lock_path: Path, progress: Progress) -> Resolved:
    check_spec(spec, catalog)  # (no plan runs: the lock is used as it is)
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


def explain(spec_path: Path, image: str) -> ImagePlan:
    """The plan for one image: every choice and rejected alternative (catalog only, no network)."""
    spec, catalog = _read(spec_path)  # (plan checks them)
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


