"""render, build, bundle make: the lock's images as build contexts, images and offline bundles (``envkit render``,
``build``, ``bundle make``; a missing or stale lock is resolved and written first, unless ``--locked``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..certify.certificate import certificate_from, utc_now
from ..engine.protocol import AUTO
from ..engine.space import build_need, require_space, size
from ..errors import SpecError
from ..frameworks import expected, require_buildable, require_bundle
from ..images.builder import BuildProgress, Outcome, build_image, pick_builder, picked
from ..images.bundle import check_replaceable, make_bundle
from ..images.bundle_manifest import LAYER_RECORD, MANIFEST, bundle_size
from ..images.layer_record import entry, layers_of, load_record, write_record
from ..index.urls import DEFAULT_INDEX
from ..lock import LockedImage, wheel_bytes
from ..render.files import Rendered, image_tag, layer_packages, render
from ..spec import env_ca_skip_note
from ..store.history import Store
from ..support.labels import LOCK_LABEL
from ..support.progress import Planned, Progress
from .resolve import Resolved, resolve_spec

if TYPE_CHECKING:
    from ..engine.protocol import Engine
    from ..registry.carry import Carried
    from ..trust.keys import SigningKey


def render_spec(spec_path: Path, out_root: Path, *, lock_path: Path | None = None, locked: bool = False,
                only: list[str] | None = None, progress: Progress = lambda _: None,
                buildkit: bool = False) -> tuple[Resolved, Rendered]:
    """Render the lock's images (for BuildKit when ``buildkit``, else the classic builder); a missing or stale lock
    is re-resolved and written first, unless ``locked``."""
    resolved = resolve_spec(spec_path, lock_path=lock_path, reuse=True, locked=locked, progress=progress)
    for name in only or ():
        resolved.spec.image(name)
    rendered = render(resolved.lock, out_root, display_name(spec_path), only, buildkit=buildkit)
    return resolved, rendered


def build_spec(spec_path: Path, out_root: Path, engine: Engine, *, lock_path: Path | None = None, locked: bool = False,
               only: list[str] | None = None, verify: bool = True, builder: str = AUTO,
               progress: BuildProgress = lambda *_: None, store_url: str | None = None,
               record: bool = True, space_check: bool = True, reproducible: bool = False, no_cache: bool = False,
               record_layers: bool = False) -> tuple[Resolved, list[Outcome]]:
    """Pick the builder, resolve (or reuse the lock), check the engine has the disk the lock needs, render the
    contexts for that builder into ``out_root``'s dockerfiles/ (what is built is what is written), build them and
    verify; then record each image in the history store (``record``: the default store unless ``store_url`` names
    one), so `envkit ls` lists it: the build, and its verification as the CPU-only certificate ``envkit certify``
    without a GPU would write. ``space_check``: refuse (``DiskSpaceError``) before anything is rendered or built when
    the engine's disk has less free than the images to build need (``check_space``). ``reproducible``: envkit makes
    the environment layers (``images.reproducible``); ``record_layers``: their diff_ids are then written beside the
    lock (``images.layer_record``), for `envkit verify --lock`. ``no_cache``: ``build_image``'s (every image is built
    again, none kept)."""
    if builder != AUTO:  # named: checked before resolving (BuildKit without its CLI fails at once)
        builder = pick_builder(engine, builder)
    if record:
        with Store.open(store_url):  # a store that cannot be written fails now, not after the builds
            pass
    resolved = resolve_spec(spec_path, lock_path=lock_path, reuse=True, locked=locked,
                            progress=lambda msg: progress("*", msg))
    for name in only or ():
        resolved.spec.image(name)
    images = [i for i in resolved.lock.images if not only or i.name in only]
    for image in images:  # refuse before building any
        require_buildable(image)
    if space_check:
        check_space(engine, images, lambda msg: progress("*", msg), rebuild=no_cache)
    builder = picked(engine, builder)  # auto: decided once, here (a name was decided above)
    rendered = render(resolved.lock, out_root, display_name(spec_path), only, buildkit=builder == "buildkit")
    ca = resolved.spec.ca_bundle_path()
    if resolved.reused and (note := env_ca_skip_note(resolved.spec)):  # (a resolve said so already)
        progress("*", note)
    outcomes = []
    for image in images:
        progress(image.name, planned(image))
        outcome = build_image(engine, resolved.lock, image, display_name(spec_path), ca_bundle=ca,
                              progress=progress, verify=verify, builder=builder, reproducible=reproducible,
                              no_cache=no_cache, files=rendered.files[image.name])
        outcomes.append(outcome)
        if record:
            record_build(store_url, image, outcome)
    if record_layers:
        _record_layers(engine, resolved, outcomes, progress)
    return resolved, outcomes


def _record_layers(engine: Engine, resolved: Resolved, outcomes: list[Outcome], progress: BuildProgress) -> None:
    """Each image's environment layers beside the lock; an image skipped as already built gives its own, from the
    engine (the layers a reproducible build of this lock made)."""
    entries = []
    for o in outcomes:
        image = resolved.lock.image(o.name)
        info = None if o.layers else engine.inspect(o.image_id)
        layers = o.layers or (layers_of(image, info.layers, info.labels) if info is not None else {})
        entries.append(entry(image, layers))
    path = write_record(resolved.lock_path, entries)
    progress("*", f"wrote {path} (the environment layers of {', '.join(o.name for o in outcomes)})")


def check_space(engine: Engine, images: list[LockedImage], progress: Progress, *, rebuild: bool = False) -> None:
    """Refuse (``DiskSpaceError``, exit 17) a build of ``images`` the engine's disk cannot hold: the images not
    built yet (no image of their lock in the engine), estimated from their locks' wheel sizes
    (``engine.space.build_need``). A lock without sizes (written before they were recorded) is not estimated:
    each build then warns below the fixed threshold (``engine.space.low_space``). ``rebuild``: every image is
    built again (``--no-cache``), so every one counts."""
    todo = images if rebuild else [i for i in images if engine.find_image({LOCK_LABEL: i.hash}) is None]
    sizes = [wheel_bytes(i.packages) for i in todo]
    if not todo or any(s is None for s in sizes):
        return
    need = build_need([s for s in sizes if s is not None])
    free = require_space(engine, need, f"building {', '.join(i.name for i in todo)}")
    if free is not None:
        progress(f"engine disk: {size(free)} free; the build needs about {size(need)} (from the lock's wheel sizes)")


def planned(image: LockedImage) -> Planned:
    """What the build's display counts the install against: the lock's packages, their wheel sizes, and which
    packages each install step (a requirements file, named by its group) takes up."""
    groups = {group: tuple(p.name for p in packages) for group, packages in layer_packages(image).items()}
    groups["devel"] = tuple(p.name for p in image.packages if p.group == "devel")
    return Planned(len(image.packages), {p.name: p.size for p in image.packages if p.size is not None},
                   wheel_bytes(image.packages), groups)


def record_build(store_url: str | None, image: LockedImage, outcome: Outcome) -> None:
    """The build in the store (by lock and context hash: the outcome's, nothing read back from the engine), and its
    verification as a CPU-only certificate."""
    with Store.open(store_url) as store:
        store.record_build(outcome.name, image.hash, outcome.context_hash, tag=outcome.tag, image_id=outcome.image_id,
                           size=outcome.size, seconds=outcome.seconds, action=outcome.action,
                           builder=outcome.made_by, envkit_version=__version__)
        if outcome.verification is not None and outcome.verification.raw:
            cert = certificate_from(outcome.verification.raw, expected(image), image=outcome.tag,
                                    image_id=outcome.image_id, lock_hash=image.hash, gpu_requested=False,
                                    created_at=utc_now(), envkit_version=__version__)
            store.record_certificate(outcome.image_id, cert.gpu_model, cert.driver, status=cert.status,
                                     lock_hash=image.hash, document=cert.to_json())


@dataclass
class Bundled:
    resolved: Resolved
    image: LockedImage
    path: Path
    manifest: dict
    size: int
    signed_by: str | None = None  # the signing key's fingerprint; None: the bundle is unsigned
    carried: Carried | None = None  # the image's registry signatures and attestations (--registry); None: not asked

    def to_json(self) -> dict:
        return {"bundle": str(self.path), "image": self.image.name, "tag": self.manifest["tag"],
                "signed_by": self.signed_by, "carried": self.carried.to_json() if self.carried else None,
                "lock": str(self.resolved.lock_path), "lock_reused": self.resolved.reused,
                "lock_hash": self.image.hash, "base": self.manifest["base"], "files": len(self.manifest["files"]),
                "wheels": sum(1 for f in self.manifest["files"] if f.startswith("context/wheelhouse/")),
                "layer_record": LAYER_RECORD in self.manifest["files"],  # (the lock's, carried)
                "size_bytes": self.size}


def bundle_spec(spec_path: Path, out_dir: Path, engine: Engine, *, image: str | None = None,
                signing_key: SigningKey | None = None, registry: str | None = None,
                progress: Progress = lambda _: None) -> Bundled:
    """Resolve (or reuse the lock of) the spec and write an offline bundle of one image into ``out_dir``;
    ``signing_key`` signs the bundle's manifest (``trust.bundle``); ``registry``: the team registry, whose
    signatures and attestations of the image (the lock's tag there, of the same lock) the bundle carries
    (``registry.carry``)."""
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
    from ..trust.bundle import bundle_sealer  # (the SBOM library: only when a bundle is made)

    record = load_record(resolved.lock_path).get(image)  # (`verify --lock` of the bundle's lock reads it)
    if record is not None and record.lock_hash != locked.hash:
        record = None
    carried = None
    if registry:
        from ..registry.carry import fetch_carried  # (the registry client and crypto: only when asked)

        ref = f"{registry.rstrip('/')}/{image_tag(resolved.lock.team, locked)}"
        progress(f"reading the signatures and attestations of {ref}")
        carried = fetch_carried(engine, ref, locked.hash)
        progress(carried.note or f"carrying {len(carried.files)} signed document(s) of {carried.pinned}")
    path = make_bundle(engine, resolved.lock, image, out_dir, ca_bundle=resolved.spec.ca_bundle_path(),
                       spec_name=display_name(spec_path), progress=progress, record=record,
                       extra_index_url=resolved.spec.build.index_url or DEFAULT_INDEX,  # as the resolver's
                       seal=bundle_sealer(signing_key, locked) if signing_key else None,
                       attestations=carried.files if carried else None)
    manifest = json.loads((path / MANIFEST).read_text())
    return Bundled(resolved, locked, path, manifest, bundle_size(path),
                   signing_key.fingerprint if signing_key else None, carried)


def display_name(spec_path: Path | str) -> str:
    """The spec as the rendered files name it (``regenerate with `envkit render SPEC` ``): relative to the working
    directory where it is under it."""
    try:
        return str(Path(spec_path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(spec_path)
