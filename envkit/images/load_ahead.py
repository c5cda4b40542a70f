"""A reproducible build's environment layers loaded into the engine while the next group installs
(``reproducible.assemble``).

`docker load` of the whole archive after the last group took 47-54 s of the example's 119-136 s cold build
(docs/benchmarks.md, runs 5 and 6), with nothing else running. An engine that takes a layer it already has by chain
id without its file in the archive (``Engine.loads_known_layers``) can take each group's layer as soon as it is
written instead: ``LoadAhead`` loads them one at a time, in order, in a thread of its own, each as an image of the OS
layers and the groups so far (``<tag>-<group>``, the OS stage's labels with the stage ``layers``; only the newest
group's bytes are in its archive, the layers below named), and removes the previous one's tag once it is in. The
final archive then names every environment layer and carries only the payload and the config.

``close`` ends it however the build ends: a load under way is cut (its archive stops mid-stream, so the engine
takes nothing of it) and every tag it made is removed; their layers stay only while another image holds them. A
SIGKILL leaves a ``<tag>-<group>`` image with the stage labels, which `envkit gc` lists as a stage image.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import TYPE_CHECKING, BinaryIO, Callable, cast

from ..support.labels import STAGE_LABEL
from . import archive

if TYPE_CHECKING:
    from ..engine.protocol import Engine

LAYERS_STAGE = "layers"  # the stage label of an image LoadAhead loads


class _Cancelled(Exception):
    pass


class LoadAhead:
    """Loads each group's layer in the background as ``add`` hands it over (see the module doc). ``finish`` waits for
    every load and returns the layers as the final archive takes them (named only); ``seconds`` is how long each load
    took and how long ``finish`` waited."""

    def __init__(self, engine: Engine, saved: archive.SavedImage, tag: str, os_labels: dict[str, str],
                 epoch: int, say: Callable[[str], None]):  # (``say`` is called in the build's thread only)
        self.engine, self.saved, self.tag, self.epoch, self.say = engine, saved, tag, epoch, say
        self.labels = {**os_labels, STAGE_LABEL: LAYERS_STAGE}
        self.seconds: dict[str, float] = {}
        self._queue: queue.Queue[tuple[str, list[archive.NewLayer]] | None] = queue.Queue()
        self._cancel = threading.Event()
        self._failed: list[BaseException] = []
        self._tags: list[str] = []  # the tags loaded and not yet removed, oldest first
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="envkit-load-ahead", daemon=True)
        self._thread.start()

    def add(self, group: str, layers: list[archive.NewLayer]) -> None:
        """Load the environment so far (``layers``, lowest first, the newest ``group``'s with its tar) next: the
        layers below are the engine's by then (loaded before it, or reused), named only."""
        *below, newest = layers
        self.say(f"loading the {group} layer into the engine beside what comes next")
        self._queue.put((group, [*(archive.NewLayer(None, x.diff_id, x.created_by) for x in below), newest]))

    def finish(self, layers: list[archive.NewLayer]) -> list[archive.NewLayer]:
        """Wait for every load; raise the first one's error; ``layers`` as the final archive names them."""
        started = time.monotonic()
        self._queue.put(None)
        self._thread.join()
        self.seconds["load wait"] = round(time.monotonic() - started, 1)
        if self._failed:
            raise self._failed[0]
        return [archive.NewLayer(None, x.diff_id, x.created_by) for x in layers]

    def close(self) -> None:
        """Cut a load under way, wait for the thread, remove every tag it made (the final image holds their layers)."""
        self._cancel.set()
        self._queue.put(None)
        self._thread.join()
        with self._lock:
            tags, self._tags = self._tags, []
        for tag in tags:
            self.engine.untag(tag)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._failed or self._cancel.is_set():
                continue
            group, layers = item
            try:
                self._load(group, layers)
            except BaseException as exc:  # noqa: BLE001 - raised by finish, in the build's thread
                self._failed.append(exc)

    def _load(self, group: str, layers: list[archive.NewLayer]) -> None:
        tag = f"{self.tag}-{group}"
        config = archive.image_config(self.saved.config, layers, env=(), labels=self.labels,
                                      drop_labels=set(), user="", workdir="", cmd=(), epoch=self.epoch)
        started = time.monotonic()

        def write(out: BinaryIO) -> None:
            archive.write_archive(cast(BinaryIO, _Cancellable(out, self._cancel)), self.saved, layers, config, tag,
                                  os_layers=False)

        try:
            self.engine.load_stream(write, f"the {group} layer ({tag})")
        except _Cancelled:
            return
        with self._lock:
            older, self._tags = self._tags, [tag]
        for old in older:
            self.engine.untag(old)
        self.seconds[f"load {group} (beside)"] = round(time.monotonic() - started, 1)


class _Cancellable:
    """A stream that refuses the next write once ``cancel`` is set: the archive stops there."""

    def __init__(self, out: BinaryIO, cancel: threading.Event):
        self.out, self.cancel = out, cancel

    def write(self, data: bytes) -> int:
        if self.cancel.is_set():
            raise _Cancelled()
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()
