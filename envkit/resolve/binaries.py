"""The catalog's facts about built binaries (``catalog/binaries.py``, ``binaries.yaml``) applied to an image.

Package metadata does not say which NumPy a framework's binaries were built against, nor, for most GPU packages,
which CUDA major they link; uv (like every resolver) locks what the metadata admits, and the image then fails on the
GPU node. Here:

- as constraints: ``caps`` adds the NumPy a framework release needs (torch < 2.3: ``numpy<2``) and the releases of
  a distribution built for the build's CUDA major (onnxruntime-gpu) to every solve of that build, and
  ``viable_beside`` drops the builds a ``pip:`` entry cannot sit beside (``numpy==2.*`` beside torch 2.2), refusing
  the image naming both when none is left;
- as checks on the finished closure (``check_closure``): a distribution built for another CUDA major than the
  image's (``cupy-cuda11x``, ``nvidia-cudnn-cu11`` beside a CUDA 12 torch) is refused at the ``pip:`` entry that
  brought it, naming the one that fits; the NumPy the closure holds is checked against the framework's row.

Each decision names the catalog file and its sources, which ``envkit explain`` shows.
"""

from __future__ import annotations

from dataclasses import replace

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..catalog.binaries import FILE
from ..catalog.models import Catalog
from ..errors import PackageIndexError
from ..index.closure import REQUESTED, Pin
from ..lock import HELD_BACK, PIP_TOPIC, Decision, LockedImage
from .candidates import Candidate
from .joint import ExtraReport, Index, PackageRefusal, Target, admits

NUMPY = "numpy"
ABI_TOPIC = "abi "  # a decision: a catalog binary fact that bound a package of the closure ("abi numpy")
CUDA_MAJOR_TOPIC = "cuda_major"  # a decision: the CUDA major every package that names one targets
LINKED_TOPIC = "linked"  # a decision (resolve/linked.py): the CUDA libraries unknown compiled packages link
CPU_TOPIC = "cpu_fallback "  # a decision (resolve/linked.py): a library running on the CPU only ("cpu_fallback jax")


class BinaryMismatch(PackageRefusal):
    """A package the image would hold cannot work beside the rest: a binary fact the catalog knows says so."""


def _cited(sources: tuple[str, ...]) -> str:
    return f"catalog {FILE}; sources: {', '.join(sources)}"


def caps(catalog: Catalog, c: Candidate) -> dict[str, str]:
    """Constraints on ``c``'s solves from the binary facts, each with why: the NumPy its binaries need (``numpy<2``
    beside torch < 2.3), and for each distribution whose CUDA major goes by its release (onnxruntime-gpu) the
    releases built for ``c``'s CUDA major. A constraint names a package; it binds only when the closure holds it."""
    out = {}
    row = catalog.binaries.numpy_for(c.framework, c.version)
    if row is not None:
        out[f"{NUMPY}{row.numpy}"] = (f"{c.framework} {c.version} runs on {NUMPY}{row.numpy} only: "
                                      f"{row.note or 'its binaries were built against another NumPy ABI'} "
                                      f"({_cited(row.sources)})")
    major = int(c.cuda.split(".")[0]) if c.cuda else None
    for rel in catalog.binaries.rows.cuda_releases:
        if rel.major == major:
            out[f"{rel.name}{rel.versions}"] = (f"the {rel.name} releases built for CUDA {major} ({c.label}'s CUDA "
                                                f"major) are {rel.versions} ({_cited(rel.sources)})")
    return out


def explain_held(reports: list[ExtraReport], why: dict[str, str]) -> list[ExtraReport]:
    """A pip: package held back by one of ``caps``' constraints says the catalog's reason, not uv's."""
    by_name: dict[str, str] = {canonicalize_name(Requirement(req).name): reason for req, reason in why.items()}
    out = []
    for r in reports:
        reason = by_name.get(r.name)
        if not r.held_back or reason is None:
            out.append(r)
            continue
        text = HELD_BACK + f"{r.newest} is the newest release its entry admits; held by the catalog: {reason}"
        out.append(replace(r, decision=r.decision.model_copy(update={"reason": text})))
    return out


def _refusal(entry: str, c: Candidate, cap: str, why: str) -> BinaryMismatch:
    name = canonicalize_name(Requirement(cap).name)
    effect = ("; beside it the import fails with 'A module that was compiled using NumPy 1.x cannot be run in NumPy 2'"
              if name == NUMPY else "")
    return BinaryMismatch(
        f"{entry!r} (pip:) cannot be installed beside {c.label}: {why}{effect}",
        package=name,
        hint=f"ask for {cap} in pip: (or drop the version from the {name} entry and let the resolver pick one), or "
             f"a {c.framework} build the fact does not hold back, if the fleet allows one (`envkit explain` lists "
             "the builds that fit)")


def viable_beside(t: Target, viable: list[Candidate], catalog: Catalog, index: Index) -> list[Candidate]:
    """The builds whose binary constraints (``caps``: numpy<2 beside torch < 2.3, onnxruntime-gpu of the build's CUDA
    major) admit a release the image's pip: entries ask for; none left: refused naming the entry, the build, the
    fact and its sources."""
    entries: dict[str, list[str]] = {}
    for e in t.extras:
        entries.setdefault(canonicalize_name(Requirement(e).name), []).append(e)
    released: dict[str, list[Version]] = {}

    def conflict(c: Candidate) -> tuple[str, str, str] | None:
        for cap, why in caps(catalog, c).items():
            name = canonicalize_name(Requirement(cap).name)
            if name not in entries:
                continue
            asked = SpecifierSet()
            for e in entries[name]:
                asked &= Requirement(e).specifier
            try:
                versions = released.setdefault(name, index.versions(name))
            except (PackageIndexError, InvalidVersion):
                continue  # the solve decides, with the constraint
            if not any(admits(asked & Requirement(cap).specifier, v) for v in versions):
                return entries[name][0], cap, why
        return None

    if not entries or not viable:
        return viable
    conflicts = [conflict(c) for c in viable]
    kept = [c for c, bad in zip(viable, conflicts) if bad is None]
    if kept:
        return kept
    entry, cap, why = conflicts[0] or ("", "", "")
    raise _refusal(entry, viable[0], cap, why)


def entry_for(name: str, pins: list[Pin], extras: tuple[str, ...]) -> str | None:
    """The canonical name of the ``pip:`` entry that brought ``name`` into the closure (itself, or the first entry
    found walking up uv's ``via`` annotations); None when only the framework needs it."""
    asked = {canonicalize_name(Requirement(e).name) for e in extras}
    parents = {p.name: p.via for p in pins}
    seen, todo = set(), [name]
    while todo:
        n = todo.pop(0)
        if n in asked:
            return n
        seen.add(n)
        todo += [v for v in parents.get(n, ()) if v != REQUESTED and v not in seen]
    return None


def check_closure(t: Target, c: Candidate, cuda: str | None, pins: list[Pin], catalog: Catalog) -> list[Decision]:
    """The finished closure against the catalog's binary facts: the decisions to record, or a refusal."""
    decisions = []
    by = {p.name: p.version for p in pins}
    for req, why in caps(catalog, c).items():  # the constraints that bound a package the closure holds
        name = canonicalize_name(Requirement(req).name)
        if name in by and not Requirement(req).specifier.contains(Version(by[name]), prereleases=True):
            raise _refusal(f"{name}=={by[name]}", c, req, why)  # a guard: every solve had the constraint
        if name in by:
            decisions.append(Decision(topic=ABI_TOPIC + name, choice=f"{name} {by[name]}",
                                      reason=f"constrained to {req}: {why}"))
    if cuda is None:
        return decisions
    major = int(cuda.split(".")[0])
    known = [(p, hit) for p in pins if (hit := catalog.binaries.cuda_major(p.name, p.version)) is not None]
    for p, (theirs, cuda_row) in known:
        if theirs == major:
            continue
        fit = catalog.binaries.fits(p.name, cuda_row, major)
        entry = entry_for(p.name, pins, t.extras)
        what = f"{p.name} {p.version}"
        brought = f"{what} (pip:)" if entry == p.name else (f"{what}, which {entry} (pip:) requires," if entry
                                                            else f"{what}, which {c.framework} requires,")
        raise BinaryMismatch(
            f"{brought} is built for CUDA {theirs}, but the image's CUDA is {cuda} ({c.label}): a second "
            f"CUDA library of another major finds no libraries of its own, or loads the wrong ones, on the GPU "
            f"({_cited(cuda_row.sources)})",
            package=entry or p.name,
            hint=(f"ask for {fit} instead, the distribution built for CUDA {major}" if fit else
                  f"drop {p.name}, or ask for a framework build of CUDA {theirs} "
                  f"(the image's cuda: \">={theirs},<{theirs + 1}\")")
                 + (f"; or pin {entry} to a release that requires it" if entry and entry != p.name else ""))
    if known:
        names = sorted({p.name for p, _ in known})
        sources = sorted({s for _, (_, r) in known for s in r.sources})
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        decisions.append(Decision(topic=CUDA_MAJOR_TOPIC, choice=f"CUDA {major}",
                                  reason=f"every package whose CUDA major the catalog knows targets CUDA {major}, "
                                         f"as the image: {shown} ({_cited(tuple(sources))})"))
    return decisions


def explained(image: LockedImage) -> list[Decision]:
    """The decisions ``explain`` shows of a locked image beside the plan's: the framework's, each pip: package's,
    and the catalog's binary facts that bound the closure."""
    return [d for d in image.decisions if d.topic in (image.framework, CUDA_MAJOR_TOPIC, LINKED_TOPIC)
            or d.topic.startswith((PIP_TOPIC, ABI_TOPIC, CPU_TOPIC))]
