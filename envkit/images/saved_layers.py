"""Layer tars of an image, as the engine saves it (`docker save`, streamed): only the layers asked for are kept.

A saved archive names its layers in ``manifest.json``, which comes after them in the stream (and Docker 20.10 names
each layer's directory by an id of its own, not its diff_id), so each layer member is copied to a file while it is
hashed, and kept only when its sha256, which is its diff_id (the archive's layers are the uncompressed tars), is one
asked for; the rest go at once. The image is never written whole: at most the kept layers and the one passing.
Podman's save names each layer ``<diff_id hex>.tar`` (its directories' ``layer.tar`` link there): taken by name.
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..errors import EngineError

if TYPE_CHECKING:
    from ..engine.protocol import Engine

CHUNK = 1 << 20
BLOBS = "blobs/sha256/"  # an OCI layout's blobs (a containerd image store's `docker save`), named by their digest
_PODMAN_LAYER = re.compile(r"^[0-9a-f]{64}\.tar$")  # Podman's save (its Docker-compatible API): <diff_id hex>.tar


class _Chunks(io.RawIOBase):
    """A read-only stream over an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes]):
        self.chunks, self.left = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self.left:
            self.left = next(self.chunks, b"")
            if not self.left:
                return 0
        n = min(len(buffer), len(self.left))
        buffer[:n], self.left = self.left[:n], self.left[n:]
        return n


def _is_layer(info: tarfile.TarInfo, wanted: set[str]) -> bool:
    if not info.isreg():  # (Podman's ``<id>/layer.tar`` are links to its ``<diff_id>.tar``)
        return False
    if info.name.startswith(BLOBS):
        return "sha256:" + info.name[len(BLOBS):] in wanted
    if _PODMAN_LAYER.match(info.name):  # Podman names each layer by its diff_id
        return "sha256:" + info.name[:-4] in wanted
    return info.name.endswith("/layer.tar")


def save_layers(engine: Engine, ref: str, wanted: set[str], into: Path) -> dict[str, Path]:
    """The layers of ``ref`` whose diff_id is in ``wanted``, each as a file under ``into`` (by diff_id); the save's
    stream is read only until all are found. A layer not found is an ``EngineError``."""
    found: dict[str, Path] = {}
    chunks = iter(engine.save_stream(ref))
    try:
        with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks), CHUNK), mode="r|") as tar:
            for info in tar:
                if _is_layer(info, wanted):
                    _keep(tar, info, into / f"layer-{len(found)}.tar", wanted, found)
                if found.keys() >= wanted:
                    break
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()  # the rest of the save is not read: the engine stops writing it
    missing = sorted(wanted - found.keys())
    if missing:
        raise EngineError(f"the engine's save of {ref} holds no layer {missing[0]}",
                          hint="check `docker inspect --format '{{.RootFS.Layers}}' IMAGE`; an engine that saves "
                               "layers compressed cannot be compared here")
    return found


def _keep(tar: tarfile.TarFile, info: tarfile.TarInfo, path: Path, wanted: set[str], found: dict[str, Path]) -> None:
    """Copy the layer ``info`` to ``path``: kept (in ``found``) when it is one ``wanted``, else removed at once."""
    digest = _copy(tar, info, path)
    if digest in wanted and digest not in found:
        found[digest] = path
    else:
        path.unlink()


def _copy(tar: tarfile.TarFile, info: tarfile.TarInfo, path: Path) -> str:
    """Copy the member ``info`` to ``path``; its sha256."""
    sha = hashlib.sha256()
    src = tar.extractfile(info)
    assert src is not None  # a regular file's
    with open(path, "wb") as out:
        while chunk := src.read(CHUNK):
            sha.update(chunk)
            out.write(chunk)
    return "sha256:" + sha.hexdigest()
