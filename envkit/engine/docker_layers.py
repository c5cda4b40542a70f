"""What the engine holds of images' layers, for a build's report of the layers it reused and built
(``support.layer_moves.built``): every layer chain its images have, and each layer's size unpacked."""

from __future__ import annotations

from typing import Any

import docker.errors


def chains(client: Any) -> set[tuple[str, ...]]:
    """Every layer chain (a layer's diff_id with those below it) of the engine's images now."""
    held: set[tuple[str, ...]] = set()
    for summary in client.api.images(all=False):
        try:
            layers = (client.api.inspect_image(summary["Id"]).get("RootFS") or {}).get("Layers") or []
        except docker.errors.NotFound:  # removed since the listing
            continue
        held.update(tuple(layers[:i + 1]) for i in range(len(layers)))
    return held


def sizes(client: Any, ref: str) -> tuple[int, ...] | None:
    """Each of ``ref``'s layers' size unpacked, lowest first, read from its history (`docker history`), or None when
    the history cannot be matched to the layers: the history has a row per step, the steps that made no layer (ENV,
    LABEL) 0 bytes; a row per layer is the history's rows when there are as many as layers, else its rows with bytes
    when those are as many."""
    try:
        layers = (client.api.inspect_image(ref).get("RootFS") or {}).get("Layers") or []
        rows = [int(r.get("Size") or 0) for r in reversed(client.api.history(ref))]
    except docker.errors.NotFound:
        return None
    if len(rows) == len(layers):
        return tuple(rows)
    sized = [r for r in rows if r > 0]
    return tuple(sized) if len(sized) == len(layers) else None


class LayersOverClient:
    """``DockerEngine``'s ``layer_chains`` and ``layer_sizes`` (``engine.protocol.Engine``)."""

    client: Any

    def layer_chains(self) -> set[tuple[str, ...]]:
        return chains(self.client)

    def layer_sizes(self, ref: str) -> tuple[int, ...] | None:
        return sizes(self.client, ref)
