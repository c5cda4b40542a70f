"""Registries that require authentication, as team registries do: TLS from a throwaway CA, and
either htpasswd basic auth (bcrypt) or token auth (``auth: token``, our ``TokenServer``).

Distribution 2.8 itself serves htpasswd auth over plain http too (it does not insist on TLS);
the fixtures serve https anyway, because that is what a team registry is, and because the
scheme choice is part of what envkit must get right. The CA is installed where the engine and
envkit look for a registry's CA, ``/etc/docker/certs.d/<host:port>/ca.crt``, when this process
may write there, and removed afterwards. The engine treats 127.0.0.0/8 registries as insecure
(it tries https without verifying, then http), so its pushes work either way and no engine
setting or restart is needed; envkit verifies with the CA.

Accounts: ``pusher`` may pull and push every repository and list the catalog;
``reader`` may pull only (no catalog). Passwords are random per fixture.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import bcrypt

from tests.integration.registry import Registry, find_binary
from tests.integration.tokenserver import ISSUER, SERVICE, Account, TokenServer, make_pki

CERTS_D = Path("/etc/docker/certs.d")

HTPASSWD = """\
auth:
  htpasswd:
    realm: envkit-test
    path: {path}
"""

TOKEN = """\
auth:
  token:
    realm: {realm}
    service: {service}
    issuer: {issuer}
    rootcertbundle: {bundle}
"""


@dataclass
class AuthRegistry:
    registry: Registry
    kind: str  # "htpasswd" or "token"
    accounts: dict[str, Account]
    tokens: TokenServer | None = None

    @property
    def host(self) -> str:
        return self.registry.host

    def repo(self, name: str) -> str:
        return self.registry.repo(name)

    def password(self, user: str) -> str:
        return self.accounts[user].password

    def manifest_digest(self, name: str, reference: str) -> str | None:
        return self.registry.manifest_digest(name, reference)

    def docker_config(self, directory: Path, user: str, password: str | None = None, *,
                      identity_token: bool = False) -> Path:
        """A ``DOCKER_CONFIG`` directory whose config.json holds ``user``'s login (as `docker login` writes it:
        ``auth`` = base64 user:password, or, from a token service that gave a refresh token, ``identitytoken``)."""
        directory.mkdir(parents=True, exist_ok=True)
        if identity_token:
            entry = {"auth": base64.b64encode(b"<token>:").decode(),
                     "identitytoken": self.accounts[user].refresh_token}
        else:
            entry = {"auth": base64.b64encode(f"{user}:{password or self.password(user)}".encode()).decode()}
        (directory / "config.json").write_text(json.dumps({"auths": {self.host: entry}}))
        return directory


def _accounts() -> dict[str, Account]:
    return {
        "pusher": Account("pw-" + secrets.token_urlsafe(12), {"repository:*": ("pull", "push"),
                                                              "registry:catalog": ("*",)},
                          refresh_token="rt-" + secrets.token_urlsafe(16)),
        "reader": Account("pw-" + secrets.token_urlsafe(12), {"repository:*": ("pull",)}),
    }


def trust_ca(host: str, ca: Path) -> Path | None:
    """Install the CA for ``host`` where the engine (and envkit) look; None when this process may not."""
    target = CERTS_D / host
    try:
        target.mkdir(parents=True, exist_ok=False)
        shutil.copyfile(ca, target / "ca.crt")
    except OSError:
        return None
    return target


@contextmanager
def auth_registry(workdir: Path, kind: str, *, tls: bool = True, address: str = "127.0.0.1",
                  trust: bool = True) -> Iterator[AuthRegistry]:
    """A TLS registry under ``workdir`` requiring ``kind`` ("htpasswd" or "token") auth; stopped on exit.
    ``tls=False``: plain http (distribution allows it, for htpasswd too). ``address``: where it listens
    (another of this host's addresses than loopback: a registry the engine verifies). ``trust=False``:
    its CA is not installed under certs.d (the caller may, with ``trust_ca``)."""
    workdir = Path(workdir)
    pki = make_pki(workdir / "pki", addresses=(address,) if address != "127.0.0.1" else ())
    accounts = _accounts()
    tokens = None
    if kind == "htpasswd":
        path = workdir / "htpasswd"
        path.write_text("".join(f"{user}:{bcrypt.hashpw(a.password.encode(), bcrypt.gensalt(rounds=5)).decode()}\n"
                                for user, a in accounts.items()))
        auth = HTPASSWD.format(path=path)

        def headers(scope: str) -> dict[str, str]:
            secret = base64.b64encode(f"pusher:{accounts['pusher'].password}".encode()).decode()
            return {"Authorization": f"Basic {secret}"}
    elif kind == "token":
        tokens = TokenServer(pki, accounts).start()
        auth = TOKEN.format(realm=tokens.realm, service=SERVICE, issuer=ISSUER, bundle=pki.signer_cert)

        def headers(scope: str) -> dict[str, str]:
            kind_, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            return {"Authorization": "Bearer " + tokens.mint("fixture", [{"type": kind_, "name": name,
                                                                          "actions": actions.split(",")}])}
    else:
        raise ValueError(kind)
    registry = Registry(workdir, find_binary(), address=address, tls=(pki.cert, pki.key) if tls else None, ca=pki.ca if tls else None,
                        auth=auth, headers=headers)
    trusted = trust_ca(registry.host, pki.ca) if tls and trust else None
    try:
        registry.start()
        yield AuthRegistry(registry, kind, accounts, tokens)
    finally:
        registry.stop()
        if tokens is not None:
            tokens.stop()
        if trusted is not None:
            shutil.rmtree(trusted, ignore_errors=True)
