"""What the engine holds of images' layers, for a build's report of the layers it reused and built
(``support.layer_moves.built``): every layer chain its images have, and each layer's size unpacked."""

from __future__ import annotations

from typing import Any

import docker.errors


def chains(client: Any) -> set[tuple[str, ...]]:
    """Every layer chain (a layer's diff_id with those below it) of the engine's images now, the classic builder's
    intermediate images too (a step it takes from its cache reuses theirs)."""
    held: set[tuple[str, ...]] = set()
    for summary in client.api.images(all=True):
        try:
            layers = (client.api.inspect_image(summary["Id"]).get("RootFS") or {}).get("Layers") or []
        except docker.errors.NotFound:  # removed since the listing
            continue
        except docker.errors.APIError as exc:  # being removed as it was read: 500, "layer does not exist"
            if "does not exist" not in str(exc.explanation or ""):
                raise
            continue
        held.update(tuple(layers[:i + 1]) for i in range(len(layers)))
    return held


def sizes(client: Any, ref: str) -> tuple[int, ...] | None:
    """Each of ``ref``'s layers' size unpacked, lowest first, read from its history (`docker history`), or None when
    the history cannot be matched to the layers (``matched``): the history has a row per step, the steps that made
    no layer (ENV, LABEL) 0 bytes, and does not say which rows are layers."""
    try:
        layers = (client.api.inspect_image(ref).get("RootFS") or {}).get("Layers") or []
        rows = [int(r.get("Size") or 0) for r in reversed(client.api.history(ref))]
    except docker.errors.NotFound:
        return None
    return matched(layers, rows)


EMPTY_TAR = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"  # a layer that adds nothing


def matched(layers: list[str], rows: list[int]) -> tuple[int, ...] | None:
    """The history's ``rows`` (sizes, lowest first) as one size per layer: all of them when there are as many as
    layers; else the rows with bytes, in order, for the layers that add something (an empty layer is 0 bytes),
    when those are as many; else None."""
    if len(rows) == len(layers):
        return tuple(rows)
    sized = iter([r for r in rows if r > 0])
    if len([r for r in rows if r > 0]) != sum(1 for d in layers if d != EMPTY_TAR):
        return None
    return tuple(0 if d == EMPTY_TAR else next(sized) for d in layers)


class LayersOverClient:
    """``DockerEngine``'s ``layer_chains`` and ``layer_sizes`` (``engine.protocol.Engine``)."""

    client: Any

    def layer_chains(self) -> set[tuple[str, ...]]:
        return chains(self.client)

    def layer_sizes(self, ref: str) -> tuple[int, ...] | None:
        return sizes(self.client, ref)
