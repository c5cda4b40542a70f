"""What happened to each layer of an image in a push, a pull or a build, with its bytes: the nightly's report, `envkit
pull --json` and `envkit build --json` say it per layer and in one line (``LayerMoves.words``).

The engine's push and pull progress stream names a layer by a short id: Docker 20.10 names a pushed layer by its
diff_id (``stringid.TruncateID(layer.DiffID())``: the first 12 hex digits) and a pulled one by its compressed blob's
digest (the same, of the manifest's ``layers[].digest``); the last status said of it is what happened to it
(``PUSH_OUTCOMES``, ``PULL_OUTCOMES``). Bytes come from elsewhere: a push's and a pull's from the registry's manifest
(the compressed sizes: what moves, or would have), a build's from the engine (each layer's size unpacked)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Mapping, Sequence

from .progress import decimal_size

# the final status of a layer in the engine's stream -> what happened to it
PUSH_OUTCOMES = {"Pushed": "uploaded", "Layer already exists": "present"}  # and "Mounted from REPO": "mounted"
PULL_OUTCOMES = {"Pull complete": "pulled", "Download complete": "pulled", "Already exists": "present"}
MOUNTED = "Mounted from "
MOVED = frozenset({"uploaded", "pulled", "built"})  # the outcomes whose bytes moved (or were made) in this run
UNKNOWN = "unknown"  # the stream said nothing final of the layer


def short_id(digest: str) -> str:
    """The id the engine's stream gives a layer: its digest's first 12 hex digits."""
    return digest.split(":")[-1][:12]


@dataclass(frozen=True)
class LayerMove:
    diff_id: str  # the layer unpacked (the image's RootFS)
    outcome: str  # uploaded | present | mounted (push); pulled | present (pull); built | reused (build); unknown
    bytes: int | None  # push, pull: compressed (the manifest's size); build: unpacked (the engine's); None: unknown
    digest: str | None = None  # push, pull: the compressed blob's digest in the registry

    def to_json(self) -> dict:
        return {"diff_id": self.diff_id, **({"digest": self.digest} if self.digest else {}),
                "bytes": self.bytes, "outcome": self.outcome}


@dataclass(frozen=True)
class LayerMoves:
    verb: str  # pushed | pulled | built: what ``moved`` layers were
    layers: tuple[LayerMove, ...]

    @property
    def moved(self) -> tuple[LayerMove, ...]:
        return tuple(x for x in self.layers if x.outcome in MOVED)

    @property
    def kept(self) -> tuple[LayerMove, ...]:
        """The layers already there (present, mounted, reused)."""
        return tuple(x for x in self.layers if x.outcome not in MOVED and x.outcome != UNKNOWN)

    @property
    def moved_bytes(self) -> int:
        return sum(x.bytes or 0 for x in self.moved)

    @property
    def kept_bytes(self) -> int:
        return sum(x.bytes or 0 for x in self.kept)

    def to_json(self) -> dict:
        return {"layers": [x.to_json() for x in self.layers], self.verb: len(self.moved),
                f"{self.verb}_bytes": self.moved_bytes, "present": len(self.kept), "present_bytes": self.kept_bytes,
                "summary": self.words()}

    def words(self) -> str:
        """One line: "pushed 2 of 7 layers, 1.20 GB; 5 present, 3.00 GB"."""
        kept = "reused" if self.verb == "built" else "present"
        return (f"{self.verb} {len(self.moved)} of {len(self.layers)} layers, {decimal_size(self.moved_bytes)}; "
                f"{len(self.kept)} {kept}, {decimal_size(self.kept_bytes)}")


class StreamStatuses:
    """The last final status (``PUSH_OUTCOMES``, ``PULL_OUTCOMES``, "Mounted from ...") the engine's push or pull
    stream said of each layer id (``feed`` every record, of every attempt: a layer sent by an attempt that failed
    later stays sent, though the next attempt finds it in the registry)."""

    def __init__(self) -> None:
        self.last: dict[str, str] = {}

    def feed(self, chunk: Mapping) -> None:
        layer, status = chunk.get("id"), chunk.get("status")
        if isinstance(layer, str) and isinstance(status, str) and (
                status in PUSH_OUTCOMES or status in PULL_OUTCOMES or status.startswith(MOUNTED)):
            if _outcome(self.last.get(layer), {**PUSH_OUTCOMES, **PULL_OUTCOMES}) not in MOVED:
                self.last[layer] = status


def _outcome(status: str | None, table: Mapping[str, str]) -> str:
    if status is None:
        return UNKNOWN
    if status.startswith(MOUNTED):
        return "mounted"
    return table.get(status, UNKNOWN)


def pushed(statuses: Mapping[str, str], diff_ids: Sequence[str], blobs: Sequence[tuple[str, int]] | None
           ) -> LayerMoves:
    """A push's layers: ``diff_ids`` (the local image's, lowest first) matched to the stream's ids, and to ``blobs``
    (the pushed manifest's layers: digest and compressed size, in the same order; None: not read)."""
    return _registry("pushed", [statuses.get(short_id(d)) for d in diff_ids], PUSH_OUTCOMES, diff_ids, blobs)


def pulled(statuses: Mapping[str, str], diff_ids: Sequence[str], blobs: Sequence[tuple[str, int]] | None
           ) -> LayerMoves:
    """A pull's layers: the manifest's ``blobs`` matched to the stream's ids, with the pulled image's ``diff_ids``
    (``blobs`` None: the manifest was not read, so nothing is known of each layer). A layer the stream says nothing of
    was present: the engine names every layer it fetches, and says nothing of any when it has the image already."""
    if blobs is None:
        return _registry("pulled", [None] * len(diff_ids), PULL_OUTCOMES, diff_ids, None)
    said = [statuses.get(short_id(digest), "Already exists") for digest, _ in blobs]
    return _registry("pulled", said, PULL_OUTCOMES, diff_ids, blobs)


def present(diff_ids: Sequence[str], blobs: Sequence[tuple[str, int]] | None) -> LayerMoves:
    """A push that was not needed: the registry held the image (every layer present)."""
    return _registry("pushed", ["Layer already exists"] * len(diff_ids), PUSH_OUTCOMES, diff_ids, blobs)


def _registry(verb: str, said: Sequence[str | None], table: Mapping[str, str], diff_ids: Sequence[str],
              blobs: Sequence[tuple[str, int]] | None) -> LayerMoves:
    sized = blobs is not None and len(blobs) == len(diff_ids)  # (else the manifest is not this image's layer list)
    return LayerMoves(verb, tuple(
        LayerMove(d, _outcome(s, table), blobs[i][1] if sized and blobs else None,
                  blobs[i][0] if sized and blobs else None)
        for i, (d, s) in enumerate(zip(diff_ids, said))))


def built(diff_ids: Sequence[str], before: Collection[tuple[str, ...]], sizes: Sequence[int] | None) -> LayerMoves:
    """A build's layers: reused where the engine held the same layer on the same layers below it before the build
    (``before``: the layer chains of its images then, ``chains``), else built; ``sizes``: each layer's, unpacked."""
    sized = sizes is not None and len(sizes) == len(diff_ids)
    return LayerMoves("built", tuple(
        LayerMove(d, "reused" if tuple(diff_ids[:i + 1]) in before else "built",
                  sizes[i] if sized and sizes else None)
        for i, d in enumerate(diff_ids)))


def held(diff_ids: Sequence[str], sizes: Sequence[int] | None) -> LayerMoves:
    """An image the engine already had (a build skipped as unchanged): every layer reused."""
    return built(diff_ids, chains([diff_ids]), sizes)


def chains(images_layers: Collection[Sequence[str]]) -> set[tuple[str, ...]]:
    """Every layer chain (a layer with the layers below it) of images with these layer lists."""
    return {tuple(layers[:i + 1]) for layers in images_layers for i in range(len(layers))}
