"""fastmon: a live training monitor and tuning advisor for PyTorch, in the terminal.

This package holds the command line and the monitor-side session: it spawns the
training process, owns the channel, records the run, feeds the advisor and the screen.
Importing it has no side effects and imports neither torch nor textual; the probe
(``fastmon.probe``), the advisor (``fastmon.advisor``) and the dashboard
(``fastmon.tui``) live in their own top-level folders, mapped here by pyproject.toml.
"""

__version__ = "0.1.0"


def attach(apply: str = "never", allow=(), runs_dir: str = "fastmon-runs", status: bool = True, log_to=(),
           tokens_per_sample: int | None = None) -> str | None:
    """Watch this process (and, under torchrun, every rank of this node) as ``fastmon run``
    would, from the top of a script fastmon did not start: see docs/attach.md. Returns the
    run folder; a second call, or one under ``fastmon run``, does nothing."""
    from fastmon.attaching import attach as attach_here

    return attach_here(apply=apply, allow=allow, runs_dir=runs_dir, status=status, log_to=log_to,
                       tokens_per_sample=tokens_per_sample)
