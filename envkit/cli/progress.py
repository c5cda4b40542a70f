"""How a long build shows its progress: a bar per image on a terminal (rich), plain lines in a CI log.

The events are the build's (``BuildProgress``: an image's name and a ``BuildEvent``, a ``Planned`` or a line of
text). On a terminal (stderr is one, ``$CI`` is unset, ``$TERM`` is not ``dumb``) each image gets a bar of its build
steps (step i of n, what the step runs) and, while the installer takes up the lock's closure, a bar of the packages
installed against the lock's count and, from the lock's wheel sizes, their bytes against the lock's total (an install
step the engine takes from its cache counts as installed); other lines print above the bars. Elsewhere each step is
one line, and the install's count a line per ``EVERY`` packages, so a log shows the build moving without a line per
package.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from ..engine.protocol import BuildEvent
from ..support.progress import InstallCount, LayerBytes, Phase, Planned, TransferTotals, transfer_lines
from .common import Ctx

EVERY = 10  # packages between two plain count lines
STEP_TEXT = 60  # characters of a step's instruction shown


class CountColumn(ProgressColumn):
    """A bar's count: ``i/n`` (steps, packages, layers), or the percentage of a bar of bytes (``unit="bytes"``,
    whose figures its description gives)."""

    def render(self, task: Task) -> Text:
        if task.fields.get("unit") == "bytes":
            return Text(f"{task.percentage:3.0f}%" if task.total else "")
        return Text(f"{int(task.completed)}/{int(task.total)}" if task.total is not None else f"{int(task.completed)}")


def bars() -> Progress:
    """The bars every long step draws on a terminal (stderr: stdout stays for results)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), CountColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True))


def on_terminal(stream: Any = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("CI") \
        and os.environ.get("TERM") != "dumb"


class BuildView:
    """The build's progress callback (``view(name, event)``), used as a context manager around the build."""

    def __init__(self, c: Ctx, *, live: bool | None = None):
        self.c = c
        self.live = on_terminal() if live is None else live
        self.bars: Progress | None = None
        self.steps: dict[str, TaskID] = {}
        self.installs: dict[str, TaskID] = {}
        self.counts: dict[str, InstallCount] = {}
        self.phases: dict[str, TaskID] = {}

    def __enter__(self) -> BuildView:
        if self.live:
            self.bars = bars()
            self.bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bars is not None:
            self.bars.stop()

    def say(self, text: str) -> None:
        if self.bars is not None:
            self.bars.console.print(f"envkit: {text}", markup=False, highlight=False)
        else:
            self.c.progress(text)

    def __call__(self, name: str, event: object) -> None:
        if isinstance(event, Planned):
            self.counts[name] = InstallCount.of(event)
        elif isinstance(event, Phase):
            self._phase(name, event)
        elif isinstance(event, BuildEvent):
            self._build_event(name, event)
        else:
            self.say(f"[{name}] {event}" if name != "*" else str(event))

    def _build_event(self, name: str, event: BuildEvent) -> None:
        if event.kind == "step":
            self.counts.setdefault(name, InstallCount()).step(event.text)
            text = event.text[:STEP_TEXT]
            if self.bars is None:
                self.c.progress(f"[{name}] step {event.step}/{event.total}: {event.text[:100]}")
                return
            if name not in self.steps:
                self.steps[name] = self.bars.add_task(escape(f"[{name}] build"), total=event.total)
            self.bars.update(self.steps[name], completed=(event.step or 1) - 1, total=event.total,
                             description=escape(f"[{name}] step: {text}"))
        elif event.kind == "log":
            if self.c.verbose:
                self.say(f"[{name}]   {event.text}")
            count = self.counts.setdefault(name, InstallCount())
            moved = count.feed(event.text)
            if moved:
                self._count(name, count, moved)
        elif event.kind == "done" and self.bars is not None:
            for tasks in (self.steps, self.installs):
                if name in tasks:
                    task = self.bars.tasks[tasks[name]]
                    self.bars.update(tasks[name], completed=task.total or task.completed)

    def _phase(self, name: str, event: Phase) -> None:
        """The base bootstrap's phases: one bar on a terminal (its total once debootstrap has retrieved what it
        needs); elsewhere a line as each phase starts and one when it ends."""
        words = event.words()
        if self.bars is None:
            if (line := event.line()) is not None:
                self.c.progress(f"[{name}] {line}")
            return
        key = f"{name} {event.step}"
        if key not in self.phases:
            self.phases[key] = self.bars.add_task(escape(f"[{name}] {event.step}"), total=None)
        self.bars.update(self.phases[key], completed=event.done, total=event.total,
                         description=escape(f"[{name}] {words}"))

    def _count(self, name: str, count: InstallCount, moved: str) -> None:
        if self.bars is None:
            if moved == "package" and (count.done % EVERY == 0 or count.done == count.total):
                self.c.progress(f"[{name}] {count.words()}")
            return
        by_bytes = bool(count.total_bytes)  # the bar fills by the lock's wheel bytes when it has them all
        if name not in self.installs:
            self.installs[name] = self.bars.add_task(escape(f"[{name}] install"),
                                                     total=(count.total_bytes if by_bytes else count.total) or None,
                                                     unit="bytes" if by_bytes else "packages")
        self.bars.update(self.installs[name], completed=count.done_bytes if by_bytes else count.done,
                         description=escape(f"[{name}] install: {count.words()}"))



LAYER_DONE = ("Pull complete", "Already exists", "Pushed", "Layer already exists", "Mounted from")


class LayerView:
    """A push's or pull's progress: its status lines (``view(text)``, one engine status line, ``LAYER: STATUS``) and
    its bytes per layer (``view.transfer``, a ``Transfer``). On a terminal one bar of the bytes moved against the
    layers' sizes (the layers done against the layers announced while no size is known yet); elsewhere the status
    lines as they come, and a line each time another quarter of the bytes has moved."""

    def __init__(self, c: Ctx, what: str, *, live: bool | None = None):
        self.c = c
        self.what = what
        self.live = on_terminal() if live is None else live
        self.bars: Progress | None = None
        self.task: TaskID | None = None
        self.layers: dict[str, bool] = {}
        self.totals = TransferTotals()
        self._lines = transfer_lines(c.progress, what)

    def __enter__(self) -> LayerView:
        if self.live:
            self.bars = bars()
            self.bars.start()
            self.task = self.bars.add_task(escape(f"{self.what}: layers"), total=None)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bars is not None:
            self.bars.stop()

    def __call__(self, text: str) -> None:
        layer, sep, status = text.partition(": ")
        if self.bars is None or self.task is None or not sep or " " in layer:
            if self.bars is not None:
                self.bars.console.print(f"envkit: {text}", markup=False, highlight=False)
            else:
                self.c.progress(text)
            return
        self.layers[layer] = self.layers.get(layer, False) or status.startswith(LAYER_DONE)
        if self.layers[layer]:
            self.totals.finish(layer)
        self._draw()

    def transfer(self, event: LayerBytes) -> None:
        self.totals.feed(event)
        if self.bars is None:
            self._lines(event)
        else:
            self._draw()

    def _draw(self) -> None:
        if self.bars is None or self.task is None:
            return
        done = sum(self.layers.values())
        words = f"{self.what}: layers {done}/{len(self.layers)}"
        if self.totals.total:
            self.bars.update(self.task, total=self.totals.total, completed=self.totals.done, unit="bytes",
                             description=escape(f"{words}, {self.totals.words()}"))
        else:
            self.bars.update(self.task, total=len(self.layers), completed=done, description=escape(words))
