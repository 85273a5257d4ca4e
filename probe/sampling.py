"""Which steps the probe times.

Timing a step's phases costs the same tens of µs of Python in hooks whatever the step's
length (``TIMED_STEP_COST_NS``: ``benchmarks/overhead.py`` measures it); a step that is
not timed costs one optimizer hook that records its end. So every step is timed where
that is cheap next to the step, and on short steps a random subset: the probe's timing
cost is held to ``BUDGET_NS`` a step, or ``BUDGET_SHARE`` of the step where that is more
(every step is timed from about 500 ms a step; below 4 ms a step, one in about 200). Each gap
between timed steps is drawn uniformly from 1..2N-1 steps (mean N), so a periodic pattern
(workers that deliver in bursts, a log every 10 steps) cannot line up with a fixed stride.
The first ``TIME_ALL_FIRST`` steps are all timed.

The draws come from a private ``random.Random``: the user's random state is never touched.
"""

from __future__ import annotations

import random

TIMED_STEP_COST_NS = 200_000  # what timing one step among untimed ones adds: benchmarks/overhead.py, 2-core VM
BUDGET_NS = 1_000  # per step spent on timing phases, on short steps
BUDGET_SHARE = 0.00025  # of the step time, on long ones
TIME_ALL_FIRST = 50  # steps timed in full at the start: a short run gets its whole breakdown


class TimingSchedule:
    def __init__(self, every_step: bool = False) -> None:
        self.every_step = every_step
        self._rng = random.Random()
        self._since: tuple[int, int] | None = None  # (step, perf_counter_ns) at the last timed step's end

    def skip(self, ns: int) -> None:
        """Leave ``ns`` (a suspended stretch) out of the step times."""
        if self._since is not None:
            self._since = (self._since[0], self._since[1] + ns)

    def gap(self, step: int, now_ns: int) -> int:
        """At the end of timed step ``step``: how many steps on the next timed one is
        (1: the next step is timed too)."""
        since, self._since = self._since, (step, now_ns)
        if self.every_step or step + 1 < TIME_ALL_FIRST or since is None or step <= since[0]:
            return 1
        mean_ns = (now_ns - since[1]) / (step - since[0])
        every = TIMED_STEP_COST_NS / max(BUDGET_NS, BUDGET_SHARE * mean_ns)
        if every < 1.5:
            return 1
        return 1 + int(self._rng.random() * (round(2 * every) - 1))
