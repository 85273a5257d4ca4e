"""Where a run stands, as every screen and the record name it."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    STARTING = "starting"  # the training process is starting: no step yet
    RUNNING = "running"
    STOPPING = "stopping"  # asked to stop (the dashboard's quit): the training is ending
    FINISHED = "finished"  # exit code 0
    CRASHED = "crashed"  # any other exit code, or a signal
    ENDED = "ended"  # a replay at a record's end whose exit code was never written
    REPLAY = "replay"  # a replay before the record's end


# A run in these shows its steady run as it is now, and its end screen.
ENDED_STATUSES = (RunStatus.FINISHED, RunStatus.CRASHED, RunStatus.ENDED)
