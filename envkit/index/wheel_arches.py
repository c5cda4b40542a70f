"""What a framework wheel was compiled for, read from the wheel itself.

The compiled arch list (the SASS and PTX targets) is the catalog fact least often
published and most often wrong, and it is not in wheel metadata. It is in the wheel's
bytes, in one member each, read by HTTP range requests (``PackageIndex.member``):

Where each framework's wheel holds them is the framework's (``envkit.frameworks``, ``Framework.arch``):

- torch: ``torch/lib/libtorch_python.so`` holds the compile-time ``CUDA_ARCH_FLAGS`` as a
  plain string (what ``torch._C._cuda_getArchFlags()`` and ``torch.cuda.get_arch_list()``
  return inside an image, e.g. ``sm_75 sm_80 sm_86 sm_90 sm_100 sm_120``); ~10 MB
  compressed, read whole. The string is found as a run of two or more space-separated
  ``sm_XY``/``compute_XY`` tokens; exactly one distinct run must be in the file, else the
  reading is refused (a single-arch build cannot be told from a stray token: refused too).
- tensorflow: ``tensorflow/python/platform/build_info.py`` (a few KiB) assigns
  ``build_info`` a literal whose ``cuda_compute_capabilities`` is the list
  ``tf.sysconfig.get_build_info()`` reports; parsed with ``ast``, never imported.

Readings are kept in the index's cache by the wheel's sha256 (``PackageIndex.cached``),
so a second read of the same wheel costs no request. A wheel that cannot be read raises
``WheelReadError`` (a failed connection: ``PackageIndexError``); callers decide what that
means (the refresh carries the catalog's list over, the resolver keeps the catalog's list
and says it is unconfirmed).

Arch-specific suffixes are kept as written: ``sm_90a`` is ``9.0a`` in the catalog's
TORCH_CUDA_ARCH_LIST notation (exactly cc 9.0), ``sm_100f`` is ``10.0f`` (the 10.x
family); ``compute_XY`` becomes ``+PTX`` on ``X.Y`` when ``sm_XY`` is also there. PTX
without its SASS twin (TensorFlow's ``compute_90``) has no spelling in that notation:
``arch_list`` is then None, and only the raw flags (TensorFlow's ``arches``) can hold it.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from ..errors import WheelReadError
from ..frameworks import FRAMEWORKS

if TYPE_CHECKING:
    from .client import WheelFile

CACHE_KIND = "arches-v1.json"  # the cache entry's name; bump when a reader changes
_FLAG = re.compile(r"^(sm|compute)_([0-9]{2,3})([af]?)$")
_TOKEN = rb"(?:sm|compute)_[0-9]{2,3}[af]?"
_RUN = re.compile(_TOKEN + rb"(?: " + _TOKEN + rb")+(?![A-Za-z0-9_])")


class MemberIndex(Protocol):
    """What reading needs of a package index (``envkit.index.client.PackageIndex`` answers it)."""

    url: str

    def member(self, wheel: WheelFile, name: str, *, max_bytes: int = ..., what: str | None = None) -> bytes: ...
    def cached(self, wheel: WheelFile, kind: str, compute: Callable[[], str]) -> str: ...


def torch_flags(blob: bytes, where: str = "libtorch_python.so") -> tuple[str, ...]:
    """The one CUDA arch flags string in a torch shared object, as tokens."""
    found = sorted({m.group().decode() for m in _RUN.finditer(blob)})
    if not found:
        raise WheelReadError(f"{where}: no CUDA arch flags string (two or more sm_XY/compute_XY separated by spaces)")
    if len(found) > 1:
        raise WheelReadError(f"{where}: {len(found)} different strings look like CUDA arch flags "
                             f"({'; '.join(repr(f) for f in found[:3])}); refusing to guess")
    return tuple(found[0].split())


def tf_flags(source: bytes, where: str = "build_info.py") -> tuple[str, ...]:
    """``cuda_compute_capabilities`` of the ``build_info = ...`` literal in TensorFlow's build_info.py."""
    try:
        tree = ast.parse(source.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise WheelReadError(f"{where}: not Python source: {exc}") from None
    values = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
              and any(isinstance(t, ast.Name) and t.id == "build_info" for t in node.targets)]
    if len(values) != 1:
        raise WheelReadError(f"{where}: {len(values)} assignments to build_info, not one")
    value = values[0]
    if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:  # OrderedDict([...])
        value = value.args[0]
    try:
        items = ast.literal_eval(value)
    except ValueError:
        raise WheelReadError(f"{where}: build_info is not a literal") from None
    pairs = list(items.items()) if isinstance(items, dict) else list(items) if isinstance(items, list) else []
    caps = [v for pair in pairs if isinstance(pair, tuple) and len(pair) == 2
            and pair[0] == "cuda_compute_capabilities" for v in [pair[1]]]
    if len(caps) != 1 or not isinstance(caps[0], (list, tuple)) or not caps[0]:
        raise WheelReadError(f"{where}: build_info has no one non-empty cuda_compute_capabilities list")
    flags = tuple(str(c) for c in caps[0])
    bad = [f for f in flags if not _FLAG.fullmatch(f)]
    if bad:
        raise WheelReadError(f"{where}: cuda_compute_capabilities holds {bad[0]!r}, not sm_XY/compute_XY")
    return flags


# each way a wheel holds its flags (``frameworks.ArchSource.parser``; the member is the framework's) -> its parser
PARSERS: dict[str, Callable[[bytes, str], tuple[str, ...]]] = {"flags_string": torch_flags, "build_info": tf_flags}


def to_arch_list(flags: tuple[str, ...]) -> str | None:
    """('sm_75', 'sm_120', 'compute_120') -> '7.5;12.0+PTX'; None when PTX has no SASS twin."""
    sass = [f.removeprefix("sm_") for f in flags if f.startswith("sm_")]
    ptx = {f.removeprefix("compute_") for f in flags if f.startswith("compute_")}
    if ptx - set(sass):
        return None
    items = []
    for num in dict.fromkeys(sass):
        m = _FLAG.match("sm_" + num)
        if m is None:  # sm_ flags were matched by _FLAG when read
            return None
        digits, suffix = m.group(2), m.group(3)
        items.append(f"{digits[:-1]}.{digits[-1]}{suffix}" + ("+PTX" if num in ptx else ""))
    return ";".join(items)


def same_arches(a: Iterable[str], b: Iterable[str]) -> bool:
    """Two arch lists (flags) hold the same targets, whatever their order."""
    return set(a) == set(b)


@dataclass(frozen=True)
class ArchReading:
    """The compiled targets of one wheel, and where they were read."""

    framework: str
    wheel: str  # the file name
    url: str  # the wheel's URL (no fragment)
    member: str
    flags: tuple[str, ...]  # as the build reports them, e.g. ('sm_75', ..., 'sm_120')

    @property
    def arch_list(self) -> str | None:
        """The flags in TORCH_CUDA_ARCH_LIST notation ('7.5;...;12.0'); None when it cannot spell them."""
        return to_arch_list(self.flags)

    @property
    def source(self) -> str:
        """How it was read, for a catalog note or a lock decision."""
        return f"{self.member} in {self.wheel} ({self.url}), read by HTTP range requests"

    def to_json(self) -> dict:
        return {"framework": self.framework, "wheel": self.wheel, "url": self.url, "member": self.member,
                "flags": list(self.flags), "arch_list": self.arch_list}


def read_arches(index: MemberIndex, wheel: WheelFile, framework: str) -> ArchReading:
    """What ``wheel`` (a torch or tensorflow wheel of ``index``) was compiled for.

    Raises ``WheelReadError`` when the wheel does not say (no ranges, no member, no single
    flags string), ``PackageIndexError`` when the index cannot be reached; only a reading
    is cached."""
    known = FRAMEWORKS.get(framework)
    source = known.arch if known is not None else None
    if source is None:
        raise WheelReadError(f"no reader of compiled arches for {framework} wheels")
    member, parse = source.member, PARSERS[source.parser]
    url = wheel.url.split("#", 1)[0]

    def read() -> str:
        flags = parse(index.member(wheel, member), f"{wheel.filename}: {member}")
        return json.dumps({"member": member, "flags": list(flags)})

    doc = json.loads(index.cached(wheel, CACHE_KIND, read))
    return ArchReading(framework=framework, wheel=wheel.filename, url=url, member=doc["member"],
                       flags=tuple(doc["flags"]))


__all__ = ["ArchReading", "CACHE_KIND", "PARSERS", "read_arches", "same_arches", "tf_flags", "to_arch_list",
           "torch_flags"]
