"""Logins for package indexes that ask for one (a company's Artifactory, Nexus or devpi).

Credentials never go into team.yaml, the lock or an image: the spec names the index by its plain
URL, and the login comes from the netrc file every Python packaging tool already reads (``$NETRC``,
else ``~/.netrc``; one ``machine HOST login USER password TOKEN`` line per index host), else from the
system keyring, as pip's ``--keyring-provider import`` asks it (the ``keyring`` package, with whatever
backend the user set up: Secret Service, ``artifacts-keyring``, Google's or AWS's plugins). With it:

* ``envkit resolve``: envkit's index client (requests) and uv read that file themselves;
* ``envkit bundle make``: the host's pip reads it too;
* ``envkit build --builder buildkit``: ``netrc_for`` writes a netrc holding only the lines for the
  lock's own index hosts, given to the build as the secret ``index-netrc``, which each pip RUN mounts
  at ``/root/.netrc``. It never lands in a layer (the classic builder cannot mount secrets: its
  builds of a login index fail with pip's 401, and ``login_refused`` says what to do instead).

A keyring login reaches the same tools through ``keyring_logins``: while it is open, ``$NETRC`` names a
private copy of the user's netrc with the keyring's lines added (a build-secrets scratch directory,
removed after, swept if a killed envkit left it).

The file is checked before use: a malformed line fails with its file and line (requests and pip
would silently ignore the whole file and then meet a 401).
"""

from __future__ import annotations

import contextlib
import netrc
import os
import re
from pathlib import Path
from typing import Iterable, Iterator
from urllib.parse import urlsplit

from ..errors import Location, SpecError
from ..support import scratch
from .urls import DEFAULT_INDEX, host_of

SECRET_ID = "index-netrc"
NETRC_TARGET = "/root/.netrc"  # where pip (as root, in the builder stages) reads it
# pip: "401 Client Error: Unauthorized for url"; uv: "(401 Unauthorized)". pip in a build meets a 401 by
# prompting "User for HOST: " and dies with EOFError (with --no-input it would say only "no versions found")
UNAUTHORIZED = re.compile(r"\b(Unauthorized|Forbidden)\b|User for \S+:")


def netrc_path() -> Path | None:
    """The netrc file pip, uv and requests read: ``$NETRC`` when set (even empty: then none), else ``~/.netrc``;
    None when there is none."""
    named = os.environ.get("NETRC")
    if named == "":
        return None
    path = Path(named).expanduser() if named is not None else Path.home() / ".netrc"
    return path if path.is_file() else None


def _parsed(path: Path) -> netrc.netrc:
    try:
        return netrc.netrc(str(path))
    except netrc.NetrcParseError as exc:
        raise SpecError(f"cannot read the netrc file: {exc.msg}",
                        hint="each entry reads `machine HOST login USER password TOKEN`; pip, uv and requests "
                             "silently skip a file they cannot parse, so fix or move it",
                        location=Location(str(exc.filename or path), exc.lineno or None)) from None
    except UnicodeDecodeError as exc:
        raise netrc_not_text(path, exc) from None
    except OSError as exc:
        raise SpecError(f"cannot read the netrc file: {exc.strerror}",
                        hint="make it readable by this user (chmod 600), or point $NETRC elsewhere",
                        location=Location(str(path))) from None


def netrc_not_text(path: Path | str, exc: UnicodeDecodeError) -> SpecError:
    """The error for a netrc file that is not text (requests, reading it for every request, raises from deep inside)."""
    return SpecError(f"cannot read the netrc file: it is not text ({exc.reason} at byte {exc.start})",
                     hint="a netrc file holds lines `machine HOST login USER password TOKEN`: fix or move it, "
                          "or point $NETRC at the right file", location=Location(str(path)))


def check_netrc_text() -> None:
    """Fail when the netrc file is not text: requests reads it for every request (PyPI's too, and the engine's
    socket's) and would raise UnicodeDecodeError; a text file it cannot parse it skips, and so does this."""
    path = netrc_path()
    if path is None:
        return
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise netrc_not_text(path, exc) from None
    except OSError:
        pass  # requests skips a file it cannot open


def check_netrc() -> Path | None:
    """The netrc file, parsed once so a malformed one fails here with its line; None when there is none."""
    path = netrc_path()
    if path is not None:
        _parsed(path)
    return path


def _may_ask(url: str | None) -> bool:
    """Whether the keyring may be asked about ``url``: an index other than PyPI."""
    return url is not None and bool(url) and url.rstrip("/") != DEFAULT_INDEX.rstrip("/") \
        and host_of(url) not in (None, "pypi.org")


def keyring_login(url: str) -> tuple[str, str] | None:
    """The login the system keyring holds for the index ``url``, asked as pip asks it: for the URL, then
    its ``host:port``, then its host. None when the ``keyring`` package is not installed, no backend
    answers (a backend that fails counts as none: the index's 401 then says where to put a login), or it
    holds nothing. PyPI is never asked: it needs no login, and some backends prompt."""
    if not _may_ask(url):
        return None
    try:
        import keyring
    except ImportError:
        return None
    parts = urlsplit(url)
    for service in dict.fromkeys(s for s in (url, parts.netloc.rsplit("@", 1)[-1], parts.hostname) if s):
        try:
            found = keyring.get_credential(service, None)
        except Exception:  # noqa: BLE001 - any backend's failure (locked, no D-Bus, a plugin's own) is "no login"
            return None
        if found is not None and found.username and found.password:
            return found.username, found.password
    return None


def _line(host: str, login: str, password: str, where: str) -> str:
    if any(c.isspace() or c == '"' for c in f"{login}{password}"):
        raise SpecError(f"{where}: the login for {host} holds a space or a quote, which a netrc line cannot carry "
                        "to the build", hint="use a token without spaces (most mirrors issue API tokens)")
    return f"machine {host} login {login} password {password}\n"


def _keyring_lines(urls: Iterable[str | None], parsed: netrc.netrc | None) -> dict[str, str]:
    """Per host of ``urls`` that the netrc file has no entry for, the keyring's login as a netrc line."""
    lines: dict[str, str] = {}
    for url in dict.fromkeys(u for u in urls if u):
        host = host_of(url)
        if not host or host in lines or (parsed is not None and parsed.authenticators(host) is not None):
            continue
        if (found := keyring_login(url)) is not None:
            lines[host] = _line(host, *found, where="the system keyring")
    return lines


def _netrc() -> tuple[Path | None, netrc.netrc | None]:
    """The netrc file and its entries (None, None: there is none)."""
    path = netrc_path()
    return path, (_parsed(path) if path is not None else None)


def netrc_for(urls: Iterable[str | None]) -> bytes | None:
    """A netrc holding only the entries (``default`` applied as the tools apply it) for the hosts of
    ``urls`` (None entries skipped), from the netrc file, else from the system keyring; None when
    no host has one."""
    hosts = sorted({h for h in map(host_of, urls) if h})
    if not hosts:
        return None
    path, parsed = _netrc()
    lines = []
    for host in hosts:
        entry = parsed.authenticators(host) if parsed is not None else None
        if entry is not None:
            login, _account, password = entry
            lines.append(_line(host, login, password, where=str(path)))
    lines += _keyring_lines(urls, parsed).values()
    return "".join(lines).encode() if lines else None


def login_source(url: str | None) -> str | None:
    """Where the login for ``url``'s host comes from: the netrc file's path, "the system keyring", or None."""
    host = host_of(url)
    if not host:
        return None
    path, parsed = _netrc()
    if parsed is not None and parsed.authenticators(host) is not None:
        return str(path)
    return "the system keyring" if _keyring_lines([url], parsed) else None


@contextlib.contextmanager
def keyring_logins(urls: Iterable[str | None]) -> Iterator[list[str]]:
    """While open, the system keyring's logins for the hosts of ``urls`` that the netrc file lacks are where
    requests, uv and pip look: ``$NETRC`` names a private file (0600, in a build-secrets scratch directory)
    holding the user's netrc and then those lines. Yields those hosts (none: nothing changes)."""
    urls = [u for u in urls if _may_ask(u)]
    path, parsed = _netrc() if urls else (None, None)
    extra = _keyring_lines(urls, parsed)
    if not extra:
        yield []
        return
    scratch.sweep_secrets()
    before = os.environ.get("NETRC")
    with scratch.directory("secrets") as directory:
        merged = Path(directory) / "netrc"
        merged.touch(mode=0o600)
        own = path.read_text() if path is not None else ""
        merged.write_text(own + ("\n" if own and not own.endswith("\n") else "") + "".join(extra.values()))
        os.environ["NETRC"] = str(merged)
        try:
            yield sorted(extra)
        finally:
            if before is None:
                os.environ.pop("NETRC", None)
            else:
                os.environ["NETRC"] = before


def refused_index(output: str, urls: Iterable[str | None]) -> str | None:
    """The index of ``urls`` (PyPI, which never asks, left out) that a tool's ``output`` shows asking for a
    login: the one whose host it names, else the first; None when it shows no 401/403 or none is private."""
    private = [u for u in dict.fromkeys(urls) if u and u != DEFAULT_INDEX]
    if not private or not UNAUTHORIZED.search(output):
        return None
    return next((u for u in private if (host_of(u) or "\0") in output), private[0])


def netrc_named_amiss() -> str | None:
    """What is wrong with ``$NETRC`` when it names no file: empty, missing, a directory (None: unset, or a file).
    pip, uv, requests and envkit then read no netrc at all, not even ~/.netrc, and say nothing."""
    named = os.environ.get("NETRC")
    if named is None:
        return None
    if named == "":
        return "$NETRC is set but empty, so no netrc file is read (not even ~/.netrc)"
    path = Path(named).expanduser()
    if path.is_file():
        return None
    what = "a directory" if path.is_dir() else ("not a regular file" if path.exists() else "missing")
    return f"$NETRC names {path}, which is {what}, so no netrc file is read (not even ~/.netrc)"


def login_hint(url: str | None) -> str:
    host = host_of(url) or "HOST"
    amiss = netrc_named_amiss()
    return ((f"{amiss}: point $NETRC at the netrc file, or unset it; then " if amiss else "")
            + f"add `machine {host} login USER password TOKEN` to {netrc_path() or '~/.netrc'} (or the file $NETRC "
            "names; chmod 600), or store it in the system keyring (`keyring set URL USER`, with the keyring package "
            "installed beside envkit). envkit, uv and pip read either on this host, and BuildKit builds get that "
            "login alone as a build secret; never put credentials in team.yaml")


def login_refused(url: str | None, *, builder: str, passed: bool) -> str:
    """The hint for a build whose pip met a 401/403 from ``url``."""
    host = host_of(url) or "the index"
    if builder != "buildkit":
        return (f"{host} asks for a login, and the classic builder cannot pass one without writing it into a layer: "
                f"build with `--builder buildkit` (the netrc line for {host} goes in as a build secret), or make an "
                f"offline bundle (`envkit bundle make` logs in from this host) and build from it")
    if passed:
        return f"{host} refused the login from {login_source(url) or netrc_path()}: check the user and token there"
    return login_hint(url)
