"""The probe: everything that runs inside the training process.

Hooks and patches that timestamp each step's phase boundaries into the step event log
(``fastmon.common.step_events``), the publisher that ships it to the monitor, the facts
collector, the hot-apply control side and the torch.profiler capture asked for from the
monitor.

May import: the standard library, torch (lazily, inside ``install``), the shared
vocabulary ``fastmon.common`` (phases, wire format, step events, sample counts) and the
package ``fastmon`` itself (its folder, to tell fastmon's frames from the script's).
Never textual, nor the monitor's modules (session, records, tui); importing this package
has no side effects: patches go in only when :func:`install` is called.
"""

from __future__ import annotations

import os

import fastmon
import fastmon.common

# Where fastmon's own code lives (the installed package's folders): no frame from these
# is the user's, in a traceback or as an advice's file:line.
FASTMON_FOLDERS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                        for path in (__file__, fastmon.__file__, fastmon.common.__file__))


def install(channel_path: str | None = None):
    """Install the probe into this process and return it (idempotent)."""
    from fastmon.probe.runtime import install as _install

    return _install(channel_path)


def current():
    """The installed probe, or None."""
    from fastmon.probe.runtime import current as _current

    return _current()
