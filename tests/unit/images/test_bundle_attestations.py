"""A bundle carries the signed documents of its image (``attestations/``): written before the manifest hashes the
bundle, so an envelope changed, removed or added afterwards fails ``verify_bundle`` like any other file, and read
back only from a bundle that checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envkit.errors import BuildError
from envkit.images.bundle import write_attestations
from envkit.images.bundle_manifest import MANIFEST, bundle_attestations, file_hashes
from tests.unit.images.test_bundle_manifest import FILES, manifest

ENVELOPE = json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": "e30=",
                       "signatures": [{"keyid": "", "sig": "MEUC"}]}).encode()


def bundle(tmp_path: Path, attestations: dict[str, bytes]) -> Path:
    """A bundle made as make_bundle makes one: its files, its attestations, then the manifest over them all."""
    out = tmp_path / "torch25.bundle"
    for name, data in FILES.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    write_attestations(out, attestations)
    (out / MANIFEST).write_text(json.dumps({**manifest(), "files": file_hashes(out)}))
    return out


def test_attestations_are_carried_hashed_and_read_back(tmp_path):
    out = bundle(tmp_path, {"certificate-h200.dsse.json": ENVELOPE, "sbom.dsse.json": b"{}"})
    assert json.loads((out / MANIFEST).read_text())["files"]["attestations/certificate-h200.dsse.json"]
    assert bundle_attestations(out) == {"certificate-h200.dsse.json": ENVELOPE, "sbom.dsse.json": b"{}"}


def test_a_bundle_without_attestations_has_none(tmp_path):
    out = bundle(tmp_path, {})
    assert not (out / "attestations").exists() and bundle_attestations(out) == {}


@pytest.mark.parametrize("change", ["alter", "remove", "add"])
def test_an_envelope_changed_after_the_bundle_was_made_fails_the_check(tmp_path, change):
    out = bundle(tmp_path, {"certificate-h200.dsse.json": ENVELOPE})
    target = out / "attestations" / "certificate-h200.dsse.json"
    if change == "alter":
        target.write_bytes(ENVELOPE.replace(b"MEUC", b"MEUD"))
    elif change == "remove":
        target.unlink()
    else:
        (out / "attestations" / "forged.dsse.json").write_bytes(ENVELOPE)
    with pytest.raises(BuildError, match="does not match its manifest"):
        bundle_attestations(out)


@pytest.mark.parametrize("name", ["../manifest.json", "a/b.json", ".hidden", ""])
def test_a_name_that_is_not_a_plain_file_name_is_refused(tmp_path, name):
    with pytest.raises(BuildError, match="cannot name a bundle's attestation file"):
        write_attestations(tmp_path, {name: ENVELOPE})
