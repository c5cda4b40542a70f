"""Reusing a reproducible image's lower environment layers: a build whose lower layer groups have the same
packages as an image the engine has (on the same OS layers) installs only the groups above them.

A group's layer is a function of its own packages, the installer and the bytecode program (``group_key``) and of
the interpreter in the OS layers under it, not of the groups below it: uv installs each package's own files
(``--no-deps``), the bytecode step compiles only files without bytecode, and a layer holds what its group added
or changed. So a group installed into the venv as the first group's install leaves it without packages
(``python3 -m venv``, uv run on an empty requirements file, which leaves its `.lock` as a full install does, the
bytecode step; left out of the layer: the first group's layer holds it) gives the same tar as installed over the
groups below it; ``tests/integration/test_reproducible.py`` builds both ways and compares. Should the image go
between ``find_reusable`` and the load, the load says it lacked the layer's file (``lost``) and the build runs
again, reusing nothing.

The reused layers are never read or written: `docker load` takes a layer the engine already has by its chain (the
OS layers and the groups below it) without opening its file, so the archive names them and leaves them out. That
is how the engine's own image store loads (Docker's graph drivers); the containerd image store and other engines
want every file, so there nothing is reused (``Engine.loads_known_layers``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..support.labels import LAYER_KEYS_LABEL, LAYERS_LABEL, REPRODUCIBLE_LAYERS

if TYPE_CHECKING:
    from ..engine.protocol import Engine


def group_key(mark: bytes, group: str, requirements: bytes) -> str:
    """What a group's layer is made from: how (``mark``: installer, epoch, bytecode program), which group, its
    requirements file (every package pinned by hash)."""
    return hashlib.sha256(b"\0".join([mark, group.encode(), requirements])).hexdigest()[:32]


def keys_label(keys: dict[str, str]) -> str:
    return " ".join(f"{group}={key}" for group, key in keys.items())


def parse_keys(value: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in value.split() if "=" in item)


@dataclass(frozen=True)
class Reuse:
    image: str  # the image whose layers are reused (id)
    layers: dict[str, str]  # group -> diff_id, the lowest groups of this build


def find_reusable(engine: Engine, os_layers: tuple[str, ...], keys: dict[str, str]) -> Reuse | None:
    """The engine's reproducible image that shares the most lowest groups with ``keys`` on exactly ``os_layers``
    (None: none shares the lowest group, or the engine's `docker load` does not take known layers by chain)."""
    if not engine.loads_known_layers():
        return None
    mine = list(keys.items())
    best: Reuse | None = None
    for info in engine.find_images({LAYERS_LABEL: REPRODUCIBLE_LAYERS}):
        if info.layers[:len(os_layers)] != os_layers:
            continue
        theirs = list(parse_keys(info.labels.get(LAYER_KEYS_LABEL, "")).items())
        most = min(len(mine), len(theirs), len(info.layers) - len(os_layers))
        shared = 0
        while shared < most and theirs[shared] == mine[shared]:
            shared += 1
        if shared and (best is None or shared > len(best.layers)):
            best = Reuse(info.id, {g: info.layers[len(os_layers) + i] for i, (g, _) in enumerate(mine[:shared])})
    return best


def lost(load_error: str, reuse: Reuse) -> bool:
    """Whether `docker load` failed for want of a reused layer's file: the engine no longer had that layer (its
    image was removed after ``find_reusable``): "open /var/lib/docker/tmp/docker-import-…/<hex>/layer.tar: no such
    file or directory", as Docker 20.10 says it."""
    return any(f"{diff_id.split(':')[-1]}/layer.tar: no such file" in load_error for diff_id in reuse.layers.values())
