"""The shared libraries a wheel's compiled code links, read from the wheel itself.

A package's metadata rarely says which CUDA it was built for, but its shared objects do: each ``.so`` names the
libraries the dynamic loader must find in its ``DT_NEEDED`` entries (``libcudart.so.11``, ``libcudnn.so.8``). Read
here with pyelftools from the wheel's members by HTTP range requests (``PackageIndex.members`` / ``member``), never
downloading the wheel: the smallest ``.so`` members first (the extension modules that link the CUDA runtime are
small; the big ones are the bundled libraries themselves), at most ``MAX_MEMBERS`` of them and ``MAX_BYTES`` each.

Readings are kept in the index's cache by the wheel's sha256 (``PackageIndex.cached``): a wheel's bytes never
change. A wheel that cannot be read raises ``WheelReadError`` (the caller decides what that means).
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Callable, Protocol

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ..errors import WheelReadError

if TYPE_CHECKING:
    from .client import WheelFile

CACHE_KIND = "needed-v1.json"  # the cache entry's name; bump when the reader changes
MAX_MEMBERS = 8  # .so members read per wheel, smallest first
MAX_BYTES = 48 * 1024 * 1024  # inflated size of one member read whole


class MembersIndex(Protocol):
    """What reading needs of a package index (``envkit.index.client.PackageIndex`` answers it)."""

    def members(self, wheel: WheelFile) -> list[tuple[str, int]]: ...
    def member(self, wheel: WheelFile, name: str, *, max_bytes: int = ..., what: str | None = None) -> bytes: ...
    def cached(self, wheel: WheelFile, kind: str, compute: Callable[[], str]) -> str: ...


def needed(blob: bytes, where: str = "a shared object") -> tuple[str, ...]:
    """The ``DT_NEEDED`` entries of one ELF shared object, in its order; () for one without a dynamic segment."""
    try:
        elf = ELFFile(io.BytesIO(blob))
        out: list[str] = []
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_DYNAMIC":
                out += [str(tag.needed) for tag in seg.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
        return tuple(out)
    except (ELFError, ValueError, KeyError, IndexError) as exc:  # pyelftools on a truncated or foreign file
        raise WheelReadError(f"{where} is not a readable ELF shared object: {exc}") from None


def _is_shared_object(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return ".dist-info/" not in name and (base.endswith(".so") or ".so." in base)


def read_needed(index: MembersIndex, wheel: WheelFile) -> dict[str, tuple[str, ...]]:
    """Each inspected ``.so`` member of ``wheel`` -> its ``DT_NEEDED`` entries (the smallest ``MAX_MEMBERS`` under
    ``MAX_BYTES``); {} for a wheel with none."""

    def read() -> str:
        sos = sorted(((n, size) for n, size in index.members(wheel) if _is_shared_object(n) and size <= MAX_BYTES),
                     key=lambda m: (m[1], m[0]))
        found = {n: list(needed(index.member(wheel, n, max_bytes=MAX_BYTES), f"{wheel.filename}: {n}"))
                 for n, _ in sos[:MAX_MEMBERS]}
        return json.dumps(found, sort_keys=True)

    return {k: tuple(v) for k, v in json.loads(index.cached(wheel, CACHE_KIND, read)).items()}
