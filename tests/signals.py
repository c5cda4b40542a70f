"""How the tests start a process that they then interrupt."""

import signal


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a process a test sends SIGINT or SIGHUP to: it starts with both signals' default actions,
    as one started at a terminal does. A suite run under nohup hands SIGHUP on ignored, one started in the
    background by a script (`make test &`) SIGINT, and an ignored signal stays ignored (Python then never raises
    KeyboardInterrupt, as envkit keeps it), so a Ctrl-C test would wait on a process that never saw its Ctrl-C."""
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
