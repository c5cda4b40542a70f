"""Where packages come from: the default index, the API envkit speaks to any index, and what a URL tells about
trust (an http index must be named a trusted host) and logins (the host a netrc line is matched on)."""

from __future__ import annotations

from typing import Iterable
from urllib.parse import urlsplit

DEFAULT_INDEX = "https://pypi.org/simple"
JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"  # PEP 691


def trusted_hosts(urls: Iterable[str | None]) -> list[str]:
    """The ``host[:port]`` of each plain-http index in ``urls``, once each: pip ignores an http index on
    any host but localhost unless it is named with ``--trusted-host``. An index the user named is taken
    as meant (every file is pinned by its sha256 in the lock); https indexes are verified as usual."""
    hosts: list[str] = []
    for url in urls:
        parts = urlsplit(url or "")
        if parts.scheme == "http" and parts.netloc and parts.netloc not in hosts:
            hosts.append(parts.netloc)
    return hosts


def host_of(url: str | None) -> str | None:
    """The host a netrc line is matched on (no port: as requests, pip and uv look it up)."""
    return urlsplit(url or "").hostname


def uv_index_args(index_url: str, extra_index_url: str | None) -> list[str]:
    """uv's index arguments for a lock's indexes, as the resolver asked them and the build's uv asks them again:
    uv takes each package from the first index that has it (its default strategy, which also reports an index's
    401) and asks --extra-index-url before --index-url, so the framework's own index goes in --extra-index-url."""
    if extra_index_url and extra_index_url != index_url:
        return ["--index-url", extra_index_url, "--extra-index-url", index_url]
    return ["--index-url", index_url]
