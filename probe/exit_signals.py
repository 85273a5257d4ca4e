"""The script's signal handlers, set aside while fastmon speaks after the script's code ended.

torch's DataLoader sets a SIGCHLD handler that raises for a worker that died. Python
runs a handler at the next line of Python in the main thread: once the script's own
exception has left it, that line is fastmon's (the traceback it prints, the probe's
last send at exit), which would then show fastmon's frames or lose the last steps.
Python itself prints a traceback in C, where no handler runs."""

from __future__ import annotations

import signal
from contextlib import contextmanager

SET_ASIDE = (signal.SIGCHLD,) if hasattr(signal, "SIGCHLD") else ()


@contextmanager
def script_signals_set_aside():
    """The default action (for SIGCHLD: nothing, children still reaped by whoever waits)
    inside, the script's handlers back afterwards. A signal that came in between, even
    one noted before and not yet handled, is not handed to the script's handler: its
    training has already ended."""
    handlers = {}
    for sig in SET_ASIDE:
        try:
            handlers[sig] = signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):  # not the main thread: nothing to set aside
            pass
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError, TypeError):
                pass
