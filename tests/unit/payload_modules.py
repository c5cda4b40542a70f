"""The payload's modules as the payload itself imports them: by their top-level names
(``envkit_check_core``, ``envkit_check_torch``, ...), from its directory on sys.path.

The payload runs as ``python3 <dir>``, which puts the directory first on sys.path; its modules
import one another by those names, and spawned ranks (torch.multiprocessing) find them through
the sys.path they inherit. The tests do the same (appended, so nothing is shadowed), so a test
that monkeypatches a name patches it in the module where the payload looks it up.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tests.conftest import ROOT

PAYLOAD_DIR = ROOT / "envkit" / "payload" / "envkit_check"


def payload_module(name: str) -> ModuleType:
    if str(PAYLOAD_DIR) not in sys.path:
        sys.path.append(str(PAYLOAD_DIR))
    return importlib.import_module(name)


def rendered_payload(files: dict[str, bytes]) -> dict[str, bytes]:
    """The payload's files in a rendered build context (copied into images at /opt/envkit/envkit_check)."""
    return {name: data for name, data in files.items() if name.startswith("envkit/envkit_check/")}


def payload_sources() -> dict[str, bytes]:
    """What a build context must hold of the payload: every module of its directory, byte for byte."""
    return {f"envkit/envkit_check/{p.name}": p.read_bytes() for p in sorted(PAYLOAD_DIR.glob("*.py"))}
