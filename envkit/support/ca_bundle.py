"""The CA bundle that every step talking to an index trusts when the spec names none (``$ENVKIT_CA_BUNDLE``, else
``$PIP_CERT``), and the check that a bundle holds certificates, as TLS will load it (a file without any otherwise
surfaces as "cannot reach the package index", blamed on the network)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from ..errors import Location, SpecError

PEM_HINT = ("give a PEM bundle (-----BEGIN CERTIFICATE----- blocks); convert a DER file with "
            "`openssl x509 -inform der -in ca.cer -out ca.pem`")


def check_pem(path: Path, what: str, location: Location | None) -> Path:
    """``path`` when TLS can load it as CA certificates; else the error that says so, where it was named (a file
    holding no certificate otherwise surfaces as "cannot reach the package index", blamed on the network)."""
    try:
        st = path.stat()
        problem = _pem_problem(str(path), (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size))
    except OSError as exc:  # raised, so never cached: a permission may be fixed any moment
        problem = ("cannot be read", exc.strerror or str(exc))
    if problem is None:
        return path
    if problem[0] == "cannot be read":
        raise SpecError(f"{what} cannot be read: {problem[1]}", location=location,
                        hint="make it readable by this user, or name another bundle")
    raise SpecError(f"{what} holds no PEM certificate ({problem[1]})", location=location, hint=PEM_HINT)


@functools.lru_cache(maxsize=8)
def _pem_problem(path: str, _version: tuple[int, ...]) -> tuple[str, str] | None:
    """Load the bundle as TLS will (37 ms for Debian's 144 certificates), once per file version and process: the
    version is its device, inode, mtime, ctime and size (a copy that keeps the mtime, a rename over it, a chmod:
    each changes one)."""
    import ssl

    try:
        ssl.create_default_context(cafile=path)
    except ssl.SSLError as exc:  # a subclass of OSError: the bundle was read and holds no certificate
        return "no certificate", str(exc.reason or exc)
    return None


CA_ENV = ("ENVKIT_CA_BUNDLE", "PIP_CERT")  # where a CA bundle comes from when the spec names none, in order


def env_ca_source() -> tuple[str, Path] | None:
    """The first of CA_ENV that names a file, and the file (one naming nothing is skipped: `envkit doctor` says so)."""
    for var in CA_ENV:
        value = os.environ.get(var)
        if value and Path(value).is_file():
            return var, Path(value)
    return None


def env_ca_skipped() -> list[tuple[str, str]]:
    """The CA variables consulted before the one ``env_ca_source`` takes (all, when none names a file) that are set
    but name no file: (variable, value). Resolve and build skip them; doctor fails on them, the others warn."""
    found = env_ca_source()
    consulted = CA_ENV[:CA_ENV.index(found[0]) + 1] if found else CA_ENV
    return [(v, os.environ[v]) for v in consulted if os.environ.get(v) and not Path(os.environ[v]).is_file()]


def env_ca_bundle() -> Path | None:
    """The file of ``env_ca_source``."""
    found = env_ca_source()
    return found[1] if found else None


_PEM_BLOCK = re.compile(r"-----BEGIN CERTIFICATE-----\s.*?-----END CERTIFICATE-----", re.DOTALL)


def site_certificates(path: Path) -> str:
    """The certificates of the bundle at ``path`` that are not public roots (not in certifi's Mozilla bundle, which
    Debian's ca-certificates package also ships): a TLS-intercepting proxy's CA, a private index's CA. A bundle is
    often the host's whole trust store (220 kB here) while a build argument holds at most 128 kB, and the image's
    own ca-certificates already holds the public roots. All of them when certifi is not installed."""
    import ssl

    blocks = _PEM_BLOCK.findall(path.read_text(errors="replace"))
    try:
        import certifi

        public = {ssl.PEM_cert_to_DER_cert(b) for b in _PEM_BLOCK.findall(Path(certifi.where()).read_text())}
    except ImportError:
        public = set()
    return "".join(b + "\n" for b in blocks if ssl.PEM_cert_to_DER_cert(b) not in public)
