"""The engine's disk usage (``docker system df -v``), read by one caller at a time.

The engine runs one disk-usage walk at a time and answers every other request made meanwhile with
409 "a disk usage operation is already running" (daemon/disk_usage.go); on a host where a nightly's
space check, a gc and ``envkit doctor`` may overlap, that answer means "ask again shortly", not "no
usage known". ``read_df`` waits for the running walk, up to ``patience`` seconds, and then raises.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import docker.errors

_BUSY = "disk usage operation is already running"


def read_df(client: Any, patience: float = 120.0, sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.monotonic) -> dict:
    """``client.df()``'s answer, asking again while the engine is still walking for another caller."""
    deadline = clock() + patience
    pause = 0.2
    while True:
        try:
            return client.df() or {}
        except docker.errors.APIError as exc:
            if _BUSY not in str(exc.explanation or exc) or clock() + pause > deadline:
                raise
        sleep(pause)
        pause = min(pause * 2, 5.0)
