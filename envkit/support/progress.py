"""The progress callback a long step takes (resolving, building, bundling, publishing, the nightly): it is called
with one line about what the step is doing now, which the CLI writes to stderr (stdout stays for results)."""

from __future__ import annotations

from typing import Callable

Progress = Callable[[str], None]
