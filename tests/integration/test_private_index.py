"""Builds from a private package index, as a company mirror serves one: plain http, and https signed by
a CA of the company's own (given to builds as the CA bundle), with both builders, and the host's
downloads for bundles.

The mirror (``pyindex.PackageIndexServer``) runs on this host and is reached by build containers at
the bridge's gateway, which is not localhost, so pip treats its http as it would a company's. It
holds numpy and ``envkit_mirror_probe``, a tiny wheel no public index has; the lock says
``index_url`` = the mirror and ``extra_index_url`` = PyPI, where typing-extensions comes from. The
image is the example lock's base with that small closure (see test_buildkit.py), so each build takes
seconds.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest

from envkit.images.builder import build_image
from envkit.images.wheelhouse import download_wheels
from envkit.engine.protocol import RunOptions
from envkit.index.urls import DEFAULT_INDEX
from envkit.lock import Package, sealed
from tests.integration.pyindex import PackageIndexServer, bridge_gateway, make_wheel
from tests.integration.test_buildkit import ca_bundle, remove_images, small_lock
from tests.integration.tokenserver import make_pki

PROBE = "envkit_mirror_probe"


@pytest.fixture(scope="module")
def gateway(engine) -> str:
    return bridge_gateway(engine)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    """The mirror's directory: the probe wheel and the small lock's numpy, downloaded from PyPI by hash."""
    directory = tmp_path_factory.mktemp("mirror-wheels")
    _, image = small_lock("mirror-fill")
    numpy_only = image.model_copy(update={"packages": tuple(p for p in image.packages if p.name == "numpy")})
    download_wheels(numpy_only, directory, ca_bundle=ca_bundle())  # (checks that the directory holds only these)
    make_wheel(directory, PROBE, "1.0")  # the probes the tests lock are added beside it, one version each
    return directory


@pytest.fixture(scope="module", params=["http", "https"])
def mirror(request, wheels, gateway, tmp_path_factory):
    """The mirror in one mode, with the CA bundle builds need for it: the proxy's CA (PyPI, the extra
    index, is reached through it here) and, for https, the mirror's own CA, in one file. It relays
    what it does not hold from PyPI, as company mirrors do (only the resolver's test asks it to)."""
    if request.param == "http":
        with PackageIndexServer(wheels, upstream=DEFAULT_INDEX) as server:
            yield server, ca_bundle()
        return
    directory = tmp_path_factory.mktemp("mirror-pki")
    pki = make_pki(directory, (gateway,))
    bundle = directory / "bundle.pem"
    proxy = ca_bundle()
    bundle.write_bytes((proxy.read_bytes() + b"\n" if proxy else b"") + pki.ca.read_bytes())
    with PackageIndexServer(wheels, pki=pki, upstream=DEFAULT_INDEX) as server:
        yield server, bundle


def mirror_lock(server: PackageIndexServer, gateway: str, name: str):
    """The small lock, its index the mirror (as the containers reach it), PyPI for the rest, plus a probe of
    a version never used before (BuildKit's pip cache mount would otherwise hold it from an earlier build), in the
    framework group: its layer is then this lock's own bytes. With numpy alone there, the step (another index in its
    command) ran again and made the layer other builds of the small lock had made, which Docker 20.10 never frees
    (docs/images.md, "Where Docker 20.10 loses disk space to BuildKit"): 95 MB lost per build."""
    lock, image = small_lock(name)
    version = f"1.0.post{uuid.uuid4().int % 10**12}"
    probe = make_wheel(server.wheels, PROBE, version)
    packages = (*image.packages, Package(name="envkit-mirror-probe", version=version, group="framework",
                                         hashes=("sha256:" + hashlib.sha256(probe.read_bytes()).hexdigest(),)))
    image = sealed(image.model_copy(update={"index_url": server.url(gateway), "extra_index_url": DEFAULT_INDEX,
                                            "packages": tuple(sorted(packages, key=lambda p: (p.group, p.name)))}))
    return lock.model_copy(update={"images": (image,)}), image


def _fetched_wheels(server: PackageIndexServer) -> set[str]:
    """The projects whose wheels the mirror served from its own directory."""
    return {r.path.rsplit("/", 1)[1].split("-")[0] for r in server.requests
            if r.method == "GET" and r.status == 200 and r.path.startswith("/files/") and r.path.endswith(".whl")}


@pytest.mark.integration
@pytest.mark.network
@pytest.mark.parametrize("builder", ["classic", "buildkit"])
def test_the_build_installs_from_the_private_index(engine, mirror, gateway, builder):
    server, bundle = mirror
    if builder == "buildkit":
        from envkit.engine.buildkit import BuildKitBuilder

        if not BuildKitBuilder(engine).available():
            pytest.skip("BuildKit is not available here")
    lock, image = mirror_lock(server, gateway, f"mirror-{server.scheme}-{builder}")
    server.clear()
    built = None
    try:
        built = build_image(engine, lock, image, "team.yaml", ca_bundle=bundle, progress=lambda *_: None,
                            verify=False, builder=builder)
        assert built.action == "built"
        # pip asked the mirror for every package and took the probe from it (no other index has it). numpy
        # is on both indexes: pip pools their files and may take either (PyPI's, when observed); same hash.
        asked = {r.path for r in server.requests}
        assert {"/simple/numpy/", "/simple/envkit-mirror-probe/", "/simple/typing-extensions/"} <= asked
        assert PROBE in _fetched_wheels(server), server.requests
        assert all(r.client != "127.0.0.1" for r in server.requests)  # asked by the build, not by this host
        versions = {p.name: p.version for p in image.packages}
        run = engine.run(built.tag, ["python3", "-c", f"import numpy, typing_extensions, {PROBE}; "
                                     f"print(numpy.__version__, {PROBE}.__version__)"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0, run.stderr
        assert run.stdout.split() == [versions["numpy"], versions["envkit-mirror-probe"]]
    finally:
        if built is not None:
            remove_images(engine, built.tag)


@pytest.mark.integration
@pytest.mark.network
def test_a_bundle_downloads_from_the_private_index(mirror, gateway, tmp_path):
    """The host's pip (``bundle make``) asks the mirror as the build does: at its non-localhost address."""
    server, bundle = mirror
    _, image = mirror_lock(server, gateway, "mirror-bundle")
    server.clear()
    files = download_wheels(image, tmp_path, ca_bundle=bundle)
    assert sorted(f.name.split("-")[0] for f in files) == sorted([PROBE, "numpy", "typing_extensions"])
    assert PROBE in _fetched_wheels(server) and "/simple/numpy/" in {r.path for r in server.requests}


@pytest.mark.network
def test_the_mirror_serves_both_simple_apis(wheels):
    import json
    import urllib.request

    with PackageIndexServer(wheels, host="127.0.0.1") as server:
        page = urllib.request.urlopen(server.url() + "/envkit-mirror-probe/").read().decode()
        assert f"{PROBE}-1.0-py3-none-any.whl#sha256=" in page and "data-core-metadata" in page
        req = urllib.request.Request(server.url() + "/numpy/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        doc = json.loads(urllib.request.urlopen(req).read())
        assert doc["files"] and all(f["hashes"]["sha256"] and f["core-metadata"] for f in doc["files"])


SPEC = """\
version: 1
team: mirrored
fleet:
  min_driver: "580.65.06"
  gpus: [H100]
defaults:
  base:
    bootstrap: {{suite: trixie}}
build:
  index_url: "{index_url}"
{ca_line}images:
  - name: jax
    framework: "jax[cuda13]>=0.10"
    pip: ["envkit-mirror-probe"]
"""


@pytest.mark.integration
@pytest.mark.network
def test_resolve_asks_only_the_private_index(mirror, gateway, tmp_path):
    """`envkit resolve` with `build.index_url` = the mirror (at its non-localhost address; https verified with
    the spec's `build.ca_bundle`): uv reads every package's metadata through it (PyPI's relayed), the lock
    records it as the image's index, and a package only the mirror has is locked."""
    from tests.integration.conftest import envkit

    server, bundle = mirror
    ca_line = f'  ca_bundle: "{bundle}"\n' if server.scheme == "https" else ""
    spec = tmp_path / "mirrored.yaml"
    spec.write_text(SPEC.format(index_url=server.url(gateway), ca_line=ca_line))
    server.clear()
    envkit("resolve", spec, "--json", check=True, timeout=600)
    image = json.loads((tmp_path / "mirrored.lock").read_text())["images"][0]
    assert image["index_url"] == server.url(gateway) and "extra_index_url" not in image
    names = {p["name"] for p in image["packages"]}
    assert {"jax", "jaxlib", "envkit-mirror-probe"} <= names
    asked = {r.path for r in server.requests}
    assert {"/simple/jax/", "/simple/jaxlib/", "/simple/envkit-mirror-probe/"} <= asked
    # jaxlib's metadata read through the mirror (uv: HEAD and byte ranges of the relayed wheel), PyPI not asked
    assert any(r.path.startswith("/upstream/") and "/jaxlib-" in r.path and r.status in (200, 206)
               for r in server.requests)
