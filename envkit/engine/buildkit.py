"""BuildKit builds through the docker CLI (``DOCKER_BUILDKIT=1 docker build --progress=plain``).

docker-py speaks only the classic builder's API; BuildKit's session features (build secrets,
cache mounts) need the CLI. Docker 20.10's built-in Dockerfile frontend accepts
``RUN --mount`` without a ``# syntax=`` line (which would pull a frontend image), so the
rendered Dockerfiles have none. The plain progress output is parsed into the same
``BuildEvent`` stream the classic builder yields.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..errors import BuildError
from ..support import procs, scratch
from .protocol import BuildEvent
from .space import engine_out_of_space

if TYPE_CHECKING:
    from .protocol import Engine

DOCKER_CLI = "/usr/bin/docker"  # Debian's 20.10 CLI: BuildKit built in (newer CLIs need the buildx plugin)
MIN_API = (1, 39)  # the engine API that has BuildKit sessions (Docker 18.09)
TAIL = 25  # log lines a BuildError carries
# Docker engines before 26.1 lose a layer's disk space for good when two BuildKit builds at once make the same step
# (moby#46136: the space stays after the images and the build cache are removed; fixed by moby#47523, March 2024, in
# 26.1, the first feature release cut after it; patch releases of older lines that carry its backport are not told
# apart). envkit takes turns on such an engine: one BuildKit build at a time (docs/images.md, "Where Docker 20.10
# loses disk space to BuildKit"). The turn is a lock file in /tmp, not $TMPDIR: every process on this host that
# builds on that engine must find the same file.
SERIAL_BELOW = (26, 1)
TURNS = Path("/tmp")

_VERTEX = re.compile(r"^#(\d+) (.*)$")
_STEP = re.compile(r"^\[(?:(?P<stage>[^\]\s]+) )?(?P<i>\d+)/(?P<n>\d+)\] (?P<text>.*)$")
_OUTPUT = re.compile(r"^\d+\.\d+ (.*)$")
_DONE = re.compile(r"^DONE (\d+(?:\.\d+)?)s$")


class PlainProgress:
    """``--progress=plain`` lines -> ``BuildEvent``s; one instance per build.

    ``#N [stage i/n] RUN ...`` opens step i of n (once per vertex), ``#N 1.23 text`` is a
    command's output, ``#N DONE 1.2s`` / ``#N CACHED`` / ``#N ERROR: ...`` close vertex N.
    """

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.errors: list[str] = []

    def feed(self, line: str) -> list[BuildEvent]:
        line = line.rstrip()
        if not line:
            return []
        m = _VERTEX.match(line)
        if not m:  # the error summary after a failure, or a message from the CLI
            return [BuildEvent("log", line)]
        vertex, rest = m.groups()
        if rest.startswith("sha256:"):
            return []
        name = self.names.get(vertex)
        if name is None:
            self.names[vertex] = rest
            step = _STEP.match(rest)
            if step:
                stage = f"[{step['stage']}] " if step["stage"] else ""
                return [BuildEvent("step", stage + step["text"], int(step["i"]), int(step["n"]))]
            return [BuildEvent("log", rest)]
        if rest == "CACHED":
            return [BuildEvent("log", f"{name}: cached")]
        done = _DONE.match(rest)
        if done:
            return [BuildEvent("log", f"{name}: done in {done.group(1)}s")]
        if rest.startswith("ERROR"):
            message = rest.removeprefix("ERROR").lstrip(": ")
            self.errors.append(f"{name}: {message}")
            return [BuildEvent("error", f"{name}: {message}")]
        out = _OUTPUT.match(rest)
        return [BuildEvent("log", out.group(1) if out else rest)]


class BuildKitBuilder:
    """Builds with BuildKit through ``cli``; ``engine`` (a DockerEngine) answers the API version."""

    def __init__(self, engine: Engine | None=None, cli: str | None = None) -> None:
        self.engine = engine
        self.cli = cli or DOCKER_CLI

    def available(self) -> bool:
        """The CLI exists (with BuildKit built in, or the buildx plugin), the engine's API >= 1.39 and it is not
        Podman (its Docker-compatible API has no BuildKit)."""
        return self.unavailable() is None

    def require(self) -> None:
        """Raise a BuildError saying what is missing and what to install, unless BuildKit can build here."""
        problem = self.unavailable()
        if problem is not None:
            raise BuildError(problem[0], hint=problem[1])

    def unavailable(self) -> tuple[str, str] | None:
        """Why BuildKit cannot build here, as (message, hint); None when it can."""
        classic = "or build with the classic builder (--builder classic)"
        # first: on Podman no docker CLI helps (so none is asked for, and none is run)
        engine = self.engine.version() if self.engine is not None else {}
        if engine.get("engine") == "podman":
            return (f"the engine is Podman {engine.get('version')}, whose Docker-compatible API builds with buildah: "
                    "BuildKit's CLI cannot start a build there",
                    "build with the classic builder (--builder classic; auto picks it on Podman); --reproducible "
                    "gives the environment layers Docker gives (docs/images.md)")
        if not (Path(self.cli).is_file() and os.access(self.cli, os.X_OK)):
            other = shutil.which("docker")
            note = (f" ({other} on PATH is not used: CLIs from Docker 23 on build with BuildKit only through buildx)"
                    if other and Path(other) != Path(self.cli) else "")
            return (f"the BuildKit builder needs the docker CLI at {self.cli}, which is missing here{note}",
                    "install Debian's docker.io (`apt-get install docker.io`: its Docker 20.10 CLI, /usr/bin/docker, "
                    f"has BuildKit built in), {classic}")
        try:
            proc = subprocess.run([self.cli, "version", "--format", "{{json .}}"], capture_output=True,
                                  text=True, timeout=30)
            info = json.loads(proc.stdout or "{}")
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
            return (f"{self.cli} did not answer `version`: {exc}",
                    f"check that {self.cli} runs and reaches the engine (DOCKER_HOST), {classic}")
        client = (info.get("Client") or {}).get("Version") or "0"
        api = engine.get("api") or (info.get("Server") or {}).get("ApiVersion") or "0"
        if _version(api) < MIN_API:
            return (f"the engine's API is {api}; BuildKit needs {'.'.join(map(str, MIN_API))} or newer",
                    f"upgrade the engine (Docker >= 18.09), {classic}")
        # from Docker 23 on, `docker build` needs the buildx plugin for BuildKit
        if _version(client) >= (23,) and subprocess.run([self.cli, "buildx", "version"],
                                                          capture_output=True).returncode != 0:
            return (f"{self.cli} is Docker {client}, whose `docker build` uses BuildKit only through the buildx "
                    "plugin, which is not installed",
                    f"install the buildx plugin (docker-buildx), or put Debian's docker.io 20.10 CLI at {self.cli}, "
                    f"{classic}")
        return None

    def command(self, context: Path, tag: str, labels: dict[str, str], *, secrets: dict[str, Path] | None = None,
                dockerfile: str | None = None, network: bool = True, no_cache: bool = False,
                iidfile: Path | None = None, target: str | None = None,
                build_args: dict[str, str] | None = None) -> list[str]:
        cmd = [self.cli, "build", "--progress=plain", "-t", tag]
        for key, value in labels.items():
            cmd += ["--label", f"{key}={value}"]
        for key, value in (build_args or {}).items():
            cmd += ["--build-arg", f"{key}={value}"]
        for sid, src in (secrets or {}).items():
            if "," in str(src) or "," in sid or "=" in sid:
                raise BuildError(f"cannot pass secret {sid!r} from {src}: the CLI's --secret value is comma-separated",
                                 hint="move the file to a path without commas")
            cmd += ["--secret", f"id={sid},src={Path(src).resolve()}"]
        if dockerfile:
            cmd += ["-f", str(Path(context) / dockerfile)]
        if not network:
            cmd.append("--network=none")
        if no_cache:
            cmd.append("--no-cache")
        if iidfile is not None:
            cmd += ["--iidfile", str(iidfile)]
        if target is not None:
            cmd += ["--target", target]
        return cmd + [str(context)]

    def build(self, context: Path, tag: str, labels: dict[str, str], *, secrets: dict[str, Path] | None = None,
              dockerfile: str | None = None, network: bool = True, no_cache: bool = False,
              target: str | None = None, build_args: dict[str, str] | None = None) -> Iterator[BuildEvent]:
        """Build ``context`` as ``tag``, yielding progress; raises BuildError (with the log's tail) on failure."""
        with scratch.directory("buildkit") as tmp, self._turn() as turn:
            yield from turn
            iidfile = Path(tmp) / "iid"
            cmd = self.command(context, tag, labels, secrets=secrets, dockerfile=dockerfile, network=network,
                               no_cache=no_cache, iidfile=iidfile, target=target, build_args=build_args)
            env = dict(os.environ, DOCKER_BUILDKIT="1")
            parser, tail = PlainProgress(), deque[str](maxlen=TAIL)
            try:
                proc = procs.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,  # SIGKILLed:
                                   errors="replace", env=env)  # the CLI still gets SIGTERM and cancels the build
            except OSError as exc:
                raise BuildError(f"cannot run {self.cli}: {exc}", hint="install Docker's CLI (docker.io)") from None
            try:
                for line in proc.stdout or ():
                    tail.append(line.rstrip())
                    yield from parser.feed(line)
                code = proc.wait()
            finally:
                if proc.poll() is None:  # the consumer stopped early: stop the build too
                    proc.terminate()
                    proc.wait()
            if code != 0:
                reason = parser.errors[-1] if parser.errors else (next((t for t in reversed(tail) if t), "") or
                                                                   f"exit code {code}")
                error = BuildError(f"building {tag} with BuildKit failed: {reason}",
                                   hint="last output:\n    " + "\n    ".join(tail))
                raise engine_out_of_space(error, self.engine) if self.engine is not None else error
            image_id = iidfile.read_text().strip() if iidfile.is_file() else tag
        yield BuildEvent("done", image_id)

    def turn_file(self) -> Path | None:
        """The lock file BuildKit builds on this engine take turns on; None where they need not (a Docker engine
        from 26.1 on, Podman, no engine to ask). Named by the engine the CLI builds on: ``DOCKER_HOST`` and the
        engine's data root."""
        if self.engine is None:
            return None
        v = self.engine.version()
        if v.get("engine") != "docker" or _version(v.get("version") or "0") >= SERIAL_BELOW:
            return None
        where = f"{os.environ.get('DOCKER_HOST') or 'unix:///var/run/docker.sock'} {self.engine.data_root()}"
        return TURNS / f"envkit-buildkit-{hashlib.sha256(where.encode()).hexdigest()[:16]}.lock"

    @contextmanager
    def _turn(self) -> Iterator[Iterator[BuildEvent]]:
        """This engine's BuildKit turn (``turn_file``), held until the body ends. Yields the taking of it, for the
        body to run first: it says so when another build holds the turn, then waits for it. The kernel drops the
        turn with the process; a filesystem without ``flock`` builds without it."""
        path = self.turn_file()
        if path is None:
            yield iter(())
            return
        try:  # read-only: flock needs no write access, so any user may wait on root's file; no symlink followed
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise BuildError(f"cannot open {path}, the lock file BuildKit builds on this engine take turns on: "
                             f"{exc.strerror}", hint=f"remove {path} if it is not a plain file this user may "
                                                     "read (envkit makes it again)") from None

        def take() -> Iterator[BuildEvent]:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield BuildEvent("log", "waiting for another BuildKit build on this engine to finish (on Docker "
                                        "before 26.1 two at once leak disk space: moby#46136)")
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise

        try:
            yield take()
        finally:
            os.close(fd)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in str(text).split("."):
        digits = re.match(r"\d+", piece)
        if not digits:
            break
        parts.append(int(digits.group()))
    return tuple(parts)
