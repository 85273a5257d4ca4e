"""fastmon: a live training monitor and tuning advisor for PyTorch, in the terminal.

This package holds the command line and the monitor-side session: it spawns the
training process, owns the channel, records the run, feeds the advisor and the screen.
Importing it has no side effects and imports neither torch nor textual; the probe
(``fastmon.probe``), the advisor (``fastmon.advisor``) and the dashboard
(``fastmon.tui``) live in their own top-level folders, mapped here by pyproject.toml.
"""

__version__ = "0.1.0"
