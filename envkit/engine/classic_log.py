"""The classic builder's output, read as ``BuildEvent``s (``docker_engine.DockerEngine.build``)."""

from __future__ import annotations

import re
from typing import Iterator

from .protocol import BuildEvent

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # the engine marks a step's stderr red, anywhere in a line
_RUNNING = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})$")  # the container of the RUN step under way


class ClassicLog:
    """The lines a classic build printed (``last``, for its errors) and the container of the RUN step under way
    (``running``, which an interrupted build stops).

    The engine's stream is cut where the step's output happened to be read, not at line ends (uv's `` + name==1.0``
    comes as ``" + nvidia-cu"`` and ``"blas-cu12==12.4"``, or a lone space between two words): a piece without a line
    end is kept until the rest of its line arrives, so every event is one whole line. The engine also colours what a
    step writes to stderr (ESC[91m ... ESC[0m, wherever a piece starts, so mid-line too: `` + nvidia-cublas-cu12``
    ESC[0m ESC[91m ``==12.4.5.8``); the colour codes are dropped."""

    def __init__(self) -> None:
        self.last: list[str] = []
        self.running: str | None = None
        self._partial = ""  # the start of a line whose end has not come yet

    def events(self, text: str) -> Iterator[BuildEvent]:
        """A ``step`` event for each whole "Step i/n" line, a ``log`` event for every other non-empty whole line."""
        text = self._partial + _COLOUR.sub("", text)
        whole, _, self._partial = text.rpartition("\n") if "\n" in text else ("", "", text)
        yield from self._lines(whole)

    def flush(self) -> Iterator[BuildEvent]:
        """The last line, when the stream ended without a line end."""
        rest, self._partial = self._partial, ""
        yield from self._lines(rest)

    def _lines(self, text: str) -> Iterator[BuildEvent]:
        for line in text.splitlines():
            line = line.rstrip()
            if not line:
                continue
            self.last.append(line)
            m = _STEP.match(line)
            if m:
                self.running = None  # the previous step is done
                yield BuildEvent("step", m.group(3), int(m.group(1)), int(m.group(2)))
                continue
            started = _RUNNING.match(line)
            self.running = started.group(1) if started else self.running
            yield BuildEvent("log", line)

    def tail(self) -> str:
        return "\n    ".join(self.last[-15:])
