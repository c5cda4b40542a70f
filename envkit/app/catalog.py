"""``envkit catalog refresh`` and ``check-arches``: the catalog against the package index (a reviewable diff,
written when asked)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..catalog.files import load_catalog
from ..catalog.refresh.arches import ARCH_FRAMEWORKS, check_arches
from ..catalog.refresh.run import parse_frameworks
from ..catalog.refresh.run import refresh_catalog as refresh
from ..index.client import PackageIndex

if TYPE_CHECKING:
    from typing import Iterable

    from ..support.progress import Progress


def refresh_catalog(*, apply: bool, frameworks: Iterable[str]=(), progress: Progress=lambda _: None) -> dict:
    """Propose catalog rows for new releases of ``frameworks`` (default: all); write them when ``apply``."""
    from datetime import date


    chosen = parse_frameworks(frameworks)
    progress(f"reading {', '.join(chosen)} releases from the package index")
    result = refresh(load_catalog(), PackageIndex(), today=date.today().isoformat(), frameworks=chosen)
    if apply and result.changed:
        for path in result.apply():
            progress(f"wrote {path}")
    return {**result.summary(), "applied": bool(apply and result.changed)}  # "files": what changes, or would


def check_catalog_arches(*, apply: bool, frameworks: Iterable[str]=(), progress: Progress=lambda _: None) -> dict:
    """Compare the catalog's compiled arch lists with the index's wheels; write the corrections when ``apply``."""
    from datetime import date


    chosen = tuple(f for f in ARCH_FRAMEWORKS if not frameworks or f in frameworks)
    progress(f"reading the compiled arch lists of {', '.join(chosen)} wheels from the package index")
    index = PackageIndex()
    result = check_arches(load_catalog(), index, today=date.today().isoformat(), frameworks=chosen)
    if apply and result.changed:
        for path in result.apply():
            progress(f"wrote {path}")
    return {**result.summary(), "bytes_fetched": index.bytes_fetched, "applied": bool(apply and result.changed)}
