"""The classic builder's stream read as whole lines: the engine cuts a step's output where it was read."""

from envkit.engine.classic_log import ClassicLog
from envkit.support.progress import InstallCount


def _texts(log: ClassicLog, pieces: list[str]) -> list[str]:
    events = [e for piece in pieces for e in log.events(piece)] + list(log.flush())
    return [e.text for e in events]


def test_a_line_cut_in_pieces_is_one_event():
    log = ClassicLog()
    pieces = ["Step 3/5 : RUN uv pip install\n", " ---> Running in 0123456789ab\n", " + nvidia-cu", "blas-cu12==12.4.5.8",
              "\n", "Prepared", " ", "12 packages\n", "Removing intermediate container 0123456789ab\n", "tail without end"]
    assert _texts(log, pieces) == ["RUN uv pip install", " ---> Running in 0123456789ab", " + nvidia-cublas-cu12==12.4.5.8",
                                   "Prepared 12 packages", "Removing intermediate container 0123456789ab",
                                   "tail without end"]


def test_uv_lines_in_pieces_count_every_package():
    count = InstallCount(total=2)
    log = ClassicLog()
    # (as a fresh engine sent them: its stderr colour codes where each piece starts, mid-line)
    for piece in ["\x1b[0m\x1b[91m + nvidia-cublas-cu12", "\x1b[0m\x1b[91m==12.4.5.8\n + typing-",
                  "\x1b[0m\x1b[91mextensions==4.12.2", "\n"]:
        for event in log.events(piece):
            count.feed(event.text)
    assert count.done == 2
