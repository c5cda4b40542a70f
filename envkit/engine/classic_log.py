"""The classic builder's output, read as ``BuildEvent``s (``docker_engine.DockerEngine.build``)."""

from __future__ import annotations

import re
from typing import Iterator

from .protocol import BuildEvent

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")
_RUNNING = re.compile(r"^ ---> Running in ([0-9a-f]{12,64})$")  # the container of the RUN step under way


class ClassicLog:
    """The lines a classic build printed (``last``, for its errors) and the container of the RUN step under way
    (``running``, which an interrupted build stops)."""

    def __init__(self) -> None:
        self.last: list[str] = []
        self.running: str | None = None

    def events(self, text: str) -> Iterator[BuildEvent]:
        """A ``step`` event for each "Step i/n" line, a ``log`` event for every other non-empty line."""
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
