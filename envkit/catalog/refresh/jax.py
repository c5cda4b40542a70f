"""JAX: propose ``jax.yaml`` changes for new jax releases from the package index.

jax.yaml holds one entry, not a row per release: ``versions`` (newest first), ``python_min``
since-rows, one ``python_max``, and per ``cudaNN`` extra its ``since``, ``min_cc``,
``built_with`` since-rows and cuDNN/NCCL ranges. For each new jax version the refresh reads
jax's METADATA (each ``cudaNN`` extra pins jaxlib and ``jax-cudaNN-plugin[with-cuda]``),
each plugin's Linux wheel METADATA (the ``with-cuda`` nvidia-* requirements and the pinned
``jax-cudaNN-pjrt``) and the plugin wheels' tags (the Python range). It proposes the
version in ``versions``; a ``python_min`` row when the oldest CPython rises; a
``built_with`` row when a plugin's CUDA runtime floor rises above the catalog's; a new
extra when a new CUDA major appears, its ``min_cc`` carried forward from the newest extra.
Every change carries a YAML comment naming the metadata URLs and what was carried forward
(to be reviewed). What one entry cannot say per version (cuDNN/NCCL ranges, ``python_max``)
is a warning; a version whose metadata lacks a field the catalog needs is not added.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from ...errors import CatalogError
from ...frameworks import JAX
from ...index.wheel_facts import library_of
from ..files import data_dir as default_data_dir
from ..models import Catalog, Jax, vtuple
from .common import (
    ReadingIndex,
    RefreshResult,
    check_parses_back,
    check_source,
    check_today,
    exact_version,
    extras_of,
    floor_version,
    for_extra,
    major_minor,
    metadata_source,
    not_loaded_from,
    pick_wheel,
    published,
    py_text,
    python_tags,
    read_file,
    skip_excluded,
    spec_text,
)
from .jax_text import FILENAME, edit_text

if TYPE_CHECKING:
    from packaging.requirements import Requirement

PROJECT = "jax"
_CUDA_EXTRA = re.compile(r"^cuda(?P<major>\d+)$")


@dataclass(frozen=True)
class PluginRead:
    """What the index said about one extra's ``jax-cudaNN-plugin`` at a jax version."""

    extra: str
    plugin: str
    version: str
    pjrt: str | None  # the jax-cudaNN-pjrt version the plugin pins
    wheel: str
    source: str
    cuda: str  # nvidia-cuda-runtime: the exact pin or the lower bound
    cudnn: str  # nvidia-cudnn-cuNN range, lower bounds first
    nccl: str
    python_min: str
    python_max: str

    def to_json(self) -> dict:
        return {"extra": self.extra, "plugin": self.plugin, "version": self.version, "pjrt": self.pjrt,
                "wheel": self.wheel, "source": self.source, "cuda_runtime": self.cuda, "cudnn": self.cudnn,
                "nccl": self.nccl, "python_range": {"min": self.python_min, "max": self.python_max}}


@dataclass(frozen=True)
class JaxRead:
    version: str
    wheel: str
    source: str
    jaxlib: str | None
    extras: tuple[PluginRead, ...]

    @property
    def python_min(self) -> str:
        return max((p.python_min for p in self.extras), key=vtuple)

    @property
    def python_max(self) -> str:
        return min((p.python_max for p in self.extras), key=vtuple)

    def to_json(self) -> dict:
        return {"version": self.version, "wheel": self.wheel, "source": self.source, "jaxlib": self.jaxlib,
                "python_range": {"min": self.python_min, "max": self.python_max},
                "extras": [p.to_json() for p in self.extras]}


# --- reading the index ---------------------------------------------------------------------
def _read(index: ReadingIndex, version: Version, python: str, glibc: str) -> JaxRead | str:
    """What the index says about jax ``version``, or why it cannot give what the catalog needs."""
    wheel = index.wheel_for(PROJECT, version, python, glibc)
    if wheel is None:
        return f"{version}: no jax wheel for Linux x86_64 on the index; not added"
    source = metadata_source(wheel)
    requires = index.requires(wheel)
    extras = sorted({e for r in requires for e in extras_of(r) if _CUDA_EXTRA.match(e)},
                    key=lambda e: -_extra_major(e))
    if not extras:
        return f"{version}: jax's METADATA ({source}) names no cudaNN extra; not added"
    plugins, jaxlib = [], None
    for extra in extras:
        major = str(_extra_major(extra))
        wanted = for_extra(requires, extra, python)
        plugin = f"jax-cuda{major}-plugin"
        req = wanted.get(plugin)
        if req is None or "with-cuda" not in {canonicalize_name(e) for e in req.extras}:
            return (f"{version}: jax's METADATA ({source}) has no {plugin}[with-cuda] requirement in its {extra} "
                    "extra; not added")
        pinned = exact_version(req) or _newest_in(index, plugin, req)
        if pinned is None:
            return f"{version}: no {plugin} on the index satisfies jax's {req} ({source}); not added"
        jaxlib = jaxlib or (exact_version(wanted["jaxlib"]) if "jaxlib" in wanted else None)
        read = _read_plugin(index, extra, plugin, Version(pinned), python, glibc)
        if isinstance(read, str):
            return f"{version}: {read}; not added"
        plugins.append(read)
    return JaxRead(version=str(version), wheel=wheel.filename, source=source, jaxlib=jaxlib, extras=tuple(plugins))


def _newest_in(index: ReadingIndex, project: str, req: Requirement) -> str | None:
    """A jax-only release takes a range of plugins (e.g. >=0.4.36,<=0.4.37): pip installs the newest there."""
    fits = [v for v in published(index, project) if req.specifier.contains(v)]
    return str(fits[-1]) if fits else None


def _read_plugin(index: ReadingIndex, extra: str, plugin: str, version: Version, python: str,
                 glibc: str) -> PluginRead | str:
    wheels = index.wheels(plugin)
    pys = python_tags(wheels, version)
    wheel, py = pick_wheel(index, plugin, version, pys, python, glibc) if pys else (None, None)
    if wheel is None or py is None:
        return f"no Linux x86_64 CPython wheel of {plugin} {version} on the index"
    source = metadata_source(wheel)
    requires = index.requires(wheel)
    pjrt_name = plugin.replace("-plugin", "-pjrt")
    pjrt = next(
        (exact_version(r) for r in requires if canonicalize_name(r.name) == pjrt_name and r.marker is None), None
    )
    found: dict[str, str] = {}
    for name, r in for_extra(requires, "with-cuda", py).items():
        library = library_of(name)
        if library == "cuda":
            found["cuda"] = floor_version(r) or ""
        elif library == "cudnn":
            found["cudnn"] = spec_text(r.specifier)
        elif library == "nccl":
            found["nccl"] = spec_text(r.specifier)
    missing = [k for k in ("cuda", "cudnn", "nccl") if not found.get(k)]
    if missing:
        names = {"cuda": "nvidia-cuda-runtime version", "cudnn": "nvidia-cudnn range", "nccl": "nvidia-nccl range"}
        return (f"{plugin} {version}'s METADATA ({source}) gives no {', '.join(names[m] for m in missing)} "
                "in its with-cuda extra")
    major = str(_extra_major(extra))
    if str(vtuple(found["cuda"])[0]) != major:
        return f"{plugin} {version} ({source}) requires CUDA runtime {found['cuda']}, not CUDA {major}"
    return PluginRead(extra=extra, plugin=plugin, version=str(version), pjrt=pjrt, wheel=wheel.filename, source=source,
                      cuda=found["cuda"], cudnn=found["cudnn"], nccl=found["nccl"],
                      python_min=py_text(pys[0]), python_max=py_text(pys[-1]))


# --- the refresh ---------------------------------------------------------------------------
def refresh(catalog: Catalog, index: ReadingIndex, *, today: str, data_dir: str | Path | None = None,
            python: str = "3.12", glibc: str = "2.36") -> RefreshResult:
    """Compare the catalog's JAX entry with the jax releases on ``index``; reads only."""
    check_today(today)
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    text, raw = read_file(directory, FILENAME)
    entry = raw.get("jax") if isinstance(raw, dict) else None
    if not isinstance(entry, dict) or tuple(str(v) for v in entry.get("versions") or ()) != catalog.jax.versions:
        raise not_loaded_from(directory)
    check_source(catalog)
    state = copy.deepcopy(entry)
    known = {Version(v) for v in catalog.jax.versions}
    oldest = min(known)
    notes: list[str] = []
    warnings: list[str] = []
    reads: list[JaxRead] = []
    comments: list[str] = []
    added: list[str] = []
    tails: dict[tuple[str, str], str] = {}  # (block, key) -> trailing comment for an edited line

    versions = published(index, PROJECT)
    older = sum(1 for v in versions if v < oldest)
    if older:
        notes.append(f"ignored {older} jax version(s) older than the catalog's oldest ({oldest})")
    skipped: list[dict] = []
    for v in (v for v in versions if v >= oldest and v not in known):
        if skip_excluded(catalog, "jax", v, skipped):
            continue
        read = _read(index, v, python, glibc)
        if isinstance(read, str):
            warnings.append(read)
            continue
        reads.append(read)
        problem = _propose(state, read, catalog, notes, warnings, tails)
        if problem:
            warnings.append(problem)
            continue
        added.append(read.version)
        comments.extend(_comment(read, state, today))

    if not added:
        return RefreshResult(framework="jax", data_dir=directory, current_text=text, proposed_text=text,
                             notes=tuple(notes), warnings=tuple(warnings), reads=tuple(reads), skipped=tuple(skipped))
    try:
        Jax.model_validate(state)
    except Exception as exc:  # pydantic.ValidationError; a bug here, not bad input
        raise CatalogError(f"refresh built an invalid jax entry: {exc}") from None
    proposed = edit_text(text, entry, state, comments, tails)
    check_parses_back(FILENAME, proposed, {**raw, "jax": state})
    return RefreshResult(framework="jax", data_dir=directory, current_text=text, proposed_text=proposed,
                         entries=(copy.deepcopy(state),), added_patches=tuple(sorted(added, key=Version)),
                         notes=tuple(notes), warnings=tuple(warnings), reads=tuple(reads), skipped=tuple(skipped))


def _propose(state: dict, read: JaxRead, catalog: Catalog, notes: list[str], warnings: list[str],
             tails: dict) -> str | None:
    """Fold one version into ``state`` (the jax entry, edited), or say why it is not added."""
    v = Version(read.version)
    current = Jax.model_validate(state)
    at_end = v > max(Version(x) for x in current.versions)
    new_extras = [p for p in read.extras if p.extra not in {e.extra for e in current.extras}]
    refusal = _refusal(read, current, at_end, new_extras)
    if refusal is not None:
        return refusal
    have = current.python_range(read.version).min
    changes = []
    if read.python_min != have:
        state["python_min"].append({"since": read.version, "python": read.python_min})
        tails[("python_min", read.version)] = f"{read.version}: cp tags of {', '.join(p.wheel for p in read.extras)}"
        changes.append(f"python_min {read.python_min} from {read.version}")
    if read.python_max != current.python_max:
        warnings.append(f"{v}: its plugin wheels go up to Python {read.python_max}; the catalog's python_max "
                        f"({current.python_max}) is one value for every version - review by hand")
    for p in read.extras:
        row = next((e for e in state["extras"] if e["extra"] == p.extra), None)
        if row is not None:
            _fold_extra(p, row, current, read, at_end=at_end, warnings=warnings, tails=tails, changes=changes)
    for p in new_extras:
        _add_extra(p, state, current, read, warnings=warnings, tails=tails, changes=changes)
    state["versions"] = sorted({*state["versions"], read.version}, key=Version, reverse=True)
    notes.append(f"{v}: added from {read.source}" + (f"; {'; '.join(changes)}" if changes else "")
                 + "; " + _carried_text(Jax.model_validate(state), read))
    return None


def _refusal(read: JaxRead, current: Jax, at_end: bool, new_extras: list[PluginRead]) -> str | None:
    """Why a version cannot be folded in without review (an extra ended, a new extra in the past, another Python
    floor), else None."""
    v = Version(read.version)
    found = {p.extra: p for p in read.extras}
    for extra in current.extras:
        if Version(extra.since) <= v and extra.extra not in found:
            return (f"{v}: jax's METADATA ({read.source}) has no {extra.extra} extra, but the catalog's "
                    f"{extra.extra} extra has no end; not added - review by hand")
    if new_extras and not at_end:
        return (
            f"{v}: new extra(s) {', '.join(p.extra for p in new_extras)} in a version older than the newest; not added"
        )
    have = current.python_range(read.version).min
    if read.python_min != have and not (at_end and vtuple(read.python_min) > vtuple(have)):
        return (f"{v}: its plugin wheels start at Python {read.python_min}, the catalog's python_min rows give "
                f"{have} there; not added - review by hand")
    return None


def _fold_extra(p: PluginRead, row: dict, current: Jax, read: JaxRead, *, at_end: bool, warnings: list[str],
                tails: dict, changes: list[str]) -> None:
    """Compare one extra's plugin with its catalog row (``row``, edited): ranges warned about, a newer CUDA floor
    at the end added to built_with."""
    v = Version(read.version)
    extra = next(e for e in current.extras if e.extra == p.extra)
    if Version(extra.since) > v:
        warnings.append(f"{v}: jax's METADATA names {p.extra}, which the catalog has only since {extra.since} "
                        "- review by hand")
        return
    for key in ("cudnn", "nccl"):
        if SpecifierSet(getattr(p, key)) != SpecifierSet(str(row[key])):
            warnings.append(f"{v}: {p.plugin} requires {key} {getattr(p, key)}; the catalog's {p.extra} says "
                            f"{row[key]} (one range for every version - review by hand)")
    built = extra.cuda_for(read.version)
    floor = major_minor(p.cuda)
    if vtuple(floor) > vtuple(built) and not at_end:
        warnings.append(f"{v}: {p.plugin} needs CUDA runtime >= {p.cuda}; the catalog's {p.extra} says it was "
                        f"built with {built} there - review by hand")
    elif vtuple(floor) > vtuple(built):
        row["built_with"].append({"since": read.version, "cuda": floor})
        tails[(p.extra, "built_with")] = (f"{read.version}: nvidia-cuda-runtime>={p.cuda} in {p.source} "
                                          "(a floor: the toolkit it was built with may be newer - review)")
        changes.append(f"{p.extra} built_with CUDA {floor} from {read.version}")


def _add_extra(p: PluginRead, state: dict, current: Jax, read: JaxRead, *, warnings: list[str], tails: dict,
               changes: list[str]) -> None:
    """A new extra's row, its min_cc carried forward from the newest extra (for review)."""
    newest = max(current.extras, key=lambda e: _extra_major(e.extra))
    state["extras"].insert(0, {"extra": p.extra, "since": read.version, "min_cc": newest.min_cc,
                               "built_with": [{"since": read.version, "cuda": major_minor(p.cuda)}],
                               "cudnn": p.cudnn, "nccl": p.nccl})
    tails[(p.extra, "new")] = newest.extra
    changes.append(f"new extra {p.extra} (min_cc {newest.min_cc} carried forward from {newest.extra} - review)")
    if p.extra not in JAX.extras:
        warnings.append(f"{Version(read.version)}: team.yaml cannot ask for jax[{p.extra}] yet (the extras of "
                        "envkit.frameworks.JAX); a spec without an extra gets the newest one")


def _extra_major(extra: str) -> int:
    m = _CUDA_EXTRA.match(extra)
    if m is None:
        raise CatalogError(f"jax extra {extra!r} is not cudaNN")
    return int(m["major"])


def _carried_text(jax: Jax, read: JaxRead) -> str:
    min_cc = ", ".join(f"{e.extra} {e.min_cc}" for e in jax.extras if Version(e.since) <= Version(read.version))
    built = ", ".join(f"{e.extra} {e.cuda_for(read.version)}" for e in jax.extras
                      if Version(e.since) <= Version(read.version))
    return (f"carried forward, not in wheel metadata - review: min_cc ({min_cc}), "
            f"CUDA toolkit built_with ({built})")


def _comment(read: JaxRead, state: dict, today: str) -> list[str]:
    lines = [f"  # {read.version}: refreshed from the package index {today}, jax's METADATA {read.source}"]
    for p in read.extras:
        lines.append(f"  #   {p.extra}: {p.plugin} {p.version} (pjrt {p.pjrt}) {p.source}: nvidia-cuda-runtime "
                     f"{p.cuda}, cudnn {p.cudnn}, nccl {p.nccl}; Python {p.python_min}-{p.python_max} from its tags")
    lines.append(f"  #   {_carried_text(Jax.model_validate(state), read)}")
    return [line + "\n" for line in lines]


__all__ = ["JaxRead", "PluginRead", "refresh"]
