"""Where a build's time goes: a timeline of one build's events, cut into phases.

Fed ``(seconds since the build started, BuildEvent)`` pairs from either builder, it sums:

apt       the RUN steps that call apt-get (OS packages)
download  pip: an install RUN from its start to "Installing collected packages"; uv: its own "Prepared N
          packages in T" (parallel download and unzip into its cache)
install   pip: from that line to the RUN's last output (unpack, bytecode); uv: "Installed N packages in T"
          (link or copy from its cache into the venv)
compile   uv: "Bytecode compiled N files in T" (pip compiles while it installs: in "install")
commit    classic: from a RUN's last output to the engine's "Removing intermediate container" (the layer's
          diff and commit); BuildKit: its "exporting layers" at the end (every layer's diff)
copy      COPY --from steps (the finished venv copied between stages)
other     the rest (context upload, FROM, ENV, LABEL, small COPYs)

Pure bookkeeping on the event stream, used by benchmarks/build_times.py; times are when each line reached
this process, so a phase is as exact as the engine's output is prompt (BuildKit's plain progress flushes
output about every 100 ms).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envkit.engine.protocol import BuildEvent

PHASES = ("apt", "download", "install", "compile", "commit", "copy", "other")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# (the classic builder's stream cuts uv's lines into pieces: they are matched in the step's text run together)
_UV = re.compile(r"(Prepared|Installed|Bytecode compiled) \d+ \w+ in ((?:\d+m )?\d+(?:\.\d+)?m?s)")
_UV_PHASE = {"Prepared": "download", "Installed": "install", "Bytecode compiled": "compile"}
_DOWNLOADED = re.compile(r"Installing collected packages|^Prepared \d+ packages?")
_EXPORT = re.compile(r"exporting layers (\d+(?:\.\d+)?)s done")
_REMOVED = re.compile(r"Removing intermediate container")
_DONE = re.compile(r"^(?:\[[^\]]*\] )?(.*): (?:done in (\d+(?:\.\d+)?)s|cached)$")
_INSTALLER = re.compile(r"\bpip (install|download)\b|\buv\b|envkit-install")


@dataclass
class _Step:
    text: str
    start: float
    last_output: float
    marked: float | None = None  # the installer's "downloaded" mark
    committed: float | None = None  # classic: the intermediate container removed (layer committed)
    done: float | None = None  # BuildKit: the vertex's own "DONE" seconds (stages may run side by side)
    uv: dict[str, float] = field(default_factory=dict)  # uv's own timings, by phase
    output: str = ""  # the step's output run together, from the last uv timing on


@dataclass
class Breakdown:
    steps: list[_Step] = field(default_factory=list)
    end: float = 0.0
    exported: float = 0.0  # BuildKit's "exporting layers" seconds

    def feed(self, t: float, event: BuildEvent) -> None:
        self.end = t
        if event.kind == "step":
            self.steps.append(_Step(event.text, t, t))
            return
        if event.kind != "log" or not self.steps:
            return
        piece = _ANSI.sub("", event.text)
        text = piece.strip()
        if not text:  # the classic builder's colour reset after a step's stderr, which comes after the commit (no
            # output of the step), or a space it sent as a piece of its own between two of a line's words
            self.steps[-1].output = (self.steps[-1].output + piece)[-400:]
            return
        if (m := _EXPORT.search(text)) is not None:
            self.exported += float(m.group(1))
            return
        if (d := _DONE.match(text)) is not None:
            for step in reversed(self.steps):
                if _bare(step.text) == d.group(1) and step.done is None:
                    step.done = float(d.group(2) or 0.0)
                    break
            return
        step = self.steps[-1]
        if _DOWNLOADED.search(text) or _UV.search(text):  # BuildKit: the install step under way, the last started
            step = next((s for s in reversed(self.steps) if _INSTALLER.search(s.text) and s.done is None), step)
        if _REMOVED.search(text):
            step.committed = t
        elif not text.startswith("---> "):
            step.last_output = t
            step.output = (step.output + piece)[-400:]
            for uv in list(_UV.finditer(step.output)):
                phase = _UV_PHASE[uv.group(1)]
                step.uv[phase] = step.uv.get(phase, 0.0) + _seconds(uv.group(2))
            if (last := list(_UV.finditer(step.output))):
                step.output = step.output[last[-1].end():]
            if step.marked is None and _DOWNLOADED.search(text):
                step.marked = t

    def phases(self) -> dict[str, float]:
        out = dict.fromkeys(PHASES, 0.0)
        for i, step in enumerate(self.steps):
            end = self.steps[i + 1].start if i + 1 < len(self.steps) else self.end
            total = step.done if step.done is not None else max(end - step.start, 0.0)
            text = _bare(step.text)
            ran = (step.committed or end) if step.committed and step.committed <= end else end
            commit = max(ran - step.last_output, 0.0) if text.startswith("RUN") and step.committed else 0.0
            body = total - commit
            if step.done is not None and step.marked is not None:
                step.marked = min(step.marked, step.start + step.done)
            if text.startswith("RUN") and "apt-get" in text:
                out["apt"] += body
            elif text.startswith("RUN") and step.uv:
                for phase, seconds in step.uv.items():
                    out[phase] += seconds
                out["other"] += max(body - sum(step.uv.values()), 0.0)
            elif text.startswith("RUN") and _INSTALLER.search(text):
                mark = step.marked if step.marked is not None else step.last_output
                out["download"] += max(mark - step.start, 0.0)
                out["install"] += max(body - max(mark - step.start, 0.0), 0.0)
            elif text.startswith("COPY --from"):
                out["copy"] += body
            else:
                out["other"] += body
            out["commit"] += commit
        out["commit"] += self.exported  # BuildKit: every layer's diff, at export (no step of its own)
        out["other"] += max(self.end - sum(out.values()), 0.0) if any(s.done is not None for s in self.steps) else 0.0
        return out


def _seconds(text: str) -> float:
    """uv's elapsed time: ``450ms``, ``3.21s``, ``1m 02s``."""
    minutes, _, rest = text.rpartition("m ") if "m " in text else ("0", "", text)
    return int(minutes or 0) * 60 + (float(rest[:-2]) / 1000 if rest.endswith("ms") else float(rest[:-1]))


def _bare(text: str) -> str:
    """A step's instruction without its ``[stage]`` / ``[stage i/n]`` prefix."""
    return text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text
