"""What ``envkit doctor`` reports: one ``Finding`` per check (ok, warn, fail or skip, with a hint), and the exit code
the first failing check gives (its area's: docs/cli.md, exit codes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Finding:
    name: str
    status: str  # ok | warn | fail | skip
    value: str
    hint: str = ""

    def to_json(self) -> dict:
        return asdict(self)


# A failing check exits with its area's code (docs/cli.md, exit codes); every other check is the engine's or this
# host's (6).
EXIT_CODES = {"ca_bundle": 2, "catalog": 2, "index": 3, "framework_index": 3, "store": 9}


def exit_code(findings: list[Finding]) -> int:
    """0 when no check fails; else the first failing check's code (engine and host 6, CA bundle and catalog 2,
    package index 3, history store 9), in the order doctor checks."""
    failed = [f for f in findings if f.status == "fail"]
    return EXIT_CODES.get(failed[0].name, 6) if failed else 0
