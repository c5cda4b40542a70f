"""Publishing to, and reading from, registries that require authentication: the real engine and
Debian's docker-registry over TLS, with htpasswd basic auth or token auth (tokenserver.py).

Everything goes through envkit's own code paths: push/promote/attach/pull (``envkit.registry.publish``,
the engine pushes with the ``auth_config`` envkit resolved) and ``envkit show`` / ``envkit ls
--registry`` through the CLI. Credentials from ENVKIT_REGISTRY_USER/PASSWORD, from a
``DOCKER_CONFIG`` config.json (``auths``) and from a credential helper it names.
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import shutil
import socket
import tarfile
from pathlib import Path

import docker.errors
import pytest
import requests

from envkit.engine.docker_engine import as_engine
from envkit.errors import EngineError
from envkit.registry.remote_parse import CERTIFIED_TAG, certificate_tag
from envkit.registry.artifacts import attach_certificate, read_certificate
from envkit.registry.publish import promote, pull_by_digest, push, remote_digest
from envkit.registry.auth import RegistryAuthError, open_session
from tests.integration.conftest import empty_store, envkit
from tests.integration.published import (LOCK_A, STACK_A, certificate, keypair, labels_for, sign,
                                         untag_registry_refs)
from tests.integration.secure_registry import AuthRegistry, auth_registry, trust_ca

pytestmark = pytest.mark.integration

NO_WAIT = dict(sleep=lambda s: None)
REPO = "vision/tiny"
ENV_VARS = ("ENVKIT_REGISTRY_USER", "ENVKIT_REGISTRY_PASSWORD")


@pytest.fixture(scope="module")
def tiny(dc) -> str:
    """A one-file image with envkit's labels (``docker import`` of a tiny tar): pushes in a blink."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        body = b"envkit registry auth test\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    changes = [f'LABEL {k}="{v}"' for k, v in labels_for(LOCK_A, STACK_A).items()]
    changes.append("ENV NVIDIA_REQUIRE_CUDA=cuda>=12.0")
    ref = "envkit-test/auth-tiny:1"
    dc.api.import_image_from_data(data.getvalue(), repository="envkit-test/auth-tiny", tag="1", changes=changes)
    yield ref
    try:
        dc.images.remove(ref, force=True)
    except docker.errors.APIError:
        pass


@pytest.fixture(scope="module", params=["htpasswd", "token"])
def secure(request, tmp_path_factory, dc) -> AuthRegistry:
    with auth_registry(tmp_path_factory.mktemp(f"registry-{request.param}"), request.param) as reg:
        yield reg
        untag_registry_refs(dc, reg.host)


@pytest.fixture
def login(monkeypatch, tmp_path):
    """Credentials for this test only: none from the machine's own `docker login`."""
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-login"))
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)

    def as_env(user: str, password: str) -> None:
        monkeypatch.setenv("ENVKIT_REGISTRY_USER", user)
        monkeypatch.setenv("ENVKIT_REGISTRY_PASSWORD", password)

    def as_docker_config(reg: AuthRegistry, user: str, password: str | None = None, **kw) -> str:
        path = reg.docker_config(tmp_path / "docker-config", user, password, **kw)
        monkeypatch.setenv("DOCKER_CONFIG", str(path))
        return str(path / "config.json")

    def as_helper(reg: AuthRegistry, user: str, password: str | None = None) -> str:
        """A credential helper (docker-credential-envkittest on PATH) named by config.json's credHelpers."""
        bin_dir, conf = tmp_path / "bin", tmp_path / "helper-config"
        bin_dir.mkdir()
        conf.mkdir()
        answer = json.dumps({"ServerURL": reg.host, "Username": user, "Secret": password or reg.password(user)})
        helper = bin_dir / "docker-credential-envkittest"
        helper.write_text(f"#!/bin/sh\nread server\n[ \"$1\" = get ] && echo '{answer}' && exit 0\nexit 1\n")
        helper.chmod(0o755)
        (conf / "config.json").write_text(json.dumps({"credHelpers": {reg.host: "envkittest"}}))
        monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
        monkeypatch.setenv("DOCKER_CONFIG", str(conf))
        return "docker-credential-envkittest"

    def clear() -> None:
        for name in ENV_VARS:
            monkeypatch.delenv(name, raising=False)

    login.env, login.docker_config, login.helper, login.clear = as_env, as_docker_config, as_helper, clear
    return login


def cli_json(*args, code=0):
    trust = ("--trusted-keys", keypair()[1]) if args[0] in ("show", "ls", "pull") else ()  # publish's signing key
    proc = envkit(*args, *trust, "--json", timeout=300)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout), proc


def publish(dc, reg: AuthRegistry, image: str, stack: str) -> str:
    """What nightly does for a certified image: promote (push + :certified), attach its certificate."""
    engine = as_engine(dc)  # (envkit.registry takes the Engine)
    repo = reg.repo(REPO)
    result = promote(engine, repo, stack, certified=True, image=image, **NO_WAIT)
    assert result.certified is not None and result.certified.digest == result.digest
    cert = certificate(f"{REPO}:{stack}", dc.images.get(image).id, LOCK_A, "NVIDIA H200", "certified",
                       "2026-12-01T03:00:00Z")
    attach_certificate(engine, repo, stack, cert.to_bytes(), gpu_slug="nvidia-h200", status="certified", **NO_WAIT)
    sign(dc, repo, result.digest, [cert])  # as a nightly with --signing-key: the gate counts only signed ones
    return result.digest


# --- what works, with each source of credentials ---------------------------------------------------

def test_publish_show_ls_and_pull_with_credentials_from_the_environment(dc, engine, tiny, secure, login, tmp_path):
    login.env("pusher", secure.password("pusher"))
    digest = publish(dc, secure, tiny, STACK_A)
    assert secure.manifest_digest(REPO, STACK_A) == digest == secure.manifest_digest(REPO, CERTIFIED_TAG)
    assert secure.manifest_digest(REPO, certificate_tag(STACK_A, "nvidia-h200")) is not None
    assert remote_digest(engine, secure.repo(REPO), STACK_A, **NO_WAIT) == digest
    assert json.loads(read_certificate(engine, secure.repo(REPO), STACK_A, "nvidia-h200"))["status"] == "certified"
    untag_registry_refs(dc, secure.host)

    store = ("--store", empty_store(tmp_path))
    shown, _ = cli_json("show", f"{secure.repo(REPO)}:{STACK_A}", *store)
    assert shown["source"] == "registry" and shown["registry"]["digest"] == digest
    assert shown["registry"]["certified_tag"] is True
    # (an attestation belongs to the digest: the token module's other test attests the same tiny image too)
    assert {(c["gpu_model"], c["status"]) for c in shown["certificates"]} == {("NVIDIA H200", "certified")}
    listed, _ = cli_json("ls", "--registry", secure.host, *store)
    assert [(r["stack"], r["certification"]) for r in listed["images"]] == [(STACK_A, {"NVIDIA H200": "certified"})]

    pinned = f"{secure.repo(REPO)}@{digest}"
    assert pull_by_digest(engine, pinned, **NO_WAIT).id == dc.images.get(tiny).id  # the engine pulls with them too
    untag_registry_refs(dc, secure.host)

    if secure.tokens is not None:  # the scopes asked for: the repository's pull,push; the catalog for ls
        asked = {s for user, scopes in secure.tokens.requests if user == "pusher" for s in scopes}
        assert f"repository:{REPO}:pull,push" in asked and "registry:catalog:*" in asked


def test_credentials_from_a_docker_config_file_and_a_credential_helper(dc, engine, tiny, secure, login, tmp_path):
    login.docker_config(secure, "pusher")
    promote(engine, secure.repo(REPO), "from-config", certified=False, image=tiny, **NO_WAIT)
    assert secure.manifest_digest(REPO, "from-config") is not None
    listed, _ = cli_json("ls", "--registry", secure.host, "--store", empty_store(tmp_path))
    assert "from-config" in {r["stack"] for r in listed["images"]}

    login.helper(secure, "pusher")
    push(engine, tiny, secure.repo(REPO), "from-helper", **NO_WAIT)
    assert remote_digest(engine, secure.repo(REPO), "from-helper", **NO_WAIT) == secure.manifest_digest(REPO,
                                                                                                  "from-helper")
    shown, _ = cli_json("show", f"{secure.repo(REPO)}:from-helper", "--store", empty_store(tmp_path))
    assert "from-helper" in shown["registry"]["tags"]


@pytest.mark.parametrize("secure", ["token"], indirect=True)
def test_an_identity_token_from_docker_login_is_used_as_an_oauth2_refresh_token(dc, engine, tiny, secure, login, tmp_path):
    login.docker_config(secure, "pusher", identity_token=True)
    before = len(secure.tokens.requests)
    promote(engine, secure.repo(REPO), "from-identity-token", certified=True, image=tiny, **NO_WAIT)
    assert secure.manifest_digest(REPO, "from-identity-token") is not None
    shown, _ = cli_json("show", f"{secure.repo(REPO)}:from-identity-token", "--store", empty_store(tmp_path))
    assert shown["registry"]["certified_tag"] is True
    assert {user for user, _ in secure.tokens.requests[before:]} == {"pusher"} and not secure.tokens.refused


# --- what fails, and how it says so -------------------------------------------------------------------

def assert_clear(err: EngineError, reg: AuthRegistry, secret: str, *, source: str) -> None:
    text = f"{err.message} {err.hint}"
    assert isinstance(err, RegistryAuthError)
    assert f"registry {reg.host}" in err.message and source in err.message
    assert f"docker login {reg.host}" in err.hint and "ENVKIT_REGISTRY_USER" in err.hint
    assert secret not in text


def assert_cli_refuses(reg: AuthRegistry, secret: str, store, *, source: str) -> None:
    for args in (("show", f"{reg.repo(REPO)}:{STACK_A}"), ("ls", "--registry", reg.host)):
        doc, proc = cli_json(*args, "--store", store, code=6)
        assert doc["error"] == "RegistryAuthError" and set(doc) == {"error", "message", "hint", "location"}
        assert f"registry {reg.host}" in doc["message"] and source in doc["message"]
        assert f"docker login {reg.host}" in doc["hint"]
        assert secret not in proc.stdout + proc.stderr
        human = envkit(*args, "--store", store, timeout=300)
        assert human.returncode == 6 and human.stdout == ""  # nothing half-written
        assert f"registry {reg.host}" in human.stderr and secret not in human.stderr


def test_wrong_credentials_fail_clearly_and_push_nothing(dc, engine, tiny, secure, login, tmp_path):
    secret = "WRONG-pw-7f3a9c"
    login.env("pusher", secret)
    with pytest.raises(RegistryAuthError) as err:
        promote(engine, secure.repo(REPO), "wrong-env", certified=True, image=tiny, **NO_WAIT)
    assert_clear(err.value, secure, secret, source="ENVKIT_REGISTRY_USER/ENVKIT_REGISTRY_PASSWORD")
    assert "refused the credentials of user 'pusher'" in err.value.message and "left unpromoted" in err.value.message
    with pytest.raises(RegistryAuthError) as err:  # the engine's own push, with the same wrong account
        push(engine, tiny, secure.repo(REPO), "wrong-env", **NO_WAIT)
    assert_clear(err.value, secure, secret, source="ENVKIT_REGISTRY_USER/ENVKIT_REGISTRY_PASSWORD")
    with pytest.raises(RegistryAuthError) as err:
        attach_certificate(engine, secure.repo(REPO), "wrong-env", b"{}", gpu_slug="none", status="verified", **NO_WAIT)
    assert_clear(err.value, secure, secret, source="ENVKIT_REGISTRY_USER")
    assert secure.manifest_digest(REPO, "wrong-env") is None
    assert secure.manifest_digest(REPO, certificate_tag("wrong-env", "none")) is None
    assert_cli_refuses(secure, secret, empty_store(tmp_path), source="ENVKIT_REGISTRY_USER")

    login.clear()
    config = login.docker_config(secure, "pusher", secret)
    with pytest.raises(RegistryAuthError) as err:
        remote_digest(engine, secure.repo(REPO), STACK_A, **NO_WAIT)
    assert_clear(err.value, secure, secret, source=config)
    assert_cli_refuses(secure, secret, empty_store(tmp_path), source=config)


def test_no_credentials_at_all_say_where_they_are_looked_for(dc, engine, tiny, secure, login, tmp_path):
    with pytest.raises(RegistryAuthError) as err:
        promote(engine, secure.repo(REPO), "anonymous", certified=False, image=tiny, **NO_WAIT)
    assert "requires credentials and none were found" in err.value.message
    assert f"docker login {secure.host}" in err.value.hint
    doc, _ = cli_json("ls", "--registry", secure.host, "--store", empty_store(tmp_path), code=6)
    assert doc["error"] == "RegistryAuthError" and "none were found" in doc["message"]
    assert secure.manifest_digest(REPO, "anonymous") is None


@pytest.mark.parametrize("secure", ["token"], indirect=True)  # htpasswd grants every account everything
def test_token_scopes_a_reader_may_pull_but_not_push_nor_list(dc, engine, tiny, secure, login, tmp_path):
    login.env("pusher", secure.password("pusher"))
    digest = publish(dc, secure, tiny, "for-readers")
    untag_registry_refs(dc, secure.host)

    secret = secure.password("reader")
    login.env("reader", secret)
    assert remote_digest(engine, secure.repo(REPO), "for-readers", **NO_WAIT) == digest
    shown, _ = cli_json("show", f"{secure.repo(REPO)}:for-readers", "--store", empty_store(tmp_path))
    assert shown["registry"]["digest"] == digest and shown["certificates"][0]["status"] == "certified"
    with pytest.raises(RegistryAuthError) as err:
        promote(engine, secure.repo(REPO), "by-reader", certified=True, image=tiny, **NO_WAIT)
    assert "refused user 'reader'" in err.value.message and "denied" in err.value.message
    assert secure.manifest_digest(REPO, "by-reader") is None
    doc, proc = cli_json("ls", "--registry", secure.host, "--store", empty_store(tmp_path), code=6)
    assert doc["error"] == "RegistryAuthError"
    assert "denied user 'reader'" in doc["message"] and "registry:catalog:*" in doc["message"]
    assert secret not in proc.stdout + proc.stderr


@pytest.mark.parametrize("secure", ["token"], indirect=True)
def test_tokens_are_reused_per_scope_not_fetched_per_request(dc, engine, tiny, secure, login):
    login.env("pusher", secure.password("pusher"))
    promote(engine, secure.repo(REPO), "cached", certified=True, image=tiny, **NO_WAIT)
    before = len(secure.tokens.requests)
    from envkit.registry.remote import inspect_remote

    image = inspect_remote(engine, f"{secure.repo(REPO)}:cached", **NO_WAIT)  # tags, manifests, config blob, certs
    assert image.certified
    fetched = secure.tokens.requests[before:]
    assert len(fetched) == 1 and fetched[0] == ("pusher", (f"repository:{REPO}:pull",))


def test_a_token_service_that_is_down_is_retried_then_named(dc, engine, login, tmp_path):
    with auth_registry(tmp_path / "reg", "token") as reg:
        login.env("pusher", reg.password("pusher"))
        realm = reg.tokens.realm
        reg.tokens.stop()
        waits = []
        with pytest.raises(EngineError) as err:
            remote_digest(engine, reg.repo(REPO), STACK_A, retries=2, backoff=1.0, sleep=waits.append)
    assert waits == [1.0, 2.0] and not isinstance(err.value, RegistryAuthError)  # transient, not a refusal
    assert f"registry {reg.host}" in err.value.message and realm.split("/token")[0] in err.value.message
    assert reg.password("pusher") not in err.value.message


def test_htpasswd_over_plain_http_works_too(dc, engine, tiny, login, tmp_path):
    """Distribution does not insist on TLS for htpasswd; envkit falls back to http as the engine does."""
    with auth_registry(tmp_path / "reg", "htpasswd", tls=False) as reg:
        login.env("pusher", reg.password("pusher"))
        digest = promote(engine, reg.repo(REPO), STACK_A, certified=True, image=tiny, **NO_WAIT).digest
        assert reg.manifest_digest(REPO, CERTIFIED_TAG) == digest
        listed, _ = cli_json("ls", "--registry", reg.host, "--store", empty_store(tmp_path))
        assert [r["digest"] for r in listed["images"]] == [digest]
        untag_registry_refs(dc, reg.host)


# --- trust: the engine's CA for the registry --------------------------------------------------------

def test_envkit_verifies_the_registry_with_the_engines_ca(secure):
    if not (secure.registry.ca and (Path("/etc/docker/certs.d") / secure.host).exists()):
        pytest.skip("the CA could not be installed under /etc/docker/certs.d (not root)")
    session, scheme = open_session(secure.host, secure.host, insecure=False, timeout=10, session=None)
    assert scheme == "https" and session.get(f"https://{secure.host}/v2/", timeout=10).status_code == 401
    with pytest.raises(requests.exceptions.SSLError):  # without that CA: not trusted
        requests.get(f"https://{secure.host}/v2/", timeout=10)
    session, scheme = open_session(secure.host, secure.host, insecure=True, timeout=10, session=None)
    assert scheme == "https" and session.verify is True  # verified, not the insecure fallback


# --- trust: a registry the engine itself verifies (not loopback) ------------------------------------

def _host_address() -> str | None:
    """This host's own address on its default route (not loopback), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("203.0.113.1", 9))  # TEST-NET-3: nothing is sent, the kernel only picks the source
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if ipaddress.ip_address(address).is_loopback else address


def test_the_engine_verifies_a_registry_on_a_routable_address_through_certs_d(dc, engine, tiny, login, tmp_path,
                                                                             monkeypatch):
    """A registry on this host's routable address is one the engine verifies (127.0.0.0/8 is insecure to it):
    untrusted, envkit and the engine each refuse it at once, naming the certs.d file that fixes it; with the
    CA there (no engine restart) envkit pushes, reads and pulls back through the engine."""
    address = _host_address()
    if address is None or os.geteuid() != 0:
        pytest.skip("needs a non-loopback address and root (to write /etc/docker/certs.d)")
    insecure = dc.info()["RegistryConfig"]["InsecureRegistryCIDRs"]
    assert not any(ipaddress.ip_address(address) in ipaddress.ip_network(c) for c in insecure), insecure
    waits: list[float] = []
    opts = dict(sleep=waits.append)
    with auth_registry(tmp_path / "routable", "htpasswd", address=address, trust=False) as reg:
        login.env("pusher", reg.password("pusher"))
        fix = f"/etc/docker/certs.d/{reg.host}/ca.crt"

        with pytest.raises(EngineError) as untrusted:  # envkit's own client: not trusted, not retried
            remote_digest(engine, reg.repo(REPO), "any", **opts)
        assert "TLS certificate is not trusted" in untrusted.value.message and fix in untrusted.value.hint
        with monkeypatch.context() as env:  # envkit trusts the CA, the engine has none for it
            env.setenv("REQUESTS_CA_BUNDLE", str(reg.registry.ca))
            with pytest.raises(EngineError) as refused:
                push(engine, tiny, reg.repo(REPO), "untrusted", **opts)
        assert "the engine does not trust its certificate" in refused.value.message
        assert "x509" in refused.value.message and fix in refused.value.hint
        assert "docker login" not in refused.value.hint and waits == []
        assert reg.manifest_digest(REPO, "untrusted") is None

        installed = trust_ca(reg.host, reg.registry.ca)
        assert installed is not None
        try:
            digest = push(engine, tiny, reg.repo(REPO), "trusted", **opts).digest
            assert reg.manifest_digest(REPO, "trusted") == digest == remote_digest(engine, reg.repo(REPO), "trusted")
            untag_registry_refs(dc, reg.host)
            assert pull_by_digest(engine, f"{reg.repo(REPO)}@{digest}", **opts).id == dc.images.get(tiny).id
        finally:
            untag_registry_refs(dc, reg.host)
            shutil.rmtree(installed, ignore_errors=True)
