"""`envkit layers diff`: two images' environment layers side by side, and for the first that differs, the first
differing file in it (``images.layer_diff``), not just two digests.

Images `--reproducible` made (both) are compared by their layer groups (cuda, framework, extra, then the payload),
read from their own labels (``layer_record.labelled_layers``); any other pair, layer by layer from the lowest. Only
the first differing pair of layers is read: each image saved by its own engine as a stream, only that layer kept
(``images.saved_layers``), in a scratch directory removed when the command ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import EngineError
from ..images.layer_diff import TarDiff, diff_files
from ..images.layer_record import labelled_layers
from ..images.saved_layers import save_layers
from ..support import scratch

if TYPE_CHECKING:
    from ..engine.protocol import Engine, ImageInfo

ABSENT = "(no layer)"


@dataclass(frozen=True)
class LayerRow:
    name: str  # the layer group (cuda, framework, extra, payload), or "#<index>" for images envkit did not lay out
    a: str  # diff_id in image A, or ABSENT
    b: str

    @property
    def same(self) -> bool:
        return self.a == self.b

    def to_json(self) -> dict[str, object]:
        return {"layer": self.name, "a": self.a, "b": self.b, "same": self.same}


@dataclass(frozen=True)
class LayersDiff:
    images: tuple[str, str]
    by_group: bool  # both images `--reproducible` made: their environment layer groups; else every layer
    rows: tuple[LayerRow, ...]
    files: TarDiff | None  # the first differing layer's files (None: none differs, or it is in one image only)

    @property
    def first(self) -> LayerRow | None:
        return next((r for r in self.rows if not r.same), None)

    @property
    def same(self) -> bool:
        return self.first is None

    def to_json(self) -> dict[str, object]:
        first = self.first
        return {"images": list(self.images), "compared": "environment layer groups" if self.by_group else "layers",
                "same": self.same, "layers": [r.to_json() for r in self.rows],
                "first_layer": first.name if first else None,
                "first_file": self.files.first.to_json() if self.files and self.files.first else None,
                "differing_files": self.files.differing if self.files else None}


def _info(engine: Engine, ref: str) -> ImageInfo:
    info = engine.inspect(ref)
    if info is None:
        raise EngineError(f"no image {ref!r} in the engine", hint="`docker images` lists the engine's images; "
                                                                  "--engine-b names the engine of the second image")
    return info


def layer_rows(a: ImageInfo, b: ImageInfo) -> tuple[bool, tuple[LayerRow, ...]]:
    """What is compared: the environment groups of two images `--reproducible` made, else every layer by place."""
    env_a, env_b = labelled_layers(a.layers, a.labels), labelled_layers(b.layers, b.labels)
    if env_a is not None and env_b is not None:
        names = [*env_a, *(g for g in env_b if g not in env_a)]
        return True, tuple(LayerRow(g, env_a.get(g, ABSENT), env_b.get(g, ABSENT)) for g in names)
    count = max(len(a.layers), len(b.layers))
    pad_a, pad_b = (list(x.layers) + [ABSENT] * (count - len(x.layers)) for x in (a, b))
    return False, tuple(LayerRow(f"#{i}", x, y) for i, (x, y) in enumerate(zip(pad_a, pad_b)))


def diff_images(engine_a: Engine, ref_a: str, engine_b: Engine, ref_b: str) -> LayersDiff:
    """Compare ``ref_a`` (on ``engine_a``) and ``ref_b`` (on ``engine_b``, which may be the same engine)."""
    info_a, info_b = _info(engine_a, ref_a), _info(engine_b, ref_b)
    by_group, rows = layer_rows(info_a, info_b)
    first = next((r for r in rows if not r.same), None)
    files = None
    if first is not None and ABSENT not in (first.a, first.b):
        with scratch.directory("layers") as tmp:
            (tmp / "a").mkdir()
            (tmp / "b").mkdir()
            path_a = save_layers(engine_a, ref_a, {first.a}, tmp / "a")[first.a]
            path_b = save_layers(engine_b, ref_b, {first.b}, tmp / "b")[first.b]
            with open(path_a, "rb") as fa, open(path_b, "rb") as fb:
                files = diff_files(fa, fb, same_bytes=False)
    return LayersDiff((ref_a, ref_b), by_group, rows, files)


def explain(result: LayersDiff) -> str:
    """One line on where two images' layers part (the CLI's summary; a test's failure message)."""
    first = result.first
    if first is None:
        return "the layers compared are the same"
    where = f"the {first.name} layer" if result.by_group else f"layer {first.name}"
    if result.files is None or result.files.first is None:
        return f"{where} differs ({first.a} vs {first.b}); it is in one image only"
    return (f"{where} differs ({first.a} vs {first.b}): {result.files.first.describe()}; "
            f"{result.files.differing} member(s) differ")
