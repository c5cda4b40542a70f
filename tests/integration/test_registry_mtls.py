"""A registry that requires TLS client certificates (mutual TLS, distribution's ``http.tls.clientcas``),
with the real engine and Debian's docker-registry on this host's routable address (one the engine
verifies, unlike 127.0.0.0/8). A throwaway CA issues the registry's certificate and a client
certificate; its CA is trusted through ``/etc/docker/certs.d/<host:port>/ca.crt`` throughout, and
the client pair is placed beside it (``client.cert`` + ``client.key``) or not, per test.

Without the pair, envkit's own client and the engine's push each fail at once (no retries) naming
the registry and the certs.d files that fix it; with another CA's certificate, they say it was
refused; with a key but no certificate, both name both paths; with the pair, the engine pushes and
pulls by digest and envkit reads the manifests (no engine restart at any step).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from envkit.errors import EngineError
from envkit.registry.publish import pull_by_digest, push, remote_digest
from envkit.registry.api import _RegistryHTTP
from envkit.registry.auth import RegistryAuthError
from tests.integration.conftest import empty_store, envkit
from tests.integration.published import STACK_A, untag_registry_refs
from tests.integration.registry import Registry, find_binary
from tests.integration.secure_registry import CERTS_D, trust_ca
from tests.integration.test_registry_auth import _host_address, tiny  # noqa: F401  (the fixture)
from tests.integration.tokenserver import make_pki
from envkit.engine.docker_engine import as_engine

pytestmark = pytest.mark.integration

REPO = "vision/tiny"


@pytest.fixture(scope="module")
def mtls(tmp_path_factory, dc):
    """The registry (its fixture requests present the client pair), its PKI, and another CA's client pair."""
    address = _host_address()
    if address is None or os.geteuid() != 0:
        pytest.skip("needs a non-loopback address and root (to write /etc/docker/certs.d)")
    workdir = tmp_path_factory.mktemp("registry-mtls")
    pki = make_pki(workdir / "pki", addresses=(address,), clients=("envkit",))
    stranger = make_pki(workdir / "stranger", clients=("envkit",)).clients["envkit"]
    reg = Registry(workdir, find_binary(), address=address, tls=(pki.cert, pki.key), ca=pki.ca, client_ca=pki.ca,
                   client=pki.clients["envkit"])
    trusted = trust_ca(reg.host, pki.ca)  # a fresh directory for this port (it fails if one is there)
    assert trusted is not None, f"{CERTS_D / reg.host} exists already, or cannot be written"
    try:
        reg.start()
        yield reg, pki, stranger
    finally:
        reg.stop()
        shutil.rmtree(trusted, ignore_errors=True)
        untag_registry_refs(dc, reg.host)


@contextmanager
def placed(host: str, **files: Path):
    """``files`` (name=source) copied into the registry's certs.d directory, removed on exit."""
    directory = CERTS_D / host
    for name, source in files.items():
        shutil.copyfile(source, directory / name.replace("_", "."))
    try:
        yield directory
    finally:
        for name in files:
            (directory / name.replace("_", ".")).unlink(missing_ok=True)


def cli_json(*args, code=0):
    proc = envkit(*args, "--json", timeout=300)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def test_without_a_client_certificate_envkit_and_the_engine_fail_at_once_naming_the_fix(dc, engine, tiny, mtls, tmp_path):
    reg, _, _ = mtls
    waits: list[float] = []
    fix = f"{CERTS_D}/{reg.host}/client.cert and {CERTS_D}/{reg.host}/client.key"
    with pytest.raises(RegistryAuthError) as own:  # envkit's client (reading the tag before a promote)
        remote_digest(engine, reg.repo(REPO), STACK_A, sleep=waits.append)
    assert f"registry {reg.host} requires a TLS client certificate and envkit presented none" in own.value.message
    assert fix in own.value.hint and "docker login" not in own.value.hint
    with pytest.raises(RegistryAuthError) as theirs:  # the engine's push
        push(engine, tiny, reg.repo(REPO), "no-client", sleep=waits.append)
    assert f"registry {reg.host} requires a TLS client certificate and the engine presented none" \
        in theirs.value.message
    assert "tls: bad certificate" in theirs.value.message and "left unpushed" in theirs.value.message
    assert fix in theirs.value.hint
    assert waits == [] and reg.manifest_digest(REPO, "no-client") is None

    doc = cli_json("ls", "--registry", reg.host, "--store", empty_store(tmp_path), code=6)
    assert doc["error"] == "RegistryAuthError" and f"registry {reg.host}" in doc["message"] and fix in doc["hint"]


def test_a_client_certificate_from_another_ca_is_named_as_refused(dc, engine, tiny, mtls):
    reg, _, stranger = mtls
    waits: list[float] = []
    with placed(reg.host, client_cert=stranger[0], client_key=stranger[1]) as directory:
        refused = f"registry {reg.host} refused the TLS client certificate {directory / 'client.cert'}"
        with pytest.raises(RegistryAuthError) as own:
            remote_digest(engine, reg.repo(REPO), STACK_A, sleep=waits.append)
        assert refused + " that envkit presented" in own.value.message
        with pytest.raises(RegistryAuthError) as theirs:
            push(engine, tiny, reg.repo(REPO), "stranger", sleep=waits.append)
        assert refused + " that the engine presented" in theirs.value.message
    assert waits == [] and reg.manifest_digest(REPO, "stranger") is None


def test_a_key_without_its_certificate_is_named_with_both_paths_by_envkit_and_the_engine(dc, engine, tiny, mtls):
    reg, pki, _ = mtls
    waits: list[float] = []
    with placed(reg.host, client_key=pki.clients["envkit"][1]) as directory:
        both = (str(directory / "client.cert"), str(directory / "client.key"))
        with pytest.raises(EngineError) as own:
            remote_digest(engine, reg.repo(REPO), STACK_A, sleep=waits.append)
        assert all(p in own.value.message for p in both) and all(p in own.value.hint for p in both)
        with pytest.raises(EngineError) as theirs:
            push(engine, tiny, reg.repo(REPO), "unpaired", sleep=waits.append)
        assert "missing client certificate client.cert for key client.key" in theirs.value.message.lower()
        assert all(p in theirs.value.hint for p in both)
    assert waits == [] and not isinstance(theirs.value, RegistryAuthError)


def test_with_the_pair_in_certs_d_the_engine_pushes_and_pulls_and_envkit_reads(dc, engine, tiny, mtls, tmp_path):
    reg, pki, _ = mtls
    cert, key = pki.clients["envkit"]
    with placed(reg.host, client_cert=cert, client_key=key):  # no engine restart
        digest = push(engine, tiny, reg.repo(REPO), STACK_A).digest
        assert reg.manifest_digest(REPO, STACK_A) == digest == remote_digest(engine, reg.repo(REPO), STACK_A)
        # by digest, through envkit's client
        manifest = _RegistryHTTP(as_engine(dc), reg.repo(REPO)).get_manifest(digest)
        assert manifest is not None and manifest.digest == digest
        shown = cli_json("show", f"{reg.repo(REPO)}:{STACK_A}", "--store", empty_store(tmp_path))
        assert shown["registry"]["digest"] == digest

        untag_registry_refs(dc, reg.host)
        assert pull_by_digest(engine, f"{reg.repo(REPO)}@{digest}").id == dc.images.get(tiny).id
        untag_registry_refs(dc, reg.host)
