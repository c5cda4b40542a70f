"""benchmarks/build_breakdown.py: a build's event stream cut into phases (pure bookkeeping, canned events)."""

import pytest

from benchmarks.build_breakdown import Breakdown, _seconds
from envkit.engine.protocol import BuildEvent


def _feed(events: list[tuple[float, str, str]]) -> dict[str, float]:
    b = Breakdown()
    for t, kind, text in events:
        b.feed(t, BuildEvent(kind, text) if kind != "step" else BuildEvent("step", text, 1, 9))
    return b.phases()


def test_uv_timings_are_taken_from_uvs_own_lines_and_the_commit_from_the_classic_builders():
    phases = _feed([
        (0.0, "step", "RUN apt-get update && apt-get install -y python3"),
        (10.0, "log", "Setting up python3"),
        (12.0, "log", "Removing intermediate container 1"),
        (12.5, "step", "COPY requirements/cuda.txt /tmp/envkit/cuda.txt"),
        (13.0, "step", "RUN mkdir -p /tmp/envkit-uv && /tmp/envkit-uv/uv pip install -r /tmp/envkit/cuda.txt"),
        (30.0, "log", "\x1b[91mPrepared 16 packages in 15.50s"),  # classic: stderr in red
        (40.0, "log", "Installed 16 packages in 1.2s"),
        (50.0, "log", "Bytecode compiled 1000 files in 9.0s"),
        (70.0, "log", "Removing intermediate container 2"),
        (71.0, "step", "COPY envkit/ /opt/envkit/"),
        (72.0, "done", "sha256:x"),
    ])
    assert phases["apt"] == 10.5  # to the next step, less its layer's commit
    assert (phases["download"], phases["install"], phases["compile"]) == (15.5, 1.2, 9.0)
    assert phases["commit"] == 2.0 + 20.0  # apt's layer, the install's layer
    # the COPYs, and the install step's own rest (fetching uv, the venv: 38 s of body less uv's 25.7 s)
    assert phases["other"] == pytest.approx(0.5 + (38.0 - 25.7) + 1.0)


def test_pip_is_cut_at_installing_and_buildkit_uses_its_own_step_times_and_export():
    phases = _feed([
        (0.0, "step", "[builder] RUN /opt/venv/bin/pip install -r /tmp/envkit/framework.txt"),
        (40.0, "log", "Installing collected packages: torch"),
        (90.0, "log", "Successfully installed torch"),
        (91.0, "step", "[runtime] COPY --from=builder /opt/venv /opt/venv"),
        (91.5, "log", "[builder 3/3] RUN /opt/venv/bin/pip install -r /tmp/envkit/framework.txt: done in 90.5s"),
        (120.0, "log", "[runtime 1/2] COPY --from=builder /opt/venv /opt/venv: done in 29.0s"),
        (125.0, "log", "exporting layers 4.5s done"),
        (126.0, "done", "sha256:x"),
    ])
    assert phases["download"] == 40.0 and phases["install"] == 50.5 and phases["copy"] == 29.0
    assert phases["commit"] == 4.5


def test_uvs_elapsed_times():
    assert (_seconds("450ms"), _seconds("3.21s"), _seconds("1m 02s")) == (0.45, 3.21, 62.0)


def test_the_classic_builders_cut_lines_are_read_run_together_and_its_image_ids_are_no_output():
    """The classic stream cuts uv's stderr into pieces (``Bytecode compiled 4368 files `` then ``in 27.05s``);
    `` ---> <id>`` after a step is the engine's, not the step's output."""
    phases = _feed([
        (0.0, "step", "RUN mkdir -p /tmp/envkit-uv && /tmp/envkit-uv/uv pip install -r /tmp/envkit/framework.txt"),
        (10.0, "log", "\x1b[91mPrepared 10 packages in 9.5s"),
        (11.0, "log", "\x1b[91mBytecode compiled 4368 files \x1b[0m"),
        (11.0, "log", "\x1b[91min 27.05s"),
        (11.0, "log", "\x1b[0m"),
        (50.0, "log", "Removing intermediate container 1"),
        (50.0, "log", " ---> 2abe22c72182"),
        (51.0, "step", "COPY envkit/ /opt/envkit/"),
        (51.0, "done", "sha256:x"),
    ])
    assert (phases["download"], phases["compile"]) == (9.5, 27.05)
    assert phases["commit"] == 39.0


def test_a_space_the_classic_stream_sends_as_a_piece_of_its_own_is_kept_between_the_words():
    """As run 7's classic build sent uv's line: ``Prepared `` / ``12 packages`` / `` `` / ``in 9.12s``, each piece
    in its own colour codes (the lone space was dropped, and with it the line's timing)."""
    phases = _feed([
        (0.0, "step", "RUN mkdir -p /tmp/envkit-uv && /tmp/envkit-uv/uv pip install -r /tmp/envkit/cuda.txt"),
        *[(13.0, "log", f"\x1b[91m{piece}\x1b[0m") for piece in ("Prepared ", "12 packages", " ", "in 9.12s")],
        (13.0, "log", "\x1b[91m"),
        (13.0, "log", "\x1b[0m"),
        (31.0, "log", "Removing intermediate container 1"),
        (31.0, "step", "COPY envkit/ /opt/envkit/"),
        (31.0, "done", "sha256:x"),
    ])
    assert phases["download"] == 9.12 and phases["commit"] == 18.0
