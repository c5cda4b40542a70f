"""One file from a URL, pinned by its sha256: written as it streams, refused (and removed) unless it is the pinned
file. For what envkit fetches by a pin of its own (Debian's CUDA toolkit .deb, the uv wheel of an offline bundle);
the lock's wheels go through pip or uv, which check the lock's hashes themselves."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import BuildError


def fetch_pinned(url: str, sha256: str, path: Path, *, ca_bundle: Path | None = None, hint: str) -> Path:
    """Download ``url`` to ``path``; a failure, or another sha256 than ``sha256``, is a ``BuildError`` (``hint``:
    what to check when the download fails) and leaves no file. ``ca_bundle``: the site's CA bundle, else requests'
    own (``REQUESTS_CA_BUNDLE`` or certifi's)."""
    import requests

    h = hashlib.sha256()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with requests.get(url, stream=True, timeout=60, verify=str(ca_bundle) if ca_bundle else True) as response, \
                open(path, "wb") as fh:
            response.raise_for_status()
            for block in response.iter_content(1 << 20):
                h.update(block)
                fh.write(block)
    except (requests.RequestException, OSError) as exc:
        path.unlink(missing_ok=True)
        raise BuildError(f"cannot download {url}: {exc}", hint=hint) from None
    if h.hexdigest() != sha256:
        path.unlink()
        raise BuildError(f"{url} has sha256 {h.hexdigest()[:12]}..., not the pinned {sha256[:12]}...",
                         hint="the server sent another file than the one envkit pins; check the mirror or proxy")
    return path
