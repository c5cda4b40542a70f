"""`envkit catalog refresh`: propose catalog rows for new PyTorch, JAX and TensorFlow releases.

The package index tells what was published and, in each wheel's METADATA, what it pins:
torch's Linux wheel pins the CUDA runtime, cuDNN and NCCL it bundles; jax's ``cudaNN``
extras name the ``jax-cudaNN-plugin`` whose ``with-cuda`` extra gives the nvidia-* ranges;
tensorflow's ``and-cuda`` extra pins (or bounds) the nvidia-* wheels. Wheel tags give the
Python range. What the metadata does not tell (a compiled arch list, a minimum compute
capability, the CUDA toolkit a plugin was built with) is carried forward from the catalog
and said so in the proposal, to be reviewed.

One module per framework (``torch``, ``jax``, ``tensorflow``) reads the index and edits its
own file's text in place; ``companions`` then proposes the companions.yaml rows of what they
added (and of companion releases no row pairs yet); ``common`` holds the result, its diff and
the checked, atomic write. ``run.refresh_catalog`` runs the frameworks asked for and returns a ``CatalogRefresh`` whose
``apply`` validates every proposed file together before writing any.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ...errors import CatalogError
from ...frameworks import FRAMEWORKS
from ..files import data_dir as default_data_dir
from ..models import Catalog
from . import companions as companions_refresh
from . import jax as jax_refresh
from . import tensorflow as tf_refresh
from .common import ReadingIndex, RefreshResult, apply_texts, refresh_summary
from .torch import refresh


@dataclass(frozen=True)
class CatalogRefresh:
    """The refresh of several frameworks' files, one ``RefreshResult`` each (in FRAMEWORKS order), and
    of companions.yaml (``companions``: its rows for those frameworks)."""

    data_dir: Path
    results: tuple[RefreshResult, ...]
    companions: RefreshResult | None = None

    @property
    def files(self) -> tuple[RefreshResult, ...]:
        """Every file's result: the frameworks', then companions.yaml's."""
        return self.results + ((self.companions,) if self.companions is not None else ())

    @property
    def changed(self) -> bool:
        return any(r.changed for r in self.files)

    def result(self, framework: str) -> RefreshResult | None:
        return next((r for r in self.results if r.framework == framework), None)

    def diff(self) -> str:
        """One unified diff of every file that changes ('' when none does)."""
        return "".join(r.diff() for r in self.files)

    def apply(self, data_dir: str | Path | None = None) -> list[Path]:
        """Write every changed file into ``data_dir`` (default: where they were read).

        Refuses, writing nothing, when any file changed since it was read or when the
        catalog with all proposals would not load; each file is then replaced atomically.
        """
        return apply_texts(Path(data_dir) if data_dir is not None else self.data_dir, self.files)

    def summary(self) -> dict:
        """JSON-ready: what was proposed per framework, plus the whole diff."""
        per = {r.framework: refresh_summary(r) for r in self.results}
        comp = refresh_summary(self.companions) if self.companions is not None else None
        every = {**per, **({"companions": comp} if comp else {})}
        return {
            "changed": self.changed,
            "frameworks": per,
            "companions": comp,  # companions.yaml: its new or changed rows ("entries"), notes and warnings
            "files": [s["file"] for s in every.values() if s["changed"]],
            "notes": [f"{fw}: {n}" for fw, s in every.items() for n in s["notes"]],
            "warnings": [f"{fw}: {w}" for fw, s in every.items() for w in s["warnings"]],
            "skipped": [dict(s, framework=fw) for fw, per_fw in per.items() for s in per_fw["skipped"]],
            "diff": self.diff(),
        }


def parse_frameworks(names: Iterable[str] | None) -> tuple[str, ...]:
    """('torch', 'jax') from ['jax', 'torch'] (FRAMEWORKS order); all when ``names`` is empty."""
    chosen = set(names or FRAMEWORKS)
    unknown = sorted(chosen - set(FRAMEWORKS))
    if unknown:
        raise CatalogError(f"no refresh for framework(s) {', '.join(unknown)}",
                           hint=f"choose from {', '.join(FRAMEWORKS)}")
    return tuple(f for f in FRAMEWORKS if f in chosen)


def refresh_catalog(catalog: Catalog, index: ReadingIndex, *, today: str, frameworks: Iterable[str]=FRAMEWORKS,
                    data_dir: str | Path | None = None, python: str = "3.12", glibc: str = "2.36") -> CatalogRefresh:
    """Refresh each framework in ``frameworks`` against ``index``, then the companions of what they
    propose (companions.yaml); reads only."""
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    run = {"torch": refresh, "jax": jax_refresh.refresh, "tensorflow": tf_refresh.refresh}
    chosen = parse_frameworks(frameworks)
    results = tuple(run[fw](catalog, index, today=today, data_dir=directory, python=python, glibc=glibc)
                    for fw in chosen)
    companions = companions_refresh.refresh(catalog, index, today=today, data_dir=directory, frameworks=chosen,
                                            results={r.framework: r for r in results}, python=python, glibc=glibc)
    return CatalogRefresh(data_dir=directory, results=results, companions=companions)

