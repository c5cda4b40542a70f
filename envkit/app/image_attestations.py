"""What is attested beside every image envkit pushes and signs (``registry.signing.sign_published``'s
``documents``): its CycloneDX SBOM (``trust.sbom``: the lock's wheels and the image's Debian packages) and its SLSA
provenance (``trust.provenance``), each made only when the image's ``.att`` lacks one by the signing key.

The provenance comes from the history store's record of the image's build (``Store.find_build``, keyed by the
image's lock hash and its ``io.envkit.context-hash`` label), so an image the run did not rebuild (skipped,
published by an earlier run) gets the facts of the build that made it, never this run's. What no record says is
left out or said "unknown", never guessed: the record's builder (classic | buildkit | reproducible) and envkit
version go into ``runDetails.builder.version``, "unknown" for a row recorded before the store kept them (or no
row); the build's times are given only when the record says envkit built it (``action == "built"``: it ended at
the record's ``created_at`` and took ``seconds``); an image without the context label has no context hash.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ..lock import Lock, LockedImage
from ..support.labels import BASE_LABEL, CONTEXT_LABEL
from ..trust.provenance import PROVENANCE_PREDICATE_TYPE, build_provenance
from ..trust.sbom import SBOM_PREDICATE_TYPE, sbom_for

if TYPE_CHECKING:
    from ..engine.protocol import Engine
    from ..store.history import Store

Documents = dict[str, Callable[[], dict]]


def recorded_provenance(engine: Engine, store: Store, image: LockedImage, *, ref: str, spec_path: str) -> dict:
    """The SLSA predicate of the image ``ref`` (on ``engine``) from the store's record of its build."""
    info = engine.inspect(ref)
    labels = info.labels if info is not None else {}
    context = labels.get(CONTEXT_LABEL) or None
    record = store.find_build(image.name, image.hash, context) if context else None
    started = finished = None
    if record is not None and record.action == "built" and record.created_at:
        finished = datetime.fromisoformat(record.created_at)
        started = finished - timedelta(seconds=record.seconds)
    builder, version = (record.builder, record.envkit_version) if record is not None else (None, None)
    return build_provenance(image, spec_path=spec_path, builder=builder or None, envkit_version=version or None,
                            context_hash=context, started_on=started, finished_on=finished,
                            base_id=labels.get(BASE_LABEL) or None)


def image_documents(engine: Engine, store: Store, image: LockedImage, *, ref: str, digest: str,
                    spec_path: str) -> Documents:
    """Predicate type -> the function making it, for the image ``ref`` pushed as ``digest``."""
    return {SBOM_PREDICATE_TYPE: lambda: sbom_for(engine, image, ref=ref, manifest_digest=digest),
            PROVENANCE_PREDICATE_TYPE: lambda: recorded_provenance(engine, store, image, ref=ref,
                                                                   spec_path=spec_path)}


def documents_for(engine: Engine, store: Store, image: LockedImage, ref: str,
                  spec_path: str) -> Callable[[str], Documents]:
    """``image_documents`` once the pushed digest is known (what the publishers take)."""
    return lambda digest: image_documents(engine, store, image, ref=ref, digest=digest, spec_path=spec_path)


def lock_documents(engine: Engine, store: Store, lock: Lock, name: str, ref: str,
                   spec_path: str) -> Callable[[str], Documents]:
    """``documents_for`` the lock's image ``name``."""
    return documents_for(engine, store, next(i for i in lock.images if i.name == name), ref, spec_path)
