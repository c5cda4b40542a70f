"""`envkit nightly --reproducible`: every build goes through the reproducible path (``images.reproducible``), each
image's environment layers are checked against the lock's layer record (``images.layer_record``, as `envkit verify
--lock` checks them: ``app.certify.check_layers``), and a run that re-resolved writes the record of its lock.

An image whose layers differ from the record's entry for its lock hash fails (it is neither certified nor
published): its report and a failed certificate (one check, ``layers``, naming each group and both digests) say so,
the store keeps that certificate, and the run's exit code is ``LAYERS_DIFFER``. An entry of another lock hash, or no
entry, is no failure: a run that re-resolved (no ``--locked``) writes the entry of the image it built, beside the
lock it writes; a ``--locked`` run writes nothing and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from ..certify.certificate import Certificate, certificate_from, utc_now
from ..frameworks import expected
from ..images.layer_record import Recorded, entry, layers_of, load_record, record_path, write_record
from ..payload.contents import SCHEMA
from ..support.labels import made_reproducibly
from ..support.progress import Progress
from .certify import check_layers

if TYPE_CHECKING:
    from ..engine.protocol import ImageInfo
    from ..lock import LockedImage
    from ..store.history import Store
    from .nightly_publish import ImageReport


@dataclass
class LayerStep:
    """The record beside the lock as this run found it, and the entries the run writes (``write``: it re-resolved
    the lock and writes it)."""

    lock_path: Path
    write: bool
    found: dict[str, Recorded]
    entries: list[Recorded] = field(default_factory=list)
    checks: dict[str, dict] = field(default_factory=dict)  # image name -> its check ``layers``
    failed: list[Certificate] = field(default_factory=list)  # the certificates of the images whose layers differ

    @classmethod
    def open(cls, lock_path: Path, *, locked: bool) -> LayerStep:
        return cls(lock_path, not locked, load_record(lock_path))  # an unreadable record fails now (exit 5)

    @property
    def path(self) -> Path:
        return record_path(self.lock_path)

    def judge(self, store: Store, image: LockedImage, report: ImageReport, info: ImageInfo, gpus: bool) -> bool:
        """Check ``image``'s layers against its entry (``checks``: the check ``layers``, as verify's; skipped without
        an entry) and say so in ``report.layers``; False when they differ: the image failed (``layers_failed``)."""
        recorded = self.found.get(image.name)
        check = check_layers(info, image.name, image.hash, recorded, self.path) if recorded else None
        made = made_reproducibly(info.labels)
        digests = layers_of(image, info.layers, info.labels) if made else {}
        rewrite = self.write and made and (recorded is None or recorded.lock_hash != image.hash)
        if rewrite:
            self.entries.append(entry(image, digests))
        report.layers = layers_doc(check, made, digests, self.path, rewrite)
        # no entry: a skipped check all the same, so that every certificate of the run says what was found
        self.checks[image.name] = check or {"name": "layers", "status": "skipped", "value": digests or None,
                                            "expected": None, "message": report.layers["message"], "seconds": 0.0}
        if check is None or check["status"] != "failed":
            return True
        report.status = "failed"
        report.reasons.append(f"layers: {check['message']}")
        report.worked = True
        self.failed.append(layers_failed(store, image, report, info, check, gpus))
        return False

    def finish(self, progress: Progress) -> Path | None:
        """Write the entries of the images this run built beside the lock it wrote."""
        if not (self.write and self.entries):
            return None
        path = write_record(self.lock_path, self.entries)
        progress(f"wrote {path} (the environment layers of {', '.join(e.image for e in self.entries)})")
        return path


def layers_doc(check: dict | None, made: bool, digests: dict[str, str], where: Path, rewrite: bool) -> dict:
    """An image's ``layers`` in the nightly's JSON: whether envkit wrote its environment layers, their digests, and
    what the check against the record said (``check``: passed | failed | skipped | no record)."""
    if check is None:
        message = f"no record of this image in {where}" + (
            ": this run writes it" if rewrite else
            ": `envkit build SPEC --reproducible --record` (or a nightly that re-resolves) writes it")
    else:
        message = check["message"] + ("; this run writes the entry of this lock" if rewrite else "")
    differs = [{"group": g, "record": check["expected"][g], "image": got}
               for g, got in (check["value"] or {}).items()] if check and check["status"] == "failed" else []
    return {"reproducible": made, "check": check["status"] if check else "no record", "message": message,
            "differs": differs, "digests": digests, "record": str(where), "recorded": rewrite}


def layers_failed(store: Store, image: LockedImage, report: ImageReport, info: ImageInfo, check: dict,
                  gpus: bool) -> Certificate:
    """The certificate of an image whose layers are not the lock's, recorded in the store (so its history says
    why): failed, its one check the layer check. The payload is not run: the image is not the one its lock
    describes, so no verdict on it is worth a GPU's time."""
    doc = {"schema": SCHEMA, "status": "failed", "facts": {}, "checks": [check]}
    cert = certificate_from(doc, expected(image), image=report.tag, image_id=info.id, lock_hash=image.hash,
                            gpu_requested=gpus, created_at=utc_now(), envkit_version=__version__)
    store.record_certificate(info.id, cert.gpu_model, cert.driver, status=cert.status, lock_hash=image.hash,
                             document=cert.to_json())
    return cert
