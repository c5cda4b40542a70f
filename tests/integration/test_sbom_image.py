"""An SBOM's Debian packages read from a real image's dpkg database through the engine (the smallest local
envkit base), checked against dpkg's own answer in the same image, and the SBOM validated against the official
CycloneDX 1.6 schema (cyclonedx-python-lib's strict validator)."""

from __future__ import annotations

import json

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from envkit.engine.protocol import RunOptions
from envkit.lock import BaseImage
from envkit.support.labels import CONTAINER_LABEL
from envkit.trust.sbom import parse_dpkg_status, read_dpkg_status, sbom_for
from tests.unit.lockfixtures import make_image

pytestmark = pytest.mark.integration


def test_debian_packages_of_a_real_image_are_what_dpkg_says(engine, dc, base):
    before = {c.id for c in dc.containers.list(all=True, filters={"label": f"{CONTAINER_LABEL}=sbom"})}
    debs = parse_dpkg_status(read_dpkg_status(engine, base))
    query = engine.run(base, ["dpkg-query", "-W", "-f", "${Package} ${Version} ${Architecture} ${db:Status-Abbrev}\n"],
                       RunOptions(network=False, timeout=120))
    assert query.exit_code == 0, query.stderr
    installed = {tuple(line.split()[:3]) for line in query.stdout.splitlines() if line.split()[3:] == ["ii"]}
    assert {(d.name, d.version, d.arch) for d in debs} == installed
    assert {"base-files", "dpkg", "libc6"} <= {d.name for d in debs}
    # the container that read it is gone
    assert {c.id for c in dc.containers.list(all=True, filters={"label": f"{CONTAINER_LABEL}=sbom"})} <= before


def test_sbom_of_a_real_image_validates_and_lists_its_debs(engine, base):
    suite = "bookworm" if "bookworm" in base else "trixie"
    image = make_image(base=BaseImage(ref=base, digest=None, distro="debian", suite=suite))
    doc = sbom_for(engine, image, ref=base)
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(doc))
    assert error is None, str(error)[:2000]
    debs = [c for c in doc["components"] if c["purl"].startswith("pkg:deb/debian/")]
    libc = next(c for c in debs if c["name"] == "libc6")
    assert f"arch=amd64&distro={suite}" in libc["purl"] or f"arch=arm64&distro={suite}" in libc["purl"]
    assert len(debs) > 50 and len(doc["components"]) == len(debs) + len(image.packages)
