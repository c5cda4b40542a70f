"""Each framework's releases as its catalog file lists them: the one place that knows the three files' shapes
(PyTorch and TensorFlow: a row per series with its patches; JAX: each version its own row). ``lists_release``
(exclusions say whether the release they exclude is also listed) and the companions' refresh ask here."""

from __future__ import annotations

from typing import Callable

from packaging.version import Version

from .models import Catalog

Rows = Callable[[Catalog], dict[str, tuple[str, ...]]]
# a row per envkit.frameworks.FRAMEWORKS entry (tests/unit/test_frameworks.py holds them in step)
ROWS: dict[str, Rows] = {
    "torch": lambda catalog: {r.version: tuple(r.patches) for r in catalog.torch_releases()},
    "jax": lambda catalog: {v: (v,) for v in catalog.jax.versions},
    "tensorflow": lambda catalog: {r.version: tuple(r.patches) for r in catalog.tensorflow.releases},
}


def release_rows(catalog: Catalog, framework: str) -> dict[str, tuple[str, ...]]:
    """``framework``'s rows in its catalog file, in file order: the row's version as the file writes it ('2.10',
    '0.9.0.1') -> the patches it lists."""
    return ROWS[framework](catalog)


def lists_release(catalog: Catalog, framework: str, version: str) -> bool:
    """Whether the catalog also has ``version`` as a release (a patch of a row, or a JAX version)."""
    return any(Version(p) == Version(version) for patches in release_rows(catalog, framework).values() for p in patches)
