"""Lock the full Python closure with hashes, for the image's Python and platform.

``uv pip compile`` does the solving (it reads the index's metadata by range requests
and is fast); envkit asks it exactly as the build installs: binary only (the Dockerfile's
pip runs with ``--only-binary=:all:``), for the image's interpreter version and glibc, from
the same indexes. Its output becomes pinned packages with their hashes and, from uv's
``# via`` annotations, which packages required each one (so the framework's own closure
can be told apart from the extras' within one joint solve).

When uv finds no solution its own explanation is kept (``ClosureError.cause``), and a
package that has no wheel for the image is named (``ClosureError.no_wheel``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import sysconfig
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from packaging.utils import canonicalize_name

from ..errors import PackageIndexError, ResolutionError
from ..support import procs, scratch
from .login import login_hint, refused_index
from .urls import uv_index_args

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")
_VIA = re.compile(r"#\s*via\s+(.+)$", re.M)
_NO_WHEEL = re.compile(r"Wheels are required for `([^`]+)`")
REQUESTED = "-r"  # in ``Pin.via``: asked for in the requirements themselves


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]
    via: tuple[str, ...] = field(default=(), compare=False)  # what required it (canonical names; REQUESTED)


def pin_digest(name: str, version: str, hashes: Iterable[str], python: str, glibc: str) -> str:
    """The digest a pin's wheel facts are kept under on disk (``PackageIndex.remembered``): its name, version and
    every file hash (the files uv saw, whose bytes never change) with the image's Python and glibc (which of those
    files installs)."""
    return hashlib.sha256("\n".join((name, version, python, glibc, *sorted(hashes))).encode()).hexdigest()


class ClosureError(ResolutionError):
    """uv found no solution. ``cause``: uv's own explanation; ``no_wheel``: the package uv said has no wheel
    for the image (binary only), when that is why."""

    def __init__(self, message: str, *, cause: str, no_wheel: str | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.cause = cause
        self.no_wheel = no_wheel


def framework_group(pins: list[Pin], root: str) -> set[str]:
    """The names in ``pins`` that ``root`` needs: itself and, transitively, what it requires (read backwards
    from the ``via`` annotations). In a joint solve of the framework and the extras these are the framework's
    closure as the extras allowed it; the rest is the extras'."""
    root = str(canonicalize_name(root))
    children: dict[str, set[str]] = {}
    for pin in pins:
        for parent in pin.via:
            children.setdefault(parent, set()).add(pin.name)
    group, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in group:
                group.add(child)
                todo.append(child)
    return group


def uv_binary() -> str:
    """The uv executable installed beside envkit (the ``uv`` dependency), else PATH's."""
    scripts = Path(sysconfig.get_path("scripts"))
    for candidate in (scripts / "uv", Path(sys.executable).parent / "uv"):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which("uv")
    if not found:
        raise ResolutionError("uv is not installed", hint="pip install uv (it is a dependency of envkit)")
    return found


def compile_closure(requirements: list[str], *, python: str, glibc: str, index_url: str,
                    constraints: list[Pin] | None = None, extra_index_url: str | None = None,
                    extra_constraints: list[str] | None = None, machine: str = "x86_64",
                    ca_bundle: Path | None = None) -> list[Pin]:
    """Pin ``requirements`` and everything they need, with every file hash.

    ``ca_bundle``: the PEM bundle uv verifies TLS with (``--cert``: in place of the system store, as
    pip's ``--cert`` in the build). A plain-http index needs nothing more (uv asks it as named)."""
    platform = f"{machine}-manylinux_{_uv_glibc(glibc).replace('.', '_')}"
    with scratch.directory("closure") as tmp:
        req_in = Path(tmp) / "requirements.in"
        req_in.write_text("\n".join(requirements) + "\n")
        cmd = [uv_binary(), "pip", "compile", str(req_in), "--quiet", "--no-header", "--only-binary", ":all:",
               "--annotation-style", "line", "--generate-hashes", "--python-version", python,
               "--python-platform", platform, "--no-config"]
        lines = [f"{p.name}=={p.version}" for p in constraints or ()] + list(extra_constraints or ())
        if lines:
            cons = Path(tmp) / "constraints.txt"
            cons.write_text("\n".join(lines) + "\n")
            cmd += ["--constraint", str(cons)]
        cmd += uv_index_args(index_url, extra_index_url)  # the framework's own index first (as the build's uv)
        if ca_bundle is not None:
            cmd += ["--cert", str(ca_bundle)]
        env = dict(os.environ)
        env.setdefault("UV_NATIVE_TLS", "1")  # trust the system store (and a proxy's CA in it)
        proc = procs.run(cmd, env=env)  # interrupted or killed, envkit stops uv with SIGTERM (procs)
    if proc.returncode != 0:
        detail = proc.stderr.strip().splitlines()
        refused = refused_index(proc.stderr, (index_url, extra_index_url))
        if refused is not None:
            raise PackageIndexError(f"{refused} asks for a login: uv said: " + " ".join(detail[-4:]),
                                    hint=login_hint(refused))
        cause = _cause(proc.stderr)
        no_wheel = _NO_WHEEL.search(proc.stderr)
        raise ClosureError(
            "the Python closure could not be solved: " + (" ".join(cause.split()) or " ".join(detail[-6:])),
            hint=f"requirements were: {', '.join(requirements)}; relax an extra pip package, "
                 "or check the index is reachable",
            cause=cause, no_wheel=canonicalize_name(no_wheel.group(1)) if no_wheel else None)
    return parse_requirements(proc.stdout)


def _cause(stderr: str) -> str:
    """uv's explanation of a failed solve (its ``cause:`` paragraph and hints), without the banner line."""
    lines = [ln for ln in stderr.strip().splitlines() if not ln.startswith("error: No solution found")]
    text = "\n".join(lines).strip()
    return text.removeprefix("cause:").strip()


@dataclass(frozen=True)
class LockedWheel:
    """One wheel uv would install for a pin, as uv's PEP 751 output (``pylock.toml``) describes it."""
    name: str
    version: str
    sha256: str
    size: int | None
    upload_time: str | None  # ISO 8601, as the index's listing gives it (PEP 700)


def locked_wheels(pins: list[tuple[str, str]], *, python: str, glibc: str, index_url: str,
                  extra_index_url: str | None = None, machine: str = "x86_64", ca_bundle: Path | None = None,
                  offline: bool = True) -> list[LockedWheel]:
    """The wheel uv picks for each exact pin ``(name, version)`` on the image's Python and platform, with its size
    and upload time: ``uv pip compile --no-deps --format pylock.toml`` of the pins. ``offline``: from uv's own
    cache alone (the closure's solve has just read every listing: a fraction of a second for a whole image).
    Raises ``ClosureError`` when uv cannot answer (offline: a listing uv has not cached)."""
    platform = f"{machine}-manylinux_{_uv_glibc(glibc).replace('.', '_')}"
    with scratch.directory("wheels") as tmp:
        req_in = Path(tmp) / "pins.txt"
        req_in.write_text("".join(f"{name}=={version}\n" for name, version in pins))
        out = Path(tmp) / "pylock.toml"
        cmd = [uv_binary(), "pip", "compile", str(req_in), "--quiet", "--no-header", "--no-deps", "--only-binary",
               ":all:", "--python-version", python, "--python-platform", platform, "--no-config", "-o", str(out)]
        cmd += uv_index_args(index_url, extra_index_url) + (["--offline"] if offline else [])
        if ca_bundle is not None:
            cmd += ["--cert", str(ca_bundle)]
        env = dict(os.environ)
        env.setdefault("UV_NATIVE_TLS", "1")
        proc = procs.run(cmd, env=env)
        if proc.returncode != 0:
            raise ClosureError("uv could not list the locked wheels: " + " ".join(proc.stderr.split())[-300:],
                               cause=proc.stderr)
        doc = tomllib.loads(out.read_text())
    return [LockedWheel(str(canonicalize_name(p["name"])), str(p.get("version", "")), w["hashes"]["sha256"],
                        w.get("size") if isinstance(w.get("size"), int) else None,
                        _iso(w.get("upload-time")))
            for p in doc.get("packages", []) for w in p.get("wheels", []) if "sha256" in w.get("hashes", {})]


def _iso(value: object) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else (str(value) if value else None)


UV_MAX_GLIBC = (2, 40)  # the newest manylinux target uv names; no wheel needs newer yet


def _uv_glibc(glibc: str) -> str:
    parts = tuple(int(x) for x in glibc.split("."))
    return ".".join(map(str, min(parts, UV_MAX_GLIBC)))


def parse_requirements(text: str) -> list[Pin]:
    pins: list[Pin] = []
    for block in re.split(r"\n(?=\S)", text.replace("\\\n", " ")):
        block = block.strip()
        if not block or block.startswith("#"):
            continue
        m = _PIN.match(block)
        if not m:
            raise ResolutionError(f"unexpected line in the compiled closure: {block[:80]!r}")
        via = _VIA.search(block)
        named = [x.strip() for x in via.group(1).split(",")] if via else []
        parents = tuple(REQUESTED if v.startswith("-r ") else canonicalize_name(v)
                        for v in named if v and not v.startswith("-c "))
        pins.append(Pin(canonicalize_name(m.group(1)), m.group(3), tuple(sorted(_HASH.findall(block))), parents))
    return sorted(pins, key=lambda p: p.name)
