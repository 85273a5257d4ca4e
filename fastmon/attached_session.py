"""The session of a job fastmon did not start (``fastmon.attach()``): the same record,
advice and live changes as ``fastmon run``'s, with no process of its own to spawn, no
output to pipe, and no exit code to see."""

from __future__ import annotations

import sys
import time

import psutil

from fastmon.common.run_status import RunStatus
from fastmon.session import Session

ROOT_POLL_S = 0.25  # how soon the monitor sees the job's root process end
OUTPUT_NOT_CAPTURED = ("fastmon.attach(): the script's output went to its own terminal, not through fastmon "
                       "(a pipe would change isatty for progress bars)")


class UncapturedOutput:
    """Where fastmon's own lines go under attach: the job's stderr, as it was at attach."""

    passthrough = True

    def say(self, lines: list[str]) -> None:
        try:
            sys.stderr.write("".join(line + "\n" for line in lines))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def wait_after_exit(self) -> None:
        pass

    def closed_by_trainer(self, stream: str) -> None:
        pass

    def close(self) -> dict:
        return {"captured": False, "why": OUTPUT_NOT_CAPTURED}


class AttachedSession(Session):
    def __init__(self, options, root_pid: int, launcher: bool, status: bool = True) -> None:
        super().__init__(options, passthrough=status)
        self.output = UncapturedOutput()
        self.root_pid, self.launcher = root_pid, launcher
        if not launcher:
            self.trainer_pids.add(root_pid)

    def command(self) -> list[str]:
        return [self.options.python, *self.options.target]

    def start(self) -> None:
        self._open_record()
        self.recorder.meta("attached", {"root_pid": self.root_pid, "launcher": self.launcher})
        self._begin(None)

    def wait(self) -> int | None:
        """Until the job's root process ends; then the record is closed."""
        try:
            root = psutil.Process(self.root_pid)
            while root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
                time.sleep(ROOT_POLL_S)
        except psutil.Error:
            pass
        self.trainer_exit = time.time()
        with self._finish_lock:
            if self._state.ended is None:
                self.finish(0)
        return None

    def _end_command(self, code: int) -> None:
        """No exit code is seen (fastmon is not the job's parent): a rank that never said
        goodbye (killed) makes the run crashed."""
        self.experiments.end_of_run()
        state = self._state
        state.exit_code = None
        silent = sorted(set(state.ranks) - set(self.steps_made))
        state.status = RunStatus.CRASHED if silent else RunStatus.FINISHED
        state.ended = time.time()
        self.recorder.meta("attached", {"root_pid": self.root_pid, "launcher": self.launcher,
                                        "end": "crashed" if silent else "finished", "silent_ranks": silent})

    def apply_how(self) -> str:
        return ('this job called fastmon.attach() with apply="never" (its default): attach(apply="ask") lets a '
                'watch apply, attach(apply="auto") lets fastmon try the safe changes itself')
