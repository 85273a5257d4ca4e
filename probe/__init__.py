"""The probe: everything that runs inside the training process.

Hooks and patches that timestamp each step's phase boundaries into the step event log
(``fastmon.step_events``), the publisher that ships it to the monitor, the facts
collector, the hot-apply control side and the torch.profiler capture asked for from the
monitor.

May import: the standard library, torch (lazily, inside ``install``) and fastmon's
shared, dependency-free modules (``phases``, ``wire``, ``step_events``, ``sample_count``).
Never textual, never anything from ``fastmon.tui``; importing this package has no side
effects: patches go in only when :func:`install` is called.
"""

from __future__ import annotations


def install(channel_path: str | None = None):
    """Install the probe into this process and return it (idempotent)."""
    from fastmon.probe.runtime import install as _install

    return _install(channel_path)


def current():
    """The installed probe, or None."""
    from fastmon.probe.runtime import current as _current

    return _current()
