"""The engine's TLS settings for one registry, read as the engine reads them, and what TLS errors mean.

``/etc/docker/certs.d/<host:port>/`` (``CERTS_D``) holds, per registry:
  * ``*.crt``: CAs trusted for the registry (added to the system's);
  * ``NAME.cert`` + ``NAME.key``: a TLS client certificate and its key, for registries that require
    mutual TLS. The engine pairs each ``.cert`` with the ``.key`` of the same name and refuses
    every call to the registry when a half lacks the other; envkit does the same, naming both
    paths. Python's ``ssl`` presents one certificate per connection: envkit presents the first
    pair in name order (the engine offers each pair, in that order, to a registry that asks).

The engine reads the directory at every call, so a change needs no restart; so does envkit.

A registry refusing the client says so with a TLS alert (``CLIENT_REFUSED``), or just cuts the
connection; with TLS 1.3 it judges the client after the client's handshake is over, so the
alert is often lost to a reset after the request. ``refuses_client`` then asks once more: a
fresh handshake and a read before sending anything.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests.adapters

from ..errors import EngineError

CERTS_D = Path("/etc/docker/certs.d")

# What the engine (Go's crypto/x509) and Python's ssl say of a registry certificate they cannot trust.
UNTRUSTED = re.compile(r"x509: |certificate signed by unknown authority|CERTIFICATE_VERIFY_FAILED|"
                       r"certificate is (?:not )?valid for", re.IGNORECASE)
# A registry refusing the TLS client (no certificate, or one it does not accept): the TLS alert it sends, as
# OpenSSL ("SSLV3_ALERT_BAD_CERTIFICATE", "TLSV13_ALERT_CERTIFICATE_REQUIRED", "TLSV1_ALERT_UNKNOWN_CA"; a
# certificate from another CA of the same name: "TLSV1_ALERT_DECRYPT_ERROR") and Go ("remote error: tls: bad
# certificate", "remote error: tls: certificate required") name it. Group 1: the alert.
# nginx in front of a registry (ssl_verify_client on) answers a missing or refused client certificate with
# HTTP 400 pages titled so (the TLS handshake itself succeeds)
PROXY_REFUSED = re.compile(r"No required SSL certificate was sent|The SSL certificate error|"
                           r"SSL certificate has expired", re.I)
CLIENT_REFUSED = re.compile(r"(?:alert[ _]|remote error: tls: )(certificate[ _]required|bad[ _]certificate|"
                            r"unknown[ _]ca|unknown certificate authority|decrypt[ _]error)\b", re.IGNORECASE)


def alert_name(match: re.Match) -> str:
    return match.group(1).replace("_", " ").lower()
# The engine's words for a half without the other (moby's registry.ReadCertsDirectory).
UNPAIRED = re.compile(r"missing key (\S+) for client certificate (\S+?)\.?(?=\s|$)|"
                      r"missing client certificate (\S+) for key (\S+?)\.?(?=\s|$)", re.IGNORECASE)


def certs_dir(registry: str) -> Path:
    return CERTS_D / registry


def trust_hint(registry: str) -> str:
    return (f"put the CA that signed {registry}'s certificate in {certs_dir(registry)}/ca.crt on the engine's host: "
            f"the engine and envkit read it at their next call, no restart needed; if the certificate was issued "
            f"for another name, use that name in the reference")


def client_cert_hint(registry: str) -> str:
    where = certs_dir(registry)
    return (f"put a client certificate that {registry} accepts, and its key, in {where}/client.cert and "
            f"{where}/client.key on the engine's host: the engine and envkit present them at their next call, "
            f"no restart needed")


def unpaired_hint(cert: Path, key: Path) -> str:
    return (f"the engine and envkit pair each client certificate NAME.cert with the key NAME.key beside it: put both "
            f"{cert} and {key} there, or neither; a CA certificate must end in .crt")


@dataclass(frozen=True)
class ClientPair:
    """A TLS client certificate and its key, as the engine pairs them: ``NAME.cert`` with ``NAME.key``."""

    cert: Path
    key: Path


def engine_cas(registry: str) -> list[Path]:
    """The CA files the engine trusts for ``registry`` (``/etc/docker/certs.d/<host:port>/*.crt``)."""
    try:
        return sorted(p for p in certs_dir(registry).glob("*.crt") if p.is_file())
    except OSError:
        return []


def client_pairs(registry: str) -> list[ClientPair]:
    """The engine's client certificates for ``registry``: each ``NAME.cert`` in its certs.d directory with
    ``NAME.key``, in name order. A half without the other is an ``EngineError`` naming both paths."""
    directory = certs_dir(registry)
    try:
        names = {p.name for p in directory.iterdir() if p.is_file()}
    except OSError:
        return []
    pairs = []
    for name in sorted(names):
        stem, ext = os.path.splitext(name)
        if ext not in (".cert", ".key"):
            continue
        cert, key = directory / f"{stem}.cert", directory / f"{stem}.key"
        if cert.name in names and key.name in names:
            if ext == ".cert":
                pairs.append(ClientPair(cert, key))
            continue
        lone, missing = (f"certificate {cert}", f"key {key}") if ext == ".cert" else (f"key {key}",
                                                                                       f"certificate {cert}")
        raise EngineError(f"client {lone} has no {missing} beside it (registry {registry})",
                          hint=unpaired_hint(cert, key))
    return pairs


def tls_context(cafiles: list[Path], client: ClientPair | None) -> ssl.SSLContext:
    """The system's CAs plus ``cafiles``; presenting ``client`` when the registry asks for a certificate."""
    context = ssl.create_default_context()
    for cafile in cafiles:
        context.load_verify_locations(cafile=str(cafile))
    if client is None:
        return context

    def encrypted() -> str:
        raise EngineError(f"client key {client.key} is encrypted (for certificate {client.cert})",
                          hint=f"the engine cannot use an encrypted key either: store it decrypted "
                               f"(openssl pkey -in ENCRYPTED -out {client.key}), readable only by root")

    try:
        context.load_cert_chain(str(client.cert), str(client.key), password=encrypted)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise EngineError(f"cannot use client certificate {client.cert} with key {client.key}: {reason}",
                          hint=f"{client.cert} must hold a PEM certificate and {client.key} its own PEM private "
                               f"key; {unpaired_hint(client.cert, client.key)}") from None
    return context


class TrustAdapter(requests.adapters.HTTPAdapter):
    """https through one ``tls_context`` (the registry's CAs and client certificate)."""

    def __init__(self, context: ssl.SSLContext):
        self._context = context
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["ssl_context"] = self._context
        return super().init_poolmanager(*args, **kwargs)


def connection_cut(exc: BaseException | None) -> bool:
    """Was the connection reset or closed under the call? Looked for through ``exc``'s causes, and the
    exceptions requests and urllib3 keep in their arguments (``MaxRetryError.reason``, ``SSLError(e)``)."""
    todo, seen = [exc], set()
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, ssl.SSLEOFError,
                            http.client.RemoteDisconnected)):
            return True
        todo += [e for e in (exc.__cause__, exc.__context__, getattr(exc, "reason", None), *exc.args)
                 if isinstance(e, BaseException)]
    return False


def refuses_client(host: str, client: ClientPair | None, timeout: float = 1.5) -> str | None:
    """How ``host`` refuses this TLS client (presenting ``client``), or None when it does not.

    A fresh handshake, then a read before sending anything: with TLS 1.3 a registry checks the
    client's certificate after the client thinks the handshake is over, so its alert (or its
    close) comes then; an HTTP server that accepts the client just waits for a request (the read
    times out). Sending nothing keeps the alert from being lost to a reset, as it can be after
    a request. The server's own certificate is not checked here: only how it treats the client.
    """
    split = urllib.parse.urlsplit(f"//{host}")
    context = tls_context([], client)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((split.hostname, split.port or 443), timeout=timeout) as raw:
            with context.wrap_socket(raw, server_hostname=split.hostname) as tls:
                try:
                    tls.recv(1)
                except (TimeoutError, socket.timeout):
                    return None  # waiting for a request: this client is accepted
                return "the registry closed the connection right after the TLS handshake, before any request"
    except ssl.SSLError as exc:
        m = CLIENT_REFUSED.search(str(exc))
        if m:
            return f"the TLS handshake ended with the alert {alert_name(m)!r}"
        return "the registry closed the connection during the TLS handshake" if connection_cut(exc) else None
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError):
        return "the registry closed the connection during the TLS handshake"
    except (OSError, ValueError, EngineError):
        return None  # unreachable, or no TLS there: not about the client
