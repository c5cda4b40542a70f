"""Registry credentials and challenges (envkit.registry.auth): pure parts, no registry.

The same code against real registries (htpasswd and token auth over TLS) is in
tests/integration/test_registry_auth.py.
"""

import base64
import json

import pytest

from envkit.errors import EngineError
from envkit.registry.auth import Challenge, RegistryAuthError, credentials_for, parse_challenges

HOST = "registry.example.com:5000"


@pytest.mark.parametrize("header, expected", [
    ('Basic realm="envkit-test"', [Challenge("basic", {"realm": "envkit-test"})]),
    # distribution's token challenge: the scope's own comma is inside the quotes
    ('Bearer realm="https://auth.example.com/token",service="registry.example.com",'
     'scope="repository:vision/torch25:pull,push"',
     [Challenge("bearer", {"realm": "https://auth.example.com/token", "service": "registry.example.com",
                           "scope": "repository:vision/torch25:pull,push"})]),
    ('Bearer realm="https://a/token", service=reg, scope="registry:catalog:*", error="insufficient_scope"',
     [Challenge("bearer", {"realm": "https://a/token", "service": "reg", "scope": "registry:catalog:*",
                           "error": "insufficient_scope"})]),
    ('Basic realm="a \\"quoted\\" realm", Bearer realm="https://t/token",service="s"',
     [Challenge("basic", {"realm": 'a "quoted" realm'}), Challenge("bearer", {"realm": "https://t/token",
                                                                            "service": "s"})]),
    ("", []),
])
def test_challenges_are_parsed_as_rfc_7235_lists(header, expected):
    assert parse_challenges(header) == expected


@pytest.fixture
def no_login(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    monkeypatch.delenv("ENVKIT_REGISTRY_USER", raising=False)
    monkeypatch.delenv("ENVKIT_REGISTRY_PASSWORD", raising=False)
    return tmp_path


def write_config(directory, doc) -> str:
    (directory / "config.json").write_text(json.dumps(doc))
    return str(directory / "config.json")


def auth(user, password):
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_environment_wins_over_docker_login_and_needs_both_variables(no_login, monkeypatch):
    path = write_config(no_login, {"auths": {HOST: {"auth": auth("from-config", "pw1")}}})
    creds = credentials_for(HOST)
    assert (creds.user, creds.secret, creds.source, creds.identity_token) == ("from-config", "pw1", path, False)
    assert credentials_for("other.example.com") is None
    monkeypatch.setenv("ENVKIT_REGISTRY_USER", "ci")
    with pytest.raises(EngineError, match="ENVKIT_REGISTRY_PASSWORD is not set"):
        credentials_for(HOST)
    monkeypatch.setenv("ENVKIT_REGISTRY_PASSWORD", "s3cret")
    creds = credentials_for(HOST)
    assert (creds.user, creds.source) == ("ci", "ENVKIT_REGISTRY_USER/ENVKIT_REGISTRY_PASSWORD")
    assert "s3cret" not in repr(creds)


def test_an_identity_token_and_a_broken_helper(no_login):
    write_config(no_login, {"auths": {HOST: {"auth": auth("<token>", ""), "identitytoken": "rt-123"}}})
    creds = credentials_for(HOST)
    assert creds.identity_token and creds.secret == "rt-123" and creds.who == "an identity token"
    write_config(no_login, {"credHelpers": {HOST: "envkit-no-such-helper"}})
    with pytest.raises(RegistryAuthError, match=f"cannot read the credentials for registry {HOST}") as err:
        credentials_for(HOST)
    assert f"docker login {HOST}" in err.value.hint


@pytest.mark.parametrize("message", [
    'Get "https://10.1.2.3:5000/v2/": x509: certificate signed by unknown authority',
    'Get "https://reg.example:443/v2/": tls: failed to verify certificate: x509: certificate is valid for a.example, '
    'not reg.example',
])
def test_an_untrusted_certificate_in_the_engines_stream_fails_at_once_with_the_certs_d_fix(message):
    from envkit.registry.publish import _stream
    from envkit.registry.api import _retrying

    waits: list[float] = []

    def op():
        return _stream([{"status": "The push refers to repository [reg/x]"}, {"errorDetail": {"message": message}}],
                       None, None, "reg.example:5000")

    with pytest.raises(EngineError) as failed:
        _retrying(op, retries=4, backoff=1.0, sleep=waits.append,
                  fail=lambda f, n: EngineError(f"could not push ({n} attempts): {f.message}", hint="credentials"))
    assert waits == [] and "(1 attempts)" in failed.value.message and "x509" in failed.value.message
    assert failed.value.hint.startswith("put the CA that signed reg.example:5000's certificate in "
                                        "/etc/docker/certs.d/reg.example:5000/ca.crt")
    assert not isinstance(failed.value, RegistryAuthError)
