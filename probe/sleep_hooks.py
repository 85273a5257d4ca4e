"""``time.sleep`` on the training thread, timed as ``other``: a step that sleeps is waiting
for nothing fastmon can name (a pause, a rate limit, polling), not for its data. Without
this, a loop without a DataLoader had its sleep taken for the time spent building its next
batch (``data_wait``). A sleep inside a phase (a dataset's stand-in for a slow disk, in
``data_wait``) stays that phase's: the monitor's assembly sees it nested. Wrapped for the
whole run; timed only in timed steps."""

from __future__ import annotations

import threading
import time
from time import perf_counter_ns

from fastmon.common.phases import OTHER
from fastmon.common.step_events import ENTER, LEAVE
from fastmon.probe.compiling import is_compiling
from fastmon.probe.guard import Part


class SleepPart(Part):
    name = "sleep"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.original = time.sleep
        self.main_thread = threading.main_thread().ident

    def install(self) -> None:
        part, original, clock = self, self.original, self.probe.clock

        def sleep(seconds):
            if is_compiling() or not part.on or not clock.timing or threading.get_ident() != part.main_thread:
                return original(seconds)
            clock.put((ENTER + OTHER, perf_counter_ns()))
            try:
                return original(seconds)
            finally:
                clock.put((LEAVE, perf_counter_ns()))

        sleep.__wrapped__ = original
        sleep.__doc__ = original.__doc__
        time.sleep = sleep

    def uninstall(self) -> None:
        time.sleep = self.original
