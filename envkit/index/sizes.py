"""Each locked package's wheel size in bytes, read at resolve time.

First from what was kept for the same pin on an earlier resolve (``Memo``: the user's cache directory, by the
digest of the pin's hashes: no request, no uv run), then from uv's own answer (``known``: ``closure.locked_wheels``,
uv's PEP 751 output for the locked pins, read from the cache uv's solve has just filled: about a second for an
image), then, for what that leaves unknown, from the indexes' listings.

The lock's hashes name every file of a release that uv saw; the wheel the build installs is the one whose sha256 is
among them and whose tags fit the image's Python and glibc. Its size comes from the index's listing (PEP 700's
``size``, which PyPI gives), else from a HEAD of the file (``PackageIndex.size``). The framework's own index is asked
first, then the spec's, as the build's uv asks them. Sizes feed the install progress (bytes done / total) and the
pre-build disk check; they do not decide the image (the hashes do), so they are not in the image's content hash, and
a size the indexes do not give stays unknown (``None``) rather than failing the resolve.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Protocol

from ..errors import PackageIndexError, ResolutionError
from ..lock import LockedImage, Package
from .client import PackageIndex
from .closure import locked_wheels, pin_digest

WORKERS = 8  # listings asked at once (each is one GET per project, plus a HEAD when the listing has no size)


def wheel_size(indexes: list[PackageIndex], package: Package, python: str, glibc: str) -> int | None:
    """The bytes of the wheel of ``package`` the image installs: the first index (in order) that lists a file with
    one of its hashes, fit for ``python`` and ``glibc`` (any file with a hash, when no tag fits as ``supports``
    reads them). Of several fitting files (one release's manylinux tags), the
    largest: the estimate never understates. None when no index lists one, or none says its size."""
    hashes = {h.removeprefix("sha256:") for h in package.hashes}
    for index in indexes:
        try:
            locked = [w for w in index.wheels(package.name) if w.sha256 in hashes]
            # tags ``supports`` does not read (``py311-none-any``): the hash alone says the file is the release's
            files = [w for w in locked if w.supports(python, glibc)] or locked
            sizes = [s for s in (index.size(w) for w in files) if s is not None]
        except PackageIndexError:  # the framework's index need not carry the rest of the closure
            continue
        if sizes:
            return max(sizes)
    return None


Known = Callable[[LockedImage], Iterable[tuple[str, int | None]]]  # (sha256, size) of wheels already described


class Memo(Protocol):
    """Where sizes read before are kept (``PackageIndex.recall`` / ``remembered``: the user's cache directory)."""

    def recall(self, key: str, kind: str) -> str | None: ...
    def remembered(self, key: str, kind: str, compute: Callable[[], str]) -> str: ...


SIZE_KIND = "pin-size-v1"  # a pin's wheel size on disk, under ``closure.pin_digest``


def with_sizes(image: LockedImage, index_for: Callable[[str], PackageIndex], known: Known | None = None,
               memo: Memo | None = None) -> LockedImage:
    """``image`` with each package's wheel size: a package that has one keeps it; then ``memo``'s (the size kept for
    the same pin: name, version, hashes, Python and glibc); then ``known``'s (the wheel whose sha256 is among the
    package's hashes), asked only when the memo lacks one; then an index's listing. What is found is kept in
    ``memo``. The content hash is unchanged: sizes are not part of it."""
    keys = [pin_digest(p.name, p.version, p.hashes, image.python, image.glibc) for p in image.packages]
    kept = [p.size if p.size is not None or memo is None else _int(memo.recall(k, SIZE_KIND))
            for p, k in zip(image.packages, keys)]
    by_hash = {sha: size for sha, size in (known(image) if known is not None and None in kept else ())
               if size is not None}

    def from_known(p: Package, size: int | None) -> int | None:
        return size if size is not None else max(
            (by_hash[h] for h in (x.removeprefix("sha256:") for x in p.hashes) if h in by_hash), default=None)

    first = [from_known(p, size) for p, size in zip(image.packages, kept)]
    urls = list(dict.fromkeys(u for u in (image.index_url, image.extra_index_url) if u))
    indexes = [index_for(u) for u in urls] if None in first else []
    glibc = image.glibc
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        sizes = list(pool.map(lambda pk: pk[1] if pk[1] is not None else wheel_size(indexes, pk[0], image.python,
                                                                                     glibc),
                              zip(image.packages, first)))
    if memo is not None:
        for key, size, was in zip(keys, sizes, kept):
            if size is not None and was is None:
                memo.remembered(key, SIZE_KIND, lambda: str(size))  # noqa: B023 (called at once)
    packages = tuple(p if p.size == size else p.model_copy(update={"size": size})
                     for p, size in zip(image.packages, sizes))
    return image.model_copy(update={"packages": packages})


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def uv_known(ca_bundle: Path | None = None) -> Known:
    """``known`` from uv: the wheels uv picks for the image's pins (``closure.locked_wheels``), from uv's cache, else
    asked of the indexes once; nothing when uv cannot say (the listings then answer, package by package)."""
    def known(image: LockedImage) -> list[tuple[str, int | None]]:
        pins = [(p.name, p.version) for p in image.packages]
        for offline in (True, False):
            try:
                wheels = locked_wheels(pins, python=image.python, glibc=image.glibc, index_url=image.index_url,
                                       extra_index_url=image.extra_index_url, ca_bundle=ca_bundle, offline=offline)
            except (ResolutionError, OSError):
                continue
            return [(w.sha256, w.size) for w in wheels]
        return []
    return known
