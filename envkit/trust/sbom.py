"""An image's SBOM: CycloneDX JSON (``cyclonedx-python-lib`` builds and serialises it) from what envkit knows.

Two sources, each the owner of its facts: the lock (``LockedImage.packages``: every wheel the build installs, by
name, version and sha256, from the image's indexes) and the image itself (its Debian packages, from the dpkg status
database ``/var/lib/dpkg/status``, read in a short container: ``read_dpkg_status``). The BOM's metadata names the
image (its manifest digest when known), envkit's version and the image's lock hash.

The lock does not record which of two indexes served a wheel (the framework's index is asked first, then the
spec's; the sha256 pins the file either way): a wheel's purl gets ``repository_url`` only when the image installs
from one index that is not PyPI, and each wheel lists its image's indexes as ``distribution`` references.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from debian.deb822 import Deb822
from packageurl import PackageURL

from .. import __version__
from ..engine.protocol import Engine, RunOptions
from ..errors import EngineError
from ..index.urls import DEFAULT_INDEX
from ..lock import LockedImage, Package

# The predicateType of a CycloneDX attestation, as `cosign attest --type cyclonedx` writes it.
SBOM_PREDICATE_TYPE = "https://cyclonedx.org/bom"
SPEC_VERSION = "1.6"  # JsonV1Dot6 below
DPKG_STATUS = "/var/lib/dpkg/status"
PROPERTY_PREFIX = "envkit:"  # CycloneDX property names: a namespace of our own (the spec's taxonomy advice)


@dataclass(frozen=True)
class DebPackage:
    """One installed Debian package, as the dpkg status database lists it."""

    name: str
    version: str
    arch: str
    source: str | None = None  # its source package when it names one (``Source: glibc (2.36-9)`` -> "glibc")


def parse_dpkg_status(text: str) -> tuple[DebPackage, ...]:
    """The installed packages of a dpkg status file (python-debian's deb822 reads the format), sorted by name;
    packages dpkg lists but does not have installed (removed with their config files kept, half-installed) are left
    out."""
    found = []
    for para in Deb822.iter_paragraphs(text.splitlines()):
        status = para.get("Status", "").split()
        if len(status) != 3 or status[2] != "installed" or not para.get("Package") or not para.get("Version"):
            continue
        source = para.get("Source")
        found.append(DebPackage(name=para["Package"], version=para["Version"], arch=para.get("Architecture", ""),
                                source=source.split()[0] if source else None))
    return tuple(sorted(found, key=lambda p: (p.name, p.arch)))


def read_dpkg_status(engine: Engine, ref: str) -> str:
    """The dpkg status database of the image ``ref`` on ``engine``, read with ``cat`` in a short container (no
    network) that the engine removes."""
    result = engine.run(ref, ["cat", DPKG_STATUS], RunOptions(network=False, timeout=120, role="sbom"))
    if result.timed_out or result.exit_code != 0:
        raise EngineError(f"could not read {DPKG_STATUS} from {ref}: "
                          f"{'timed out' if result.timed_out else result.stderr.strip() or f'exit {result.exit_code}'}",
                          hint="an SBOM lists the image's Debian packages from its dpkg database: envkit's images "
                               "are Debian-based and have one; check that the image is one envkit built")
    return result.stdout


def wheel_purl(package: Package, index: str | None) -> PackageURL:
    """``pkg:pypi/<name>@<version>``, with ``repository_url`` when the wheel comes from an index that is not PyPI."""
    qualifiers = {"repository_url": index} if index and index != DEFAULT_INDEX else None
    return PackageURL(type="pypi", name=package.name.lower().replace("_", "-"), version=package.version,
                      qualifiers=qualifiers)


def deb_purl(package: DebPackage, distro: str | None) -> PackageURL:
    """``pkg:deb/debian/<name>@<version>?arch=<arch>`` (and ``distro=<suite>`` when known), as the purl spec's deb
    type writes it."""
    qualifiers = {"arch": package.arch} if package.arch else {}
    if distro:
        qualifiers["distro"] = distro
    return PackageURL(type="deb", namespace="debian", name=package.name, version=package.version,
                      qualifiers=qualifiers or None)


def _indexes(image: LockedImage) -> list[str]:
    """The indexes the image's wheels come from, in the order the build asks them."""
    return [u for u in dict.fromkeys((image.index_url, image.extra_index_url)) if u]


def _wheel(package: Package, indexes: list[str]) -> Component:
    purl = wheel_purl(package, indexes[0] if len(indexes) == 1 else None)
    return Component(
        type=ComponentType.LIBRARY, name=package.name, version=package.version, purl=purl, bom_ref=purl.to_string(),
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h.removeprefix("sha256:")) for h in package.hashes
                if h.startswith("sha256:")],
        external_references=[ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(url))
                             for url in indexes],
        properties=[Property(name=PROPERTY_PREFIX + "group", value=package.group)])


def _deb(package: DebPackage, distro: str | None) -> Component:
    purl = deb_purl(package, distro)
    properties = [Property(name=PROPERTY_PREFIX + "source", value=package.source)] if package.source else []
    return Component(type=ComponentType.LIBRARY, name=package.name, version=package.version, purl=purl,
                     bom_ref=purl.to_string(), properties=properties)


def _subject(image: LockedImage, ref: str, manifest_digest: str | None) -> Component:
    """The BOM's own component: the image, by the reference given and its manifest digest when known."""
    purl = None
    if manifest_digest:
        repository = ref.split("@", 1)[0]
        if ":" in repository.rsplit("/", 1)[-1]:  # a tag after the last slash, not a registry's port
            repository = repository.rsplit(":", 1)[0]
        name = repository.rsplit("/", 1)[-1]
        purl = PackageURL(type="oci", name=name, version=manifest_digest,
                          qualifiers={"repository_url": repository} if repository != name else None)
    return Component(type=ComponentType.CONTAINER, name=ref, version=manifest_digest or image.hash, purl=purl,
                     bom_ref=f"image:{image.name}",
                     hashes=[HashType(alg=HashAlgorithm.SHA_256, content=manifest_digest.removeprefix("sha256:"))]
                     if manifest_digest else [])


def image_sbom(image: LockedImage, debs: tuple[DebPackage, ...], *, ref: str, manifest_digest: str | None = None,
               created: datetime | None = None) -> dict:
    """The CycloneDX 1.6 BOM (as a JSON document) of the image built from ``image``: every wheel of the lock and
    every Debian package in ``debs`` (``parse_dpkg_status`` of the image's database); ``ref`` names the image,
    ``manifest_digest`` (``sha256:…``, once pushed) pins it; ``created``: the BOM's timestamp (now by default)."""
    indexes = _indexes(image)
    distro = image.base.suite or None
    wheels = {c.bom_ref.value: c for c in (_wheel(p, indexes) for p in image.packages)}
    packages = {c.bom_ref.value: c for c in (_deb(d, distro) for d in debs)}
    subject = _subject(image, ref, manifest_digest)
    metadata = BomMetaData(
        component=subject, timestamp=created or datetime.now(timezone.utc),
        properties=[Property(name=PROPERTY_PREFIX + "lock_hash", value=image.hash),
                    Property(name=PROPERTY_PREFIX + "image", value=image.name),
                    Property(name=PROPERTY_PREFIX + "envkit_version", value=__version__)])
    metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name="envkit", version=__version__))
    bom = Bom(metadata=metadata, components=[*wheels.values(), *packages.values()])
    bom.register_dependency(subject, [*wheels.values(), *packages.values()])  # the image holds them all
    document: dict = json.loads(JsonV1Dot6(bom).output_as_string())
    return document


def sbom_for(engine: Engine, image: LockedImage, *, ref: str, manifest_digest: str | None = None) -> dict:
    """``image_sbom`` of the image ``ref`` on ``engine``, its Debian packages read from the image itself."""
    return image_sbom(image, parse_dpkg_status(read_dpkg_status(engine, ref)), ref=ref,
                      manifest_digest=manifest_digest)
