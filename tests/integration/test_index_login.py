"""A private package index that asks for a login, as company mirrors (Artifactory, Nexus) do.

The mirror (``pyindex.PackageIndexServer`` with ``login``) answers 401 to any request without its HTTP
Basic login. The login lives only in a netrc file (``$NETRC``), never in the spec or the lock:
``envkit resolve`` (envkit's index client and uv), the host's pip for bundles, and BuildKit builds
(the lines for the lock's index hosts as a build secret) log in from it. The final image must not
carry the token. Without an entry, or with the classic builder, each step fails with what to do.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid

import pytest

from envkit.images.builder import build_image
from envkit.images.wheelhouse import download_wheels
from envkit.engine.protocol import RunOptions
from envkit.errors import BuildError
from envkit.index.urls import DEFAULT_INDEX
from tests.integration.pyindex import PackageIndexServer
from tests.integration.test_buildkit import ca_bundle, remove_images
from tests.integration.test_private_index import PROBE, SPEC, _fetched_wheels, gateway, mirror_lock, wheels  # noqa: F401

USER = "ci-robot"
TOKEN = f"tok-{uuid.uuid4().hex}"  # unique, so finding it in an image's bytes means it leaked
SOURCE_NAMES = {"netrc": "file", "keyring_login": "keyring"}  # image names: "netrc" in a tag would read as a leak


@pytest.fixture(scope="module")
def mirror(wheels):  # noqa: F811 - the private index's wheels fixture
    with PackageIndexServer(wheels, upstream=DEFAULT_INDEX, login=(USER, TOKEN)) as server:
        yield server


@pytest.fixture
def netrc(tmp_path, monkeypatch, gateway):  # noqa: F811
    """A netrc with the mirror's login (and an unrelated host's, which must never reach a build)."""
    path = tmp_path / "netrc"
    path.write_text(f"machine unrelated.example.com login someone password not-for-builds\n"
                    f"machine {gateway} login {USER} password {TOKEN}\n")
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))
    return path


@pytest.fixture
def no_netrc(tmp_path, monkeypatch):
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))


@pytest.fixture
def keyring_login(tmp_path, monkeypatch, mirror, gateway):  # noqa: F811
    """The mirror's login only in a keyring backend (tests/keyringfake.py), for this process and for envkit
    subprocesses, as a user's backend is chosen; no netrc."""
    import keyring

    from tests.keyringfake import ENV, FileKeyring

    path = tmp_path / "keyring.json"
    path.write_text(json.dumps({mirror.url(gateway): [USER, TOKEN]}))
    monkeypatch.setenv(ENV, str(path))
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "tests.keyringfake.FileKeyring")
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    before = keyring.get_keyring()
    keyring.set_keyring(FileKeyring())
    yield
    keyring.set_keyring(before)


def _buildkit(engine):
    from envkit.engine.buildkit import BuildKitBuilder

    if not BuildKitBuilder(engine).available():
        pytest.skip("BuildKit is not available here")


def _image_bytes_hold(engine, ref: str, needle: bytes) -> bool:
    """Whether any file of any layer of ``ref`` (or its config) holds ``needle``."""
    outer = tarfile.open(fileobj=io.BytesIO(b"".join(engine.client.images.get(ref).save())))
    for member in outer.getmembers():
        if not member.isfile():
            continue
        data = outer.extractfile(member).read()
        if needle in data:
            return True
        if member.name.endswith(("layer.tar", ".tar")) or len(data) > 1024 and data[257:262] == b"ustar":
            with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                for inner in layer.getmembers():
                    if inner.isfile() and needle in layer.extractfile(inner).read():
                        return True
    return False


@pytest.mark.integration
@pytest.mark.network
@pytest.mark.parametrize("source", ["netrc", "keyring_login"])
def test_buildkit_logs_in_and_the_image_keeps_no_token(engine, mirror, gateway, source, request):  # noqa: F811
    """The login in the netrc file (with an unrelated host's line, which must not reach the build), or only in
    the keyring: either way it goes in as the build secret and no layer keeps it."""
    request.getfixturevalue(source)
    _buildkit(engine)
    lock, image = mirror_lock(mirror, gateway, f"login-buildkit-{SOURCE_NAMES[source]}")
    mirror.clear()
    built = None
    try:
        built = build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), progress=lambda *_: None,
                            verify=False, builder="buildkit")
        assert PROBE in _fetched_wheels(mirror)  # served only with the login
        assert all(r.client != "127.0.0.1" for r in mirror.requests)  # asked by the build
        run = engine.run(built.tag, ["python3", "-c", f"import {PROBE}; print({PROBE}.__version__)"],
                         RunOptions(timeout=120, network=False))
        assert run.exit_code == 0 and run.stdout.strip() == {p.name: p.version for p in image.packages}[
            "envkit-mirror-probe"], run.stderr
        assert not _image_bytes_hold(engine, built.tag, TOKEN.encode())
        assert not _image_bytes_hold(engine, built.tag, b"not-for-builds")
        history = json.dumps(engine.client.api.history(built.tag))
        assert TOKEN not in history and "netrc" not in history.replace("index-netrc", "")
    finally:
        if built is not None:
            remove_images(engine, built.tag)


@pytest.mark.integration
@pytest.mark.network
def test_buildkit_without_a_login_says_where_to_put_one(engine, mirror, gateway, no_netrc):  # noqa: F811
    _buildkit(engine)
    lock, image = mirror_lock(mirror, gateway, "login-missing")
    with pytest.raises(BuildError) as err:
        build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), progress=lambda *_: None,
                    verify=False, builder="buildkit")
    assert f"machine {gateway} login USER password TOKEN" in err.value.hint


@pytest.mark.integration
@pytest.mark.network
def test_the_classic_builder_refuses_to_carry_a_login(engine, mirror, gateway, netrc):  # noqa: F811
    """The classic builder has no secrets: pip meets the 401, and the error names the two ways that work."""
    lock, image = mirror_lock(mirror, gateway, "login-classic")
    with pytest.raises(BuildError) as err:
        build_image(engine, lock, image, "team.yaml", ca_bundle=ca_bundle(), progress=lambda *_: None,
                    verify=False, builder="classic")
    assert "--builder buildkit" in err.value.hint and "envkit bundle make" in err.value.hint
    assert TOKEN not in str(err.value)


@pytest.mark.integration
@pytest.mark.network
def test_a_bundle_without_a_login_says_where_to_put_one(mirror, gateway, no_netrc, tmp_path):  # noqa: F811
    """The host's pip must not wait on a prompt (stdin is a terminal when a person runs `bundle make`)."""
    _, image = mirror_lock(mirror, gateway, "login-bundle-missing")
    with pytest.raises(BuildError) as err:
        download_wheels(image, tmp_path / "wheels", ca_bundle=ca_bundle())
    assert f"machine {gateway} login USER password TOKEN" in err.value.hint


@pytest.mark.integration
@pytest.mark.network
@pytest.mark.parametrize("source", ["netrc", "keyring_login"])
def test_a_bundle_logs_in_from_this_host(mirror, gateway, source, request, tmp_path):  # noqa: F811
    request.getfixturevalue(source)
    _, image = mirror_lock(mirror, gateway, f"login-bundle-{SOURCE_NAMES[source]}")
    mirror.clear()
    files = download_wheels(image, tmp_path / "wheels", ca_bundle=ca_bundle())
    assert PROBE in {f.name.split("-")[0] for f in files} and PROBE in _fetched_wheels(mirror)


@pytest.mark.integration
@pytest.mark.network
@pytest.mark.parametrize("source", ["netrc", "keyring_login"])
def test_resolve_logs_in_and_the_lock_keeps_no_token(mirror, gateway, source, request, tmp_path):  # noqa: F811
    """The login in the netrc file, or only in the keyring (tests/keyringfake.py, as a user's backend)."""
    from tests.integration.conftest import envkit

    request.getfixturevalue(source)
    spec = tmp_path / "mirrored.yaml"
    spec.write_text(SPEC.format(index_url=mirror.url(gateway), ca_line=""))
    mirror.clear()
    envkit("resolve", spec, "--json", check=True, timeout=600)
    text = (tmp_path / "mirrored.lock").read_text()
    assert TOKEN not in text and "envkit-mirror-probe" in text
    ok = [r for r in mirror.requests if r.status in (200, 206)]
    assert any(r.path == "/simple/envkit-mirror-probe/" for r in ok)  # uv, with the login
    assert any(r.path == "/simple/jax/" for r in ok)  # envkit's own index client


@pytest.mark.integration
@pytest.mark.network
def test_resolve_without_a_login_says_where_to_put_one(mirror, gateway, no_netrc, tmp_path):  # noqa: F811
    from tests.integration.conftest import envkit

    spec = tmp_path / "mirrored.yaml"
    spec.write_text(SPEC.format(index_url=mirror.url(gateway), ca_line=""))
    proc = envkit("resolve", spec, "--json", timeout=600)
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(proc.stdout or proc.stderr)
    assert "asks for a login" in doc["message"] and f"machine {gateway} login" in doc["hint"]
    assert not (tmp_path / "mirrored.lock").exists()


@pytest.mark.integration
def test_a_malformed_netrc_fails_resolve_with_its_line(tmp_path, monkeypatch):
    from tests.integration.conftest import envkit

    bad = tmp_path / "netrc"
    bad.write_text("machine mirror.example.com login ci password tok\nlogin-for mirror.example.com\n")
    bad.chmod(0o600)
    monkeypatch.setenv("NETRC", str(bad))
    spec = tmp_path / "mirrored.yaml"
    spec.write_text(SPEC.format(index_url="http://mirror.example.com/simple", ca_line=""))
    proc = envkit("resolve", spec)
    assert proc.returncode == 2, proc.stderr
    assert f"{bad}:2: cannot read the netrc file: bad follower token 'login-for'" in proc.stderr, proc.stderr
