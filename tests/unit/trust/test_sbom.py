"""The CycloneDX SBOM of a locked image, validated with cyclonedx-python-lib's strict validator against the official
CycloneDX 1.6 JSON schema it ships (the image's Debian packages here from a hand-written dpkg status file; the
real database of a real image: tests/integration/test_sbom_image.py)."""

from __future__ import annotations

import json

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from envkit import __version__
from envkit.engine.protocol import RunOptions, RunResult
from envkit.errors import EngineError
from envkit.trust.sbom import SBOM_PREDICATE_TYPE, DebPackage, image_sbom, parse_dpkg_status, read_dpkg_status
from tests.unit.lockfixtures import make_image

STATUS = """\
Package: libc6
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 12986
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Architecture: amd64
Multi-Arch: same
Source: glibc (2.36-9+deb12u4)
Version: 2.36-9+deb12u4
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.
 .
 A line after a paragraph break of the description.

Package: zlib1g
Status: install ok installed
Architecture: amd64
Source: zlib
Version: 1:1.2.13.dfsg-1
Description: compression library - runtime

Package: adduser
Status: install ok installed
Architecture: all
Version: 3.134
Conffiles:
 /etc/adduser.conf cc3493ecd2d09837ffdcc3e25fdfff18

Package: removed-but-configured
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0-1
"""
DIGEST = "sha256:" + "f" * 64


def valid(document: dict) -> None:
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(document))
    assert error is None, str(error)[:2000]


def test_dpkg_status_lists_the_installed_packages_with_their_source():
    debs = parse_dpkg_status(STATUS)
    assert debs == (DebPackage("adduser", "3.134", "all"), DebPackage("libc6", "2.36-9+deb12u4", "amd64", "glibc"),
                    DebPackage("zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib"))


def test_sbom_validates_and_lists_every_wheel_and_deb():
    image = make_image()
    doc = image_sbom(image, parse_dpkg_status(STATUS), ref="registry.example.org/vision/torch25:2.5.1",
                     manifest_digest=DIGEST)
    valid(doc)
    assert doc["bomFormat"] == "CycloneDX" and doc["specVersion"] == "1.6"
    purls = {c["purl"] for c in doc["components"]}
    assert {PackageURL.from_string(p).type for p in purls} == {"pypi", "deb"}
    assert "pkg:pypi/torch@2.5.1" in purls and "pkg:pypi/nvidia-cudnn-cu12@9.1.0.70" in purls  # PyPI: no qualifier
    assert "pkg:deb/debian/libc6@2.36-9%2Bdeb12u4?arch=amd64&distro=bookworm" in purls
    assert len(doc["components"]) == len(image.packages) + 3
    torch = next(c for c in doc["components"] if c["name"] == "torch")
    assert torch["hashes"] == [{"alg": "SHA-256", "content": "a" * 64}]
    assert [r["url"] for r in torch["externalReferences"]] == ["https://pypi.org/simple"]
    libc = next(c for c in doc["components"] if c["name"] == "libc6")
    assert {"name": "envkit:source", "value": "glibc"} in libc["properties"]


def test_sbom_metadata_names_the_image_its_digest_envkit_and_the_lock_hash():
    image = make_image()
    doc = image_sbom(image, (), ref="registry.example.org:5000/vision/torch25:2.5.1", manifest_digest=DIGEST)
    valid(doc)
    meta = doc["metadata"]
    subject = meta["component"]
    assert subject["type"] == "container" and subject["version"] == DIGEST
    assert subject["hashes"] == [{"alg": "SHA-256", "content": "f" * 64}]
    purl = PackageURL.from_string(subject["purl"])
    assert (purl.type, purl.name, purl.version) == ("oci", "torch25", DIGEST)
    assert purl.qualifiers == {"repository_url": "registry.example.org:5000/vision/torch25"}
    assert {p["name"]: p["value"] for p in meta["properties"]} == {
        "envkit:lock_hash": image.hash, "envkit:image": "torch25", "envkit:envkit_version": __version__}
    assert meta["tools"]["components"][0]["name"] == "envkit"
    # the image depends on every component: the dependency graph is whole
    root = next(d for d in doc["dependencies"] if d["ref"] == subject["bom-ref"])
    assert set(root["dependsOn"]) == {c["bom-ref"] for c in doc["components"]}


def test_a_local_image_without_digest_is_named_by_lock_hash():
    image = make_image()
    doc = image_sbom(image, (), ref="vision/torch25:2.5.1")
    valid(doc)
    assert doc["metadata"]["component"]["version"] == image.hash and "purl" not in doc["metadata"]["component"]


def test_a_wheel_from_the_only_index_that_is_not_pypi_carries_it_in_its_purl():
    mirror = "https://mirror.example.org/simple"
    doc = image_sbom(make_image(index_url=mirror), (), ref="vision/torch25:2.5.1")
    valid(doc)
    torch = next(c for c in doc["components"] if c["name"] == "torch")
    assert PackageURL.from_string(torch["purl"]).qualifiers == {"repository_url": mirror}


def test_two_indexes_are_both_named_and_none_is_guessed_for_the_purl():
    framework_index = "https://download.pytorch.org/whl/cu124"
    doc = image_sbom(make_image(index_url=framework_index, extra_index_url="https://pypi.org/simple"), (),
                     ref="vision/torch25:2.5.1")
    valid(doc)
    torch = next(c for c in doc["components"] if c["name"] == "torch")
    assert torch["purl"] == "pkg:pypi/torch@2.5.1"
    assert [r["url"] for r in torch["externalReferences"]] == [framework_index, "https://pypi.org/simple"]


def test_the_strict_validator_refuses_an_altered_sbom():
    doc = image_sbom(make_image(), parse_dpkg_status(STATUS), ref="vision/torch25:2.5.1")
    doc["components"][0]["hashes"] = [{"alg": "SHA-256", "content": "not hex"}]
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(doc)) is not None


def test_predicate_type_is_cosigns_cyclonedx_type():
    assert SBOM_PREDICATE_TYPE == "https://cyclonedx.org/bom"


class _Engine:
    def __init__(self, result: RunResult):
        self.result, self.calls = result, []

    def run(self, ref: str, command: list[str], options: RunOptions) -> RunResult:
        self.calls.append((ref, command, options))
        return self.result


def test_dpkg_status_is_read_in_a_container_without_network():
    engine = _Engine(RunResult(0, STATUS, ""))
    assert read_dpkg_status(engine, "vision/torch25:2.5.1") == STATUS  # type: ignore[arg-type]
    (ref, command, options), = engine.calls
    assert command == ["cat", "/var/lib/dpkg/status"] and not options.network and options.role == "sbom"


def test_an_image_without_a_dpkg_database_is_named():
    engine = _Engine(RunResult(1, "", "cat: /var/lib/dpkg/status: No such file or directory"))
    with pytest.raises(EngineError, match="could not read /var/lib/dpkg/status from x/y:1: cat: "):
        read_dpkg_status(engine, "x/y:1")  # type: ignore[arg-type]
