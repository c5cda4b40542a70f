"""Lock the full Python closure with hashes, for the image's Python and platform.

``uv pip compile`` does the solving (it reads the index's metadata by range requests
and is fast); envkit only asks it for the image's interpreter version and glibc, and
parses its output into pinned packages with their hashes.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from . import procs, scratch
from .errors import PackageIndexError, ResolutionError
from .index_login import login_hint, refused_index

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


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
        cmd = [uv_binary(), "pip", "compile", str(req_in), "--quiet", "--no-header",
               "--no-annotate", "--generate-hashes", "--python-version", python,
               "--python-platform", platform, "--index-url", index_url, "--no-config"]
        lines = [f"{p.name}=={p.version}" for p in constraints or ()] + list(extra_constraints or ())
        if lines:
            cons = Path(tmp) / "constraints.txt"
            cons.write_text("\n".join(lines) + "\n")
            cmd += ["--constraint", str(cons)]
        if extra_index_url:
            # the framework's own index first (uv takes each package from the first index that has it)
            cmd += ["--extra-index-url", extra_index_url]
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
        raise ResolutionError(
            "the Python closure could not be solved: " + " ".join(detail[-6:]),
            hint=f"requirements were: {', '.join(requirements)}; relax an extra pip package, "
                 "or check the index is reachable",
        )
    return parse_requirements(proc.stdout)


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
        pins.append(Pin(canonicalize_name(m.group(1)), m.group(3), tuple(sorted(_HASH.findall(block)))))
    return sorted(pins, key=lambda p: p.name)
