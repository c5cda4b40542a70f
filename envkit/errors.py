"""One error hierarchy. Only ``envkit.cli`` catches these, prints them and exits.

Every message names the bad value, what is allowed, and what to do next.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """Where a value came from: a file and (1-based) line and column."""

    path: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return self.path
        if self.column is None:
            return f"{self.path}:{self.line}"
        return f"{self.path}:{self.line}:{self.column}"


class EnvkitError(Exception):
    """Base of every error envkit raises on purpose."""

    exit_code = 1
    engine_full = False  # True: the engine's disk filled up (engine.space.engine_out_of_space)

    def __init__(self, message: str, *, hint: str | None = None, location: Location | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.location = location

    def __str__(self) -> str:
        text = f"{self.location}: {self.message}" if self.location else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_json(self) -> dict:
        return {
            "error": type(self).__name__,
            "message": self.message,
            "hint": self.hint,
            "location": str(self.location) if self.location else None,
        }


class SpecError(EnvkitError):
    """team.yaml is malformed or breaks a rule."""

    exit_code = 2


class CatalogError(EnvkitError):
    """The compatibility catalog is malformed or lacks a fact."""

    exit_code = 2


class PackageIndexError(EnvkitError):
    """The package index could not answer."""

    exit_code = 3


class WheelReadError(PackageIndexError):
    """A wheel's bytes do not give what was asked (no byte ranges, not a zip, no such member, a member
    over the size cap, an unknown compression). Unlike a failed connection, asking again will not help."""


class ResolutionError(EnvkitError):
    """No stack satisfies the spec's constraints."""

    exit_code = 4
    from_extras = False  # True: the solve failed only with the image's pip: packages, which the error is about


class LockError(EnvkitError):
    """The lock file is missing, malformed, or stale."""

    exit_code = 5


class EngineError(EnvkitError):
    """The container engine is unreachable or refused a request."""

    exit_code = 6


class CommandNotFoundError(EngineError):
    """A container could not start because its image has no such program (``exec: "python3": executable file not
    found``): the engine works, the image lacks it. Callers that know what the program was for say so."""

    def __init__(self, message: str, *, command: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.command = command


class BuildError(EnvkitError):
    """An image failed to build."""

    exit_code = 7


class DiskSpaceError(BuildError):
    """Before a build: the engine's disk has less free than the lock's images need (``engine.space.build_need``).
    Nothing was built or written; ``envkit build --skip-space-check`` goes on anyway."""

    exit_code = 17


class VerificationError(EnvkitError):
    """An image was built but does not match its lock."""

    exit_code = 8


class TrustError(VerificationError):
    """A key cannot be read or made, or a signature or attestation does not verify. Exit 8, as the certification
    gate's refusals: a certificate that does not verify never counts. ``reason`` is the short why ("unsigned",
    "signed by unknown key <fingerprint>", "for another image <digest>", "altered after signing",
    "truncated/malformed envelope", "no trusted key configured", ...)."""

    def __init__(self, message: str, *, reason: str = "", hint: str | None = None, location: Location | None = None):
        super().__init__(message, hint=hint, location=location)
        self.reason = reason or message


class StoreError(EnvkitError):
    """The history store cannot be opened, migrated or written."""

    exit_code = 9


class DispatchError(EnvkitError):
    """The team's scheduler (Slurm, Kubernetes) refused a job or could not be asked."""

    exit_code = 16


class RunInProgressError(StoreError):
    """Another run holds the lock this one needs (e.g. the same team's nightly)."""

    exit_code = 15


class Interrupted(BaseException):
    """A signal stopped the run: SIGINT (Ctrl-C), SIGTERM (a CI job cancelled, a pod stopped) or SIGHUP
    (the terminal closed). A BaseException, like KeyboardInterrupt: no ``except Exception`` (nor one for
    EnvkitError) records it as a build or certification failure, while every ``with`` and ``finally``
    on the way out still runs: the build context and its secrets are deleted, a BuildKit build and a
    certification container are stopped, an atomic write leaves no half-written file, a nightly run
    stays unfinished for the next one to resume. Only ``envkit.cli`` raises it (from its signal handler)."""

    hint = ("envkit stopped what it was running and removed its temporary files; run the same command again "
            "(finished build steps come from the cache, and `envkit nightly` resumes its run)")

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.signal = signal.Signals(self.signum).name
        self.exit_code = 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM
        super().__init__(f"interrupted by {self.signal}")

    def __str__(self) -> str:
        return f"{self.args[0]}\n  hint: {self.hint}"

    def to_json(self) -> dict:
        return {"error": "Interrupted", "signal": self.signal, "message": self.args[0], "hint": self.hint,
                "location": None}
