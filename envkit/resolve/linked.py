"""What the finished closure's compiled code links and where it runs, checked against the image (issue 32).

``resolve/binaries.py`` knows the packages the catalog has rows for. Here the rest:

- ``check_linked``: the shared objects of each locked wheel the catalog has no CUDA row for and that is not
  pure Python (at most ``MAX_PACKAGES`` looked up, the ``pip:`` entries first) are read for their ``DT_NEEDED``
  entries (``index/wheel_needed.py``, by range requests; each pin's answer is kept on disk by the digest of its
  hashes and the image's Python and glibc, so a resolve of pins read before asks the index nothing); a CUDA
  runtime, cuBLAS or cuDNN soname of another major than the image's (``catalog binaries.yaml: cuda_sonames``) is
  refused naming the package, the library it needs and the one the image has. A wheel that cannot be read is
  said, not refused.
- ``check_cpu_fallback``: an accelerator library that runs on the CPU only as installed (``cpu_only``: ``jax``
  without its CUDA plugin, ``onnxruntime``) in a GPU image is a warning naming what gives it the GPU, or a refusal
  under ``build.cpu_fallback: refuse``.

Each decision names the catalog file and its sources, which ``envkit explain`` shows.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..catalog.models import Catalog
from ..errors import PackageIndexError
from ..index.closure import Pin, pin_digest
from ..index.wheel_needed import CACHE_KIND, read_needed
from ..lock import Decision
from .binaries import CPU_TOPIC, LINKED_TOPIC, BinaryMismatch, _cited, entry_for
from .candidates import Candidate
from .joint import Target

MAX_PACKAGES = 48  # locked packages looked up per image (the pip: entries first), 8 at a time
WARNING = "WARNING: "

# a locked pin -> each inspected .so member of the wheel it installs -> its DT_NEEDED entries; None: a pure-Python
# wheel or none found
Reader = Callable[[Pin], "dict[str, tuple[str, ...]] | None"]
PIN_KIND = "pin-" + CACHE_KIND  # a pin's answer on disk (wheel_needed's version: a new reader reads again)


def reader(index: object, python: str, glibc: str) -> Reader | None:
    """A ``Reader`` over ``index`` (a ``PackageIndex``); None for an index that cannot read wheel members. A pin
    with hashes is answered from ``index.remembered`` when read before: no listing, no range request."""
    members, wheel_for = getattr(index, "members", None), getattr(index, "wheel_for", None)
    remembered = getattr(index, "remembered", None)
    if members is None or wheel_for is None:
        return None

    def look(name: str, version: str) -> dict[str, tuple[str, ...]] | None:
        try:
            wheel = wheel_for(name, Version(version), python, glibc)
        except InvalidVersion:
            return None
        if wheel is None or all(tag.endswith("-any") for tag in wheel.tags):
            return None
        return read_needed(index, wheel)  # type: ignore[arg-type]  # PackageIndex answers MembersIndex

    def read(pin: Pin) -> dict[str, tuple[str, ...]] | None:
        if remembered is None or not pin.hashes:
            return look(pin.name, pin.version)
        key = pin_digest(pin.name, pin.version, pin.hashes, python, glibc)
        text = remembered(key, PIN_KIND, lambda: json.dumps(look(pin.name, pin.version), sort_keys=True))
        found = json.loads(text)
        return None if found is None else {k: tuple(v) for k, v in found.items()}

    return read


def _major(version: str | None) -> int | None:
    try:
        return int(version.split(".")[0]) if version else None
    except ValueError:
        return None


def check_linked(t: Target, c: Candidate, cuda: str | None, cudnn: str | None, pins: list[Pin], own: set[str],
                 catalog: Catalog, read: Reader | None) -> list[Decision]:
    """The closure's unknown compiled packages' linked CUDA libraries against the image's majors."""
    have = {"cuda": _major(cuda), "cudnn": _major(cudnn)}
    if read is None or have["cuda"] is None:
        return []
    asked = {canonicalize_name(Requirement(e).name) for e in t.extras}
    suspects = sorted((p for p in pins if p.name not in own and catalog.binaries.cuda_major(p.name, p.version) is None),
                      key=lambda p: (p.name not in asked, p.name))
    read_ok, unread, linking = [], [], []
    sources = {s for row in catalog.binaries.rows.cuda_sonames for s in row.sources}

    def attempt(p: Pin) -> dict[str, tuple[str, ...]] | str | None:
        try:
            return read(p)
        except PackageIndexError as exc:
            return f"{p.name} {p.version} ({exc})"

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(attempt, suspects[:MAX_PACKAGES]))
    for p, found in zip(suspects, answers):
        if isinstance(found, str):
            unread.append(found)
            continue
        if found is None:
            continue
        read_ok.append(p.name)
        if _judge(t, c, cuda, cudnn, p, found, pins, catalog):
            linking.append(p.name)
    if not read_ok and not unread:
        return []
    linked = sorted(set(linking))
    reason = (f"read the shared objects of {len(read_ok)} compiled package(s) the catalog has no CUDA row for: "
              + (f"{', '.join(linked)} link CUDA libraries of the image's majors" if linked else
                 "none links a CUDA library")
              + (f"; not read: {'; '.join(unread)}" if unread else "")
              + (f"; {len(suspects) - MAX_PACKAGES} more not looked up (at most {MAX_PACKAGES})"
                 if len(suspects) > MAX_PACKAGES else "")
              + (f" ({_cited(tuple(sorted(sources)))})" if sources else ""))
    return [Decision(topic=LINKED_TOPIC, choice=f"CUDA {have['cuda']}, cuDNN {have['cudnn']}", reason=reason)]


def _judge(t: Target, c: Candidate, cuda: str | None, cudnn: str | None, p: Pin, found: dict[str, tuple[str, ...]],
           pins: list[Pin], catalog: Catalog) -> bool:
    """Whether ``p``'s shared objects link a CUDA library; one of another major than the image's is refused."""
    have = {"cuda": _major(cuda), "cudnn": _major(cudnn)}
    links = False
    for member, libs in sorted(found.items()):
        for lib in libs:
            hit = catalog.binaries.soname_major(lib)
            if hit is None:
                continue
            library, theirs, row = hit
            links = True
            ours = have[library]
            if ours is None or theirs == ours:
                continue
            entry = entry_for(p.name, pins, t.extras)
            what = f"{p.name} {p.version}"
            brought = f"{what} (pip:)" if entry == p.name else (
                f"{what}, which {entry} (pip:) requires," if entry else f"{what}, which {c.framework} requires,")
            image_has = f"CUDA {cuda}" if library == "cuda" else f"cuDNN {cudnn}"
            raise BinaryMismatch(
                f"{brought} links {lib} ({member}): a {library} {theirs} library, but the image has {image_has} "
                f"({c.label}); beside it the loader finds no {lib} or a second {library} of another major is "
                f"installed and loaded on the GPU ({_cited(row.sources)}; read from the wheel's DT_NEEDED)",
                package=entry or p.name,
                hint=f"ask for a release or distribution of {p.name} built for {library} {ours}, drop it, or a "
                     f"framework build of {library} {theirs} if the fleet allows one (`envkit explain` lists the "
                     "builds that fit)")
    return links


def check_cpu_fallback(c: Candidate, cuda: str | None, pins: list[Pin], catalog: Catalog,
                       policy: str = "warn") -> list[Decision]:
    """Each CPU-only accelerator library of a GPU image's closure: a warning decision, or (``policy='refuse'``) a
    refusal naming what would give it the GPU."""
    if cuda is None:
        return []
    names = {canonicalize_name(p.name): p.version for p in pins}
    out = []
    for name, version in sorted(names.items()):
        row = catalog.binaries.cpu_only(name)
        if row is None or any(u in names for u in row.unless):
            continue
        text = (f"{name} {version} runs on the CPU only in this CUDA {cuda} image: ask for {row.gpu} to give it the "
                f"GPU ({_cited(row.sources)})")
        if policy == "refuse":
            raise BinaryMismatch(f"{text}; build.cpu_fallback is refuse", package=name,
                                 hint=f"ask for {row.gpu} in pip:, or set build.cpu_fallback: warn")
        out.append(Decision(topic=CPU_TOPIC + name, choice=f"{name} {version} on the CPU", reason=WARNING + text))
    return out
