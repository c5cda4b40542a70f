"""Logins for package indexes that ask for one (a company's Artifactory, Nexus or devpi).

Credentials never go into team.yaml, the lock or an image: the spec names the index by its plain
URL, and the login comes from the netrc file every Python packaging tool already reads (``$NETRC``,
else ``~/.netrc``; one ``machine HOST login USER password TOKEN`` line per index host). With it:

* ``envkit resolve``: envkit's index client (requests) and uv read that file themselves;
* ``envkit bundle make``: the host's pip reads it too;
* ``envkit build --builder buildkit``: ``netrc_for`` writes a netrc holding only the lines for the
  lock's own index hosts, given to the build as the secret ``index-netrc``, which each pip RUN mounts
  at ``/root/.netrc``. It never lands in a layer (the classic builder cannot mount secrets: its
  builds of a login index fail with pip's 401, and ``login_refused`` says what to do instead).

The file is checked before use: a malformed line fails with its file and line (requests and pip
would silently ignore the whole file and then meet a 401).
"""

from __future__ import annotations

import netrc
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from .errors import Location, SpecError
from .index import DEFAULT_INDEX

SECRET_ID = "index-netrc"
NETRC_TARGET = "/root/.netrc"  # where pip (as root, in the builder stages) reads it
# pip: "401 Client Error: Unauthorized for url"; uv: "(401 Unauthorized)". pip in a build meets a 401 by
# prompting "User for HOST: " and dies with EOFError (with --no-input it would say only "no versions found")
UNAUTHORIZED = re.compile(r"\b(Unauthorized|Forbidden)\b|User for \S+:")


def netrc_path() -> Path | None:
    """The netrc file pip, uv and requests read: ``$NETRC``, else ``~/.netrc``; None when there is none."""
    named = os.environ.get("NETRC")
    path = Path(named).expanduser() if named else Path.home() / ".netrc"
    return path if path.is_file() else None


def host_of(url: str | None) -> str | None:
    """The host a netrc line is matched on (no port: as requests, pip and uv look it up)."""
    return urlsplit(url or "").hostname


def _parsed(path: Path) -> netrc.netrc:
    try:
        return netrc.netrc(str(path))
    except netrc.NetrcParseError as exc:
        raise SpecError(f"cannot read the netrc file: {exc.msg}",
                        hint="each entry reads `machine HOST login USER password TOKEN`; pip, uv and requests "
                             "silently skip a file they cannot parse, so fix or move it",
                        location=Location(str(exc.filename or path), exc.lineno or None)) from None
    except OSError as exc:
        raise SpecError(f"cannot read the netrc file: {exc.strerror}",
                        hint="make it readable by this user (chmod 600), or point $NETRC elsewhere",
                        location=Location(str(path))) from None


def check_netrc() -> Path | None:
    """The netrc file, parsed once so a malformed one fails here with its line; None when there is none."""
    path = netrc_path()
    if path is not None:
        _parsed(path)
    return path


def netrc_for(urls) -> bytes | None:
    """A netrc holding only the entries (``default`` applied as the tools apply it) for the hosts of
    ``urls`` (None entries skipped); None when no host has one or there is no netrc file."""
    path = netrc_path()
    hosts = sorted({h for h in map(host_of, urls) if h})
    if path is None or not hosts:
        return None
    parsed = _parsed(path)
    lines = []
    for host in hosts:
        entry = parsed.authenticators(host)
        if entry is None:
            continue
        login, _account, password = entry
        if any(c.isspace() or c == '"' for c in f"{login}{password}"):
            raise SpecError(f"{path}: the login for {host} holds a space or a quote, which a netrc line cannot carry "
                            "to the build", hint="use a token without spaces (most mirrors issue API tokens)")
        lines.append(f"machine {host} login {login} password {password}\n")
    return "".join(lines).encode() if lines else None


def refused_index(output: str, urls) -> str | None:
    """The index of ``urls`` (PyPI, which never asks, left out) that a tool's ``output`` shows asking for a
    login: the one whose host it names, else the first; None when it shows no 401/403 or none is private."""
    private = [u for u in dict.fromkeys(urls) if u and u != DEFAULT_INDEX]
    if not private or not UNAUTHORIZED.search(output):
        return None
    return next((u for u in private if host_of(u) in output), private[0])


def login_hint(url: str | None) -> str:
    host = host_of(url) or "HOST"
    return (f"add `machine {host} login USER password TOKEN` to {netrc_path() or '~/.netrc'} (or the file $NETRC "
            "names; chmod 600). envkit, uv and pip read it on this host, and BuildKit builds get that line alone "
            "as a build secret; never put credentials in team.yaml")


def login_refused(url: str | None, *, builder: str, passed: bool) -> str:
    """The hint for a build whose pip met a 401/403 from ``url``."""
    host = host_of(url) or "the index"
    if builder != "buildkit":
        return (f"{host} asks for a login, and the classic builder cannot pass one without writing it into a layer: "
                f"build with `--builder buildkit` (the netrc line for {host} goes in as a build secret), or make an "
                f"offline bundle (`envkit bundle make` logs in from this host) and build from it")
    if passed:
        return f"{host} refused the login from {netrc_path()}: check the user and token there"
    return login_hint(url)
