"""An offline bundle's signature: what lets a site without the registry trust the bundle it builds its image from.

The bundle's manifest hashes every other file of the bundle (``images.bundle_manifest``); the team key signs the
manifest, as an in-toto Statement in a DSSE envelope (``trust.attest``) whose subject is ``manifest.json`` by its
sha256 and whose predicate is the image's CycloneDX SBOM from its lock (``trust.sbom.image_sbom``: every wheel, the
lock hash, the image and tag, envkit's version, the time; no Debian packages: the site builds them). It is the one
file the manifest does not list (``SIGNATURE``, written after it). So a file added, removed or changed fails the
manifest's check, and a manifest changed, or an envelope changed or taken from another bundle, fails this one.

``bundle_sealer`` makes the statement (``make_bundle``'s ``seal``); ``check_bundle_signature`` verifies it before
``bundle build`` builds anything: with trusted keys and no verifying statement it refuses (``TrustError``, exit 8,
saying why); with no trusted key it says the signature was not checked, and never counts that as trusted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from ..errors import TrustError
from ..images.bundle_manifest import MANIFEST, SIGNATURE
from ..lock import LockedImage
from .attest import attest, verify_attestation
from .keys import SigningKey, TrustedKeys
from .sbom import SBOM_PREDICATE_TYPE, image_sbom

NOT_CHECKED = "not checked: no trusted key given"
_RESIGN = "make the bundle again with `envkit bundle make SPEC --bundle DIR --signing-key FILE` (the team's key)"


def manifest_digest(manifest: bytes) -> str:
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def bundle_sealer(key: SigningKey, image: LockedImage) -> Callable[[bytes], bytes]:
    """The manifest's bytes -> the DSSE envelope of the signed statement about them (``make_bundle``'s ``seal``)."""

    def seal(manifest: bytes) -> bytes:
        ref = str(json.loads(manifest)["tag"])  # the manifest's own tag (make_bundle's image_tag)
        return attest(SBOM_PREDICATE_TYPE, image_sbom(image, (), ref=ref), MANIFEST, manifest_digest(manifest), key)

    return seal


def check_bundle_signature(bundle_dir: Path, trusted: TrustedKeys) -> dict:
    """``{"checked": True, "signed_by": fingerprint, "manifest": digest}`` when the bundle's statement verifies
    with a trusted key and its subject is the bundle's manifest as it is now; ``{"checked": False, "why": ...}``
    when no key is trusted (nothing is claimed); else a ``TrustError`` saying what did not verify: unsigned, signed
    by unknown key <fp>, altered after signing, for another manifest <digest>, truncated/malformed envelope.
    The files are checked against the manifest by ``verify_bundle``, before anything is built."""
    bundle_dir = Path(bundle_dir)
    signature = bundle_dir / SIGNATURE
    if not trusted:
        return {"checked": False, "why": NOT_CHECKED, "signed": signature.is_file()}
    try:
        manifest = (bundle_dir / MANIFEST).read_bytes()
    except OSError as exc:
        raise TrustError(f"{bundle_dir} has no readable {MANIFEST} to verify: {exc.strerror}",
                         reason="no manifest", hint="name a bundle directory that `envkit bundle make` wrote") from None
    digest = manifest_digest(manifest)
    if not signature.is_file():
        raise TrustError(f"{bundle_dir} is unsigned: it holds no {SIGNATURE}", reason="unsigned",
                         hint=f"a bundle made without --signing-key is not trusted where keys are; {_RESIGN}")
    try:
        verified = verify_attestation(signature.read_bytes(), trusted, digest)
    except TrustError as exc:
        if not exc.reason.startswith("for another image "):
            raise TrustError(f"{bundle_dir / SIGNATURE}: {exc.message}", reason=exc.reason,
                             hint=exc.hint or _RESIGN) from None
        other = exc.reason.removeprefix("for another image ")
        raise TrustError(f"{bundle_dir / SIGNATURE} is a signed statement about the manifest {other}, not this "
                         f"bundle's {digest}: the manifest was altered after signing, or the signature is another "
                         f"bundle's", reason=f"for another manifest {other}", hint=_RESIGN) from None
    if verified.predicate_type != SBOM_PREDICATE_TYPE:
        raise TrustError(f"{bundle_dir / SIGNATURE} holds a {verified.predicate_type} statement, not the bundle's",
                         reason="not a bundle statement", hint=_RESIGN)
    return {"checked": True, "signed_by": verified.signed_by, "manifest": digest}

