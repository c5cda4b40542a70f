"""The team's keys: ECDSA P-256, as cosign's, so that cosign, Kyverno and containers' sigstoreSigned policies can use
the public half. Made, read and fingerprinted with ``cryptography``; a private key is never logged or printed.

* ``generate_keys(DIR)``: ``DIR/envkit.key`` (PKCS8 PEM, mode 0600, encrypted with ``$ENVKIT_KEY_PASSWORD`` when
  set) and ``DIR/envkit.pub`` (PEM SubjectPublicKeyInfo).
* ``load_signing_key(FILE)``: the key that signs (``--signing-key``, else ``$ENVKIT_SIGNING_KEY``; None: neither).
* ``load_trusted_keys(FILES)``: the keys a verifier trusts (``--trusted-keys FILE[,FILE...]``, else
  ``$ENVKIT_TRUSTED_KEYS``; files, or directories of ``.pub`` files). Several keys serve a rotation; removing one
  revokes what only it signed.
* ``fingerprint(public key)``: sha256 of its DER SubjectPublicKeyInfo, hex (the DSSE ``keyid`` envkit writes).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ..errors import TrustError
from .names import PASSWORD_ENV, PRIVATE_FILE, PUBLIC_FILE, SIGNING_KEY_ENV, TRUSTED_KEYS_ENV

GET_KEY_HINT = (f"get the team's public key (the {PUBLIC_FILE} file from the platform team; `envkit keys show "
                f"{PUBLIC_FILE}` prints its fingerprint to compare with theirs) and name it with --trusted-keys FILE "
                f"or {TRUSTED_KEYS_ENV}=FILE[,FILE...]")


@dataclass(frozen=True)
class SigningKey:
    """A private key that signs, and where it came from. Its repr names the file and fingerprint only."""

    private: ec.EllipticCurvePrivateKey = field(repr=False)
    fingerprint: str
    path: str

    @property
    def public(self) -> ec.EllipticCurvePublicKey:
        return self.private.public_key()


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys a verifier trusts (fingerprint -> key), and the files they came from."""

    keys: dict[str, ec.EllipticCurvePublicKey] = field(default_factory=dict, repr=False)
    sources: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.keys)

    def to_json(self) -> dict:
        return {"fingerprints": sorted(self.keys), "sources": list(self.sources)}


def fingerprint(public: ec.EllipticCurvePublicKey) -> str:
    der = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def _password() -> bytes | None:
    value = os.environ.get(PASSWORD_ENV)
    return value.encode() if value else None


def generate_keys(out_dir: Path) -> dict:
    """Write a new key pair into ``out_dir`` (refusing to overwrite one); returns the paths and the fingerprint."""
    out_dir.mkdir(parents=True, exist_ok=True)
    private_path, public_path = out_dir / PRIVATE_FILE, out_dir / PUBLIC_FILE
    for path in (private_path, public_path):
        if path.exists():
            raise TrustError(f"{path} exists: envkit does not overwrite a key", reason="key exists",
                             hint="move it away first (keys signed with it stay valid while it is trusted), or "
                                  "name another directory with --out")
    key = ec.generate_private_key(ec.SECP256R1())
    password = _password()
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    public_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo))
    return {"private_key": str(private_path), "public_key": str(public_path),
            "fingerprint": fingerprint(key.public_key()), "encrypted": password is not None}


def load_signing_key(path: str | Path | None = None) -> SigningKey | None:
    """The signing key named by ``path``, else by ``$ENVKIT_SIGNING_KEY``; None when neither names one."""
    where = str(path) if path else os.environ.get(SIGNING_KEY_ENV, "")
    if not where:
        return None
    data = _read(Path(where), "signing key")
    try:
        key = serialization.load_pem_private_key(data, password=_password())
    except TypeError as exc:  # encrypted without a password, or a password for a plain key
        raise TrustError(f"cannot open the signing key {where}: {exc}", reason="key password",
                         hint=f"set {PASSWORD_ENV} to the password it was made with (or unset it for a key made "
                              f"without one)") from None
    except (ValueError, UnsupportedAlgorithm):
        raise TrustError(f"{where} is not a PEM private key (or its password is wrong)", reason="not a key",
                         hint=f"name the {PRIVATE_FILE} that `envkit keys generate --out DIR` wrote, with "
                              f"{PASSWORD_ENV} set when it is encrypted") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise TrustError(f"{where} is not an ECDSA P-256 key", reason="not a P-256 key",
                         hint="envkit signs with ECDSA P-256 keys, as cosign does: `envkit keys generate --out DIR`")
    return SigningKey(key, fingerprint(key.public_key()), where)


def load_trusted_keys(spec: str | None = None) -> TrustedKeys:
    """The public keys named by ``spec`` (comma-separated files or directories of ``.pub`` files), else by
    ``$ENVKIT_TRUSTED_KEYS``; empty when neither names any."""
    spec = spec if spec else os.environ.get(TRUSTED_KEYS_ENV, "")
    keys: dict[str, ec.EllipticCurvePublicKey] = {}
    sources = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        path = Path(item)
        files = sorted(path.glob("*.pub")) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise TrustError(f"the trusted-keys directory {path} holds no .pub file", reason="no key",
                             hint=GET_KEY_HINT)
        for file in files:
            public = load_public_key(file)
            keys[fingerprint(public)] = public
            sources.append(str(file))
    return TrustedKeys(keys, tuple(sources))


def load_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    data = _read(path, "trusted key")
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise TrustError(f"{path} is not a PEM public key", reason="not a key",
                         hint=f"name the {PUBLIC_FILE} file (a private key is never needed to verify)") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise TrustError(f"{path} is not an ECDSA P-256 public key", reason="not a P-256 key", hint=GET_KEY_HINT)
    return key


def describe_key(path: Path) -> dict:
    """``envkit keys show FILE``: a public key's (or a private key's public half's) fingerprint; never the key."""
    data = _read(path, "key")
    if b"PRIVATE KEY" in data:
        signing = load_signing_key(path)
        assert signing is not None
        return {"path": str(path), "kind": "private", "fingerprint": signing.fingerprint, "algorithm": "ECDSA P-256"}
    return {"path": str(path), "kind": "public", "fingerprint": fingerprint(load_public_key(path)),
            "algorithm": "ECDSA P-256"}


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TrustError(f"cannot read the {what} {path}: {exc.strerror or exc}", reason="unreadable key",
                         hint="check the path; `envkit keys generate --out DIR` makes a key pair") from None
