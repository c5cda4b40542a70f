"""`bundle build --reproducible`'s parts that need no engine: the local index its install containers serve, their
script and source, and what it refuses before any work (the whole path: tests/integration/test_bundle_reproducible)."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
import urllib.parse
import urllib.request

import pytest

from envkit.images import install_source, reproducible
from envkit.images.bundle import build_from_bundle, make_bundle
from envkit.images.bundle_manifest import INSTALLER, MANIFEST, file_hashes
from envkit.errors import BuildError
from envkit.render import installer
from tests.unit.images.test_bundle_frameworks import offline_parts  # noqa: F401  (a fixture)
from tests.unit.lockfixtures import make_lock, make_tf_image

WHEELS = ["typing_extensions-4.7.1-py3-none-any.whl", "torch-2.5.1+cu124-cp311-cp311-linux_x86_64.whl",
          "Jinja2-3.1.4-py3-none-any.whl", "nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl"]


def test_the_index_pages_link_each_wheel_under_its_normalised_project_name(tmp_path):
    """Served as the install container serves them (http.server over the pages and the wheels), each project's page
    is where PEP 503 puts it and its link gives the wheel's bytes (a '+' in the name included)."""
    root = tmp_path / "index"
    wheelhouse = root / "wheels"
    wheelhouse.mkdir(parents=True)
    for name in WHEELS:
        (wheelhouse / name).write_bytes(name.encode())
    install_source.index_pages(wheelhouse, root / "simple")
    assert sorted(p.name for p in (root / "simple").iterdir()) == [
        "jinja2", "nvidia-cuda-runtime-cu12", "torch", "typing-extensions"]
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for project, wheel in [("torch", WHEELS[1]), ("typing-extensions", WHEELS[0]), ("jinja2", WHEELS[2])]:
            page_url = f"http://127.0.0.1:{server.server_port}/simple/{project}/"
            page = urllib.request.urlopen(page_url).read().decode()
            href = page.split('href="', 1)[1].split('"', 1)[0]
            assert urllib.request.urlopen(urllib.parse.urljoin(page_url, href)).read() == wheel.encode()
    finally:
        server.shutdown()
        server.server_close()


def test_an_offline_install_takes_uv_from_the_bundle_and_the_wheels_from_its_loopback(tmp_path):
    wheelhouse, uv = tmp_path / "wheelhouse", tmp_path / installer.wheel_name("x86_64")
    wheelhouse.mkdir()
    uv.write_bytes(b"uv")
    source = install_source.offline_source(install_source.Offline(wheelhouse, uv), tmp_path / "pages")
    assert source.network is False and source.env == {}
    assert {m.target for m in source.mounts} == {f"{install_source.INDEX_DIR}/simple", f"{install_source.INDEX_DIR}/wheels",
                                                 install_source.UV_WHEEL}
    assert all(m.read_only for m in source.mounts)
    script = reproducible.install_script(True, source)
    assert "urlopen" not in script and f"{install_source.UV_WHEEL} \"$s\" {install_source.UV}" in script
    assert installer.WHEELS["x86_64"][1] in script  # refused unless it is the pinned wheel
    assert f"--bind 127.0.0.1 --directory {install_source.INDEX_DIR} {install_source.INDEX_PORT}" in script
    assert f"--index-url http://127.0.0.1:{install_source.INDEX_PORT}/simple/ -r" in script
    # the index is up before uv asks it, and uv's flags are the online install's
    assert script.index("http.server") < script.index("create_connection") < script.index(" pip install ")
    assert installer.FLAGS in script and "SSL_CERT_FILE" not in script
    online = reproducible.install_script(True, install_source.online_source("", None, None))
    assert "urlopen" in online and "http.server" not in online and "--index-url" not in online


class _LocalEngine:
    def local(self) -> bool:
        return True


def test_a_bundle_without_uvs_wheel_is_refused_reproducible_before_any_work(offline_parts, tmp_path):  # noqa: F811
    image = make_tf_image()
    path = make_bundle(object(), make_lock(image), image.name, tmp_path / "b", ca_bundle=None)
    shutil.rmtree(path / INSTALLER)  # as a bundle an earlier envkit made
    manifest = json.loads((path / MANIFEST).read_text())
    manifest["files"] = file_hashes(path)
    (path / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(BuildError, match=f"holds no uv {installer.VERSION} wheel for x86_64") as err:
        build_from_bundle(_LocalEngine(), path, builder="classic", reproducible=True)
    assert "envkit bundle make" in (err.value.hint or "") and "without --reproducible" in (err.value.hint or "")

