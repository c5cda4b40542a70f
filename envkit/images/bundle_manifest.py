"""What an offline bundle is, checked before any of it is used: its layout (``manifest.json``, ``envkit.lock``,
``base.tar``, ``context/``, ``attestations/``), the manifest's shape (``Manifest``) and every file's sha256 against
it (``verify_bundle``: nothing changed, missing or added). The one file the manifest cannot hash is the bundle's own
signed statement about the manifest (``SIGNATURE``, written after it; ``trust.bundle`` makes and verifies it): the
manifest binds every other file, the signature binds the manifest."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Annotated

from pydantic import ConfigDict, Field, StrictInt, StrictStr, ValidationError

from ..errors import BuildError
from ..support.models import Strict
from .layer_record import record_path

BUNDLE_VERSION = 1
MANIFEST = "manifest.json"
LOCK_FILE = "envkit.lock"
BASE_ARCHIVE = "base.tar"
CONTEXT = "context"
LAYER_RECORD = record_path(Path(LOCK_FILE)).name  # the image's entry of the lock's layer record, when carried
INSTALLER = "installer"  # the pinned uv wheel for the image's arch (`bundle build --reproducible` installs with it)
DOCKERFILES = {"classic": "Dockerfile", "buildkit": "buildkit.Dockerfile"}
# The signed documents of what the bundle holds, as their signer made them (DSSE envelopes of the image's
# certificates, SBOM and provenance; cosign signatures), one file each, by a plain name: hashed into the manifest
# like every file; whether each verifies, and with which key, is the trust gate's to say, as for the registry's
ATTESTATIONS = "attestations"
_ATTESTATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
# The bundle's own signed statement (a DSSE envelope of an in-toto Statement whose subject is manifest.json by its
# sha256): written after the manifest, so the one file of the bundle that the manifest does not list
SIGNATURE = f"{ATTESTATIONS}/bundle.intoto.json"
BUNDLE_LABEL = "io.envkit.bundle"  # the manifest's sha256, on images built from a bundle
_Digest = Field(pattern=r"^sha256:[0-9a-f]{64}$")


class _ManifestBase(Strict):
    ref: StrictStr = Field(min_length=1)
    id: StrictStr = _Digest


class Manifest(Strict):
    """manifest.json's shape (what ``make_bundle`` writes), checked before any of it is used; a key it does not
    know is ignored (a newer envkit's manifest)."""

    model_config = ConfigDict(extra="ignore")
    version: StrictInt
    image: StrictStr = Field(min_length=1)
    tag: StrictStr = Field(min_length=1)
    lock_hash: StrictStr = Field(min_length=1)
    base: _ManifestBase
    # builder -> the Dockerfile's name in context/
    dockerfiles: dict[StrictStr, StrictStr] = Field(min_length=1)
    # every other file of the bundle (relative path) -> its sha256
    files: dict[StrictStr, Annotated[StrictStr, _Digest]] = Field(min_length=1)
    team: StrictStr | None = None
    flavour: StrictStr | None = None
    generated: StrictStr | None = None


REMAKE_HOW = "make the bundle again with `envkit bundle make SPEC --out DIR`"
_REMAKE = f"the manifest is damaged or was edited: {REMAKE_HOW}"


def _shape_error(path: Path, exc: ValidationError) -> BuildError:
    """The first problem of a manifest that does not have make_bundle's shape: its field and value."""
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return BuildError(f"{path}: the manifest has no {field!r}", hint=_REMAKE)
    return BuildError(f"{path}: manifest field {field!r} is {_shown(err.get('input'))}: {err['msg']}", hint=_REMAKE)


def _shown(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_bundle(path: Path) -> bool:
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and "version" in manifest and "files" in manifest


def verify_bundle(bundle_dir: Path) -> dict:
    """The manifest, once every file is present, unchanged, and no file was added."""
    path = Path(bundle_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: not JSON, not UTF-8
        raise BuildError(f"{bundle_dir} is not an envkit bundle: {exc}",
                         hint="make one with `envkit bundle make SPEC --bundle DIR`") from None
    if not isinstance(manifest, dict):
        kind = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}.get(
            type(manifest), "null")
        raise BuildError(f"{path}: the manifest is {kind} ({_shown(manifest)}), not a JSON object",
                         hint=_REMAKE)
    if manifest.get("version") != BUNDLE_VERSION:
        raise BuildError(f"{path}: unsupported bundle version {manifest.get('version')!r}",
                         hint=f"this envkit reads bundle version {BUNDLE_VERSION}; {REMAKE_HOW}")
    try:
        Manifest.model_validate(manifest)
    except ValidationError as exc:
        raise _shape_error(path, exc) from None
    expected, found = manifest["files"], file_hashes(Path(bundle_dir))
    problems = [f"{name}: changed" for name in sorted(expected) if name in found and found[name] != expected[name]]
    problems += [f"{name}: missing" for name in sorted(set(expected) - set(found))]
    problems += [f"{name}: not in the manifest" for name in sorted(set(found) - set(expected))]
    if problems:
        raise BuildError(f"{bundle_dir} does not match its manifest ({len(problems)} file(s))",
                         hint="\n    ".join(problems[:20]) + "\n    make the bundle again")
    return manifest


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (but the manifest and the signature over it), by relative path."""
    return {str(p.relative_to(root)): "sha256:" + sha256_of(p) for p in sorted(root.rglob("*"))
            if p.is_file() and str(p.relative_to(root)) not in (MANIFEST, SIGNATURE)}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def bundle_size(bundle_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(bundle_dir).rglob("*") if p.is_file())


def check_attestation_name(name: str) -> str:
    """``name``, when it can be a file of ``attestations/`` (a plain name: no directory, no leading dot)."""
    if not _ATTESTATION_NAME.fullmatch(name):
        raise BuildError(f"{name!r} cannot name a bundle's attestation file",
                         hint="a plain file name of letters, digits, '.', '_' and '-', e.g. sha256-<hex>.att.json")
    if f"{ATTESTATIONS}/{name}" == SIGNATURE:
        raise BuildError(f"{name!r} is the bundle's own signature over its manifest, not a carried document",
                         hint="name the image's document otherwise, e.g. sha256-<hex>.att.json")
    return name


def bundle_attestations(bundle_dir: Path) -> dict[str, bytes]:
    """The signed documents a bundle carries (``attestations/``), by file name, once ``verify_bundle`` has checked
    every file against the manifest; {} for a bundle made without any. The bundle's own signature (``SIGNATURE``)
    is not among them: it is about the bundle, not its image."""
    files = verify_bundle(bundle_dir)["files"]
    return {name: data for name, data in read_attestations(bundle_dir).items() if f"{ATTESTATIONS}/{name}" in files}


def read_attestations(bundle_dir: Path) -> dict[str, bytes]:
    """The files of ``attestations/`` but the bundle's own signature, by name, not checked against the manifest
    (for a reader that verifies each by its own signature before ``verify_bundle`` runs: ``bundle build``)."""
    folder = Path(bundle_dir) / ATTESTATIONS
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.is_file() and f"{ATTESTATIONS}/{p.name}" != SIGNATURE} if folder.is_dir() else {}
