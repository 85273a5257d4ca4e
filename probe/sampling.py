"""Which steps the probe times.

A step that is not timed costs one optimizer hook that records its end. Timing one costs
an episode around it: arming the phase hooks at the end of the step before, the hooks in
the timed step, disarming after it, and the step after running cold. What an episode
costs depends on the run (~170 µs around a sub-ms CPU step in a quiet hour, ~500 µs
around a 4 ms one in a noisy hour: ``benchmarks/overhead.py``), so the schedule measures
it in the run itself, against the plain untimed steps on either side: around timed step
k after timed step p, the step after p against the ``PLAIN_WINDOW`` steps that follow
it, and the arming end of step k-1 with step k against the ``PLAIN_WINDOW`` + 1 steps
before the arming. Near neighbours, because a shared machine's speed drifts over tens
of steps: a mean over the whole gap would take that drift for the probe. The ends of
those windows' edge steps are seen by making them end the long way (``marks``), a few
µs an episode. The running mean of the measures (over about ``EPISODES_AVERAGED``,
starting from ``TIMED_STEP_COST_NS`` counted as ``PRIOR_EPISODES`` measures, so that the
first episode of a short run, a checkpoint in its window, does not set the rate alone) is
the price of a timed step; the mean, not the median: step times are skewed (a log
line's sync every 10 steps, a slowed core), so the median episode falls short of the
mean one, and the mean is what the budget is of. The price is held within
``TIMED_STEP_COST_NS``..``MAX_TIMED_STEP_COST_NS``: the lower bound keeps a noisy
estimate from timing every step (after which nothing is left to measure against), the
upper one keeps a sample in long runs whose steps jitter more than an episode costs.

Steps are then timed so that the episodes cost ``BUDGET_NS`` a step, or ``BUDGET_SHARE``
of the step where that is more (every step from 0.5-3 s a step; on short steps one in 200
to 1000). Each gap between timed steps is drawn uniformly from 1..2N-1 steps (mean N),
so a periodic pattern (workers that deliver in bursts, a log every 10 steps) cannot line
up with a fixed stride. The first ``TIME_ALL_FIRST`` steps are all timed.

The draws come from a private ``random.Random``: the user's random state is never touched.
"""

from __future__ import annotations

import random

TIMED_STEP_COST_NS = 200_000  # the price of a timed step until measured, and its least
MAX_TIMED_STEP_COST_NS = 1_000_000
PLAIN_WINDOW = 8  # untimed steps on each side an episode is measured against
EPISODES_AVERAGED = 128  # the price is the running mean of the measured episodes, over about this many
PRIOR_EPISODES = 4  # what TIMED_STEP_COST_NS weighs in that mean, in episodes
EPISODE_CLIP_NS = 10_000_000  # one episode's measure is held within ±this: a checkpoint in it is not the probe's
BUDGET_NS = 1_000  # per step spent on timing phases, on short steps
BUDGET_SHARE = 0.00025  # of the step time, on long ones
TIME_ALL_FIRST = 50  # steps timed in full at the start: a short run gets its whole breakdown
REPORT_CHANGE = 0.2  # the price or the gap moved by this share: the record hears of it

NO_MARK = 1 << 62


class TimingSchedule:
    def __init__(self, every_step: bool = False) -> None:
        self.every_step = every_step
        self._rng = random.Random()
        self._since: tuple[int, int] | None = None  # (step, perf_counter_ns) at the last timed step's end
        # The untimed steps whose ends measure the coming episode: after the last timed
        # step, after the window that follows it, before the window ahead of the next.
        self.marks: tuple[int, ...] = ()
        self._ends: dict[int, int] = {}  # mark -> its end
        self._arming: tuple[int, int] | None = None  # (step, time) before arming, at the end of an untimed step
        self._episodes = 0  # measured so far
        self._mean_episode_ns = float(TIMED_STEP_COST_NS)  # what the episodes added, their running mean
        self._plain_step_ns = 0.0  # an untimed step, in their windows: their running mean
        self.step_cost_ns = float(TIMED_STEP_COST_NS)  # the price of one timed step (its episode)
        self.every = 1.0  # the mean gap between timed steps
        self._reported: dict | None = None
        self._episodes_reported = 0  # measured when news last looked

    def skip(self, ns: int) -> None:
        """Leave ``ns`` (a suspended stretch, between steps) out of the step times. The
        episode it falls in goes unmeasured: the steps after a resume run cold (every patch
        just put back), and its windows would take that for the plain steps' time."""
        if self._since is not None:
            self._since = (self._since[0], self._since[1] + ns)
        self.marks, self._ends, self._arming = (), {}, None

    @property
    def measured(self) -> int:
        """Episodes measured so far."""
        return self._episodes

    def next_mark(self, step: int) -> int:
        """The first step from ``step`` on whose end the schedule wants to see."""
        return next((mark for mark in self.marks if mark >= step), NO_MARK)

    def untimed_end(self, step: int, end_ns: int) -> None:
        """Untimed step ``step`` ended the long way, at ``end_ns``."""
        if step in self.marks:
            self._ends[step] = end_ns

    def arming(self, step: int, now_ns: int) -> None:
        """Untimed step ``step`` is ending and the next one is timed: before the arming."""
        self._arming = (step, now_ns)

    def gap(self, step: int, now_ns: int) -> int:
        """At the end of timed step ``step``: how many steps on the next timed one is
        (1: the next step is timed too)."""
        since, self._since = self._since, (step, now_ns)
        if since is not None and step > since[0]:
            self._measure(since, step, now_ns)
        self.marks, self._ends = (), {}
        if self.every_step or step + 1 < TIME_ALL_FIRST or since is None or step <= since[0]:
            return 1
        step_ns = self._plain_step_ns if self._episodes else (now_ns - since[1]) / (step - since[0])
        self.every = self.step_cost_ns / max(BUDGET_NS, BUDGET_SHARE * step_ns)
        if self.every < 1.5:
            return 1
        drawn = 1 + int(self._rng.random() * (round(2 * self.every) - 1))
        if drawn >= 2 * PLAIN_WINDOW + 3:  # room for both windows, the episode's steps outside them
            self.marks = (step + 1, step + 1 + PLAIN_WINDOW, step + drawn - 2 - PLAIN_WINDOW)
        return drawn

    def _measure(self, since: tuple[int, int], step: int, now_ns: int) -> None:
        """What the episode around timed step ``step`` added, if its marks were all seen."""
        after_timed, after_window, before_window = self.marks or (None, None, None)
        ends, arming = self._ends, self._arming
        if (since[0] + 1 != after_timed or len(ends) != 3 or before_window != step - 2 - PLAIN_WINDOW
                or arming is None or arming[0] != step - 1):
            return
        plain_after = (ends[after_window] - ends[after_timed]) / PLAIN_WINDOW
        plain_before = (arming[1] - ends[before_window]) / (PLAIN_WINDOW + 1)
        episode_ns = ends[after_timed] - since[1] - plain_after + now_ns - arming[1] - plain_before
        self._episodes += 1
        weight = max(1 / (self._episodes + PRIOR_EPISODES), 1 / EPISODES_AVERAGED)
        episode_ns = min(max(episode_ns, -EPISODE_CLIP_NS), EPISODE_CLIP_NS)
        self._mean_episode_ns += weight * (episode_ns - self._mean_episode_ns)
        step_weight = max(1 / self._episodes, 1 / EPISODES_AVERAGED)
        self._plain_step_ns += step_weight * ((plain_after + plain_before) / 2 - self._plain_step_ns)
        self.step_cost_ns = min(max(self._mean_episode_ns, TIMED_STEP_COST_NS), MAX_TIMED_STEP_COST_NS)

    def news(self, final: bool = False) -> dict | None:
        """What the run's report says of the sample: when it has moved by more than
        ``REPORT_CHANGE`` since last said (a fact per wobble would fill the record), and
        as it stands at the run's end (``final``)."""
        if not self._episodes or (self._episodes == self._episodes_reported and not final):
            return None
        self._episodes_reported = self._episodes
        last = self._reported
        if not final and last is not None and all(abs(now / was - 1) <= REPORT_CHANGE for now, was in (
                (self.step_cost_ns, last["timed_step_us"] * 1e3), (max(self.every, 1.0), last["one_in"]))):
            return None
        self._reported = {"timed_step_us": round(self.step_cost_ns / 1e3, 1), "one_in": round(max(self.every, 1.0), 1),
                          "measured": self._episodes}
        return self._reported
