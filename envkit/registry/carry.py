"""The image's signatures and attestations an offline bundle carries (docs/trust.md, "Offline bundles"), so that a
site without the registry can check what the team signed about the image it rebuilds.

``fetch_carried`` reads them from the team registry when the bundle is made (``bundle make --registry``): the image
the lock's tag names there, when its ``io.envkit.lock-hash`` label is the bundle's lock hash; its cosign
signatures (``sha256-<hex>.sig``) as cosign's own output files (``cosign sign --output-payload/--output-signature``:
the simple-signing payload and the base64 signature, which ``cosign verify-blob`` reads) and each DSSE envelope of
its ``sha256-<hex>.att`` (certificates, SBOM, provenance) as it was signed. File names carry the image's manifest
digest (the subject every one of them must name):

    sha256-<hex>.sig.<n>.payload.json   sha256-<hex>.sig.<n>.b64   sha256-<hex>.att.<n>.dsse.json

``judge_carried`` verifies them with the site's trusted keys at ``bundle build``: each verifies with a trusted key
for that digest, and a certificate's lock hash is the bundle's; the others are listed with why and never count, and
one altered after signing or truncated refuses the bundle (exit 8), as the gate refuses such an image.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..certify.certificate_predicate import CERTIFICATE_PREDICATE_TYPE
from ..errors import TrustError
from ..images.bundle_manifest import MANIFEST, read_attestations
from ..support.labels import LOCK_LABEL
from ..trust.attest import verify_attestation
from ..trust.cosign import SIGNATURE_ANNOTATION, SIMPLE_SIGNING_TYPE, verify_signature
from ..trust.dsse import TAMPERED
from ..trust.keys import TrustedKeys
from .remote import _Reader
from .remote_parse import parse_ref
from .signatures import DSSE_TYPE, att_tag, read_layers, sig_tag

CARRIED_NAME = re.compile(r"(?P<digest>sha256-[0-9a-f]{64})\.(?P<kind>sig|att)\.(?P<n>\d+)\."
                          r"(?P<part>payload\.json|b64|dsse\.json)")


@dataclass(frozen=True)
class Carried:
    """What ``fetch_carried`` found: the files to carry (name -> bytes), the image's pinned reference, or why none."""

    files: dict[str, bytes] = field(default_factory=dict)
    pinned: str | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {"from": self.pinned, "files": sorted(self.files), "note": self.note or None}


def fetch_carried(client: Any, ref: str, lock_hash: str, *, retries: int = 2, sleep: Any = time.sleep) -> Carried:
    """The signatures and attestations of the registry image ``ref`` (``host[:port]/team/image:tag``), when it is
    there and of ``lock_hash``; else no file, and a note saying why (nothing is carried that the lock did not make)."""
    parsed = parse_ref(ref)
    if parsed is None:
        return Carried(note=f"{ref} names no registry")
    reader = _Reader(client, parsed.registry, retries=retries, backoff=0.5, sleep=sleep)
    manifest = reader.manifest(parsed.repository, parsed.reference)
    if manifest is None:
        return Carried(note=f"{ref} is not in the registry (not published yet): no signature or attestation carried")
    labels = reader.facts(parsed.repository, manifest, ref).labels
    if labels.get(LOCK_LABEL) != lock_hash:
        return Carried(note=f"{ref} in the registry is of another lock ({labels.get(LOCK_LABEL)}): nothing carried")
    digest, prefix = manifest.digest, sig_tag(manifest.digest).removesuffix(".sig")
    repo = reader.repo(parsed.repository)
    files: dict[str, bytes] = {}
    signatures = reader.read(lambda: read_layers(repo, sig_tag(digest)), f"the signatures of {ref}") or []
    for n, layer in enumerate(x for x in signatures if x.media_type == SIMPLE_SIGNING_TYPE):
        files[f"{prefix}.sig.{n}.payload.json"] = layer.data
        files[f"{prefix}.sig.{n}.b64"] = layer.annotations.get(SIGNATURE_ANNOTATION, "").encode()
    attestations = reader.read(lambda: read_layers(repo, att_tag(digest)), f"the attestations of {ref}") or []
    for n, layer in enumerate(x for x in attestations if x.media_type == DSSE_TYPE):
        files[f"{prefix}.att.{n}.dsse.json"] = layer.data
    return Carried(files, f"{parsed.repo}@{digest}", "" if files else f"{ref} has no signature or attestation")


def judge_carried(files: Mapping[str, bytes], trusted: TrustedKeys, lock_hash: str) -> list[dict]:
    """Each carried signature and attestation (``fetch_carried``'s files, by name) as the site's keys see it:
    ``{"file", "kind", "signed_by", "predicate_type"?}`` when it verifies for the digest its name carries (a
    certificate also for ``lock_hash``), else ``{"file", "kind", "why"}``. A ``TrustError`` (exit 8) when one was
    altered after signing or is truncated: the bundle carries a tampered document of its image."""
    judged = []
    for name in sorted(files):
        match = CARRIED_NAME.fullmatch(name)
        if match is None or match["part"] == "payload.json":
            continue  # (a signature's payload is judged with its signature)
        digest = match["digest"].replace("-", ":", 1)
        try:
            if match["kind"] == "sig":
                payload = files.get(name.removesuffix("b64") + "payload.json", b"")
                _, signer = verify_signature(payload, files[name].decode(errors="replace"), trusted, digest)
                judged.append({"file": name, "kind": "signature", "signed_by": signer})
                continue
            verified = verify_attestation(files[name], trusted, digest)
        except TrustError as exc:
            judged.append({"file": name, "kind": _kind(match["kind"]), "why": exc.reason})
            continue
        entry = {"file": name, "kind": "attestation", "predicate_type": verified.predicate_type,
                 "signed_by": verified.signed_by}
        predicate = verified.statement.get("predicate") or {}
        if verified.predicate_type == CERTIFICATE_PREDICATE_TYPE and predicate.get("lock_hash") != lock_hash:
            entry = {**entry, "why": f"for another lock {predicate.get('lock_hash')}"}
            del entry["signed_by"]
        judged.append(entry)
    tampered = [j for j in judged if j.get("why") in TAMPERED]
    if tampered:
        raise TrustError(f"the bundle carries {len(tampered)} signed document(s) of its image that do not verify: "
                         + ", ".join(f"{j['file']} ({j['why']})" for j in tampered), reason=tampered[0]["why"],
                         hint="make the bundle again from the team registry (`envkit bundle make SPEC --bundle DIR "
                              "--registry REGISTRY`), and tell the platform team: the registry's copy may be tampered")
    return judged


def check_bundle_carried(bundle_dir: Path, trusted: TrustedKeys) -> dict:
    """``bundle build``'s check of what the bundle carries of its image, after its own signature verified (so its
    manifest's lock hash is the team's): ``{"checked": True, "documents": judge_carried(...)}``; with no trusted key
    ``{"checked": False, ...}`` (listed, never counted)."""
    files = read_attestations(bundle_dir)
    names = sorted(name for name in files if CARRIED_NAME.fullmatch(name))
    if not trusted:
        return {"checked": False, "documents": [{"file": name} for name in names]}
    lock_hash = json.loads((Path(bundle_dir) / MANIFEST).read_text()).get("lock_hash", "")
    return {"checked": True, "documents": judge_carried({n: files[n] for n in names}, trusted, lock_hash)}


def _kind(kind: str) -> str:
    return "signature" if kind == "sig" else "attestation"
