"""Which steps the probe times (fastmon.probe.sampling): a pure schedule, tested alone."""

from __future__ import annotations

import random
import statistics

import pytest

from fastmon.probe.sampling import BUDGET_NS, TIME_ALL_FIRST, TIMED_STEP_COST_NS, TimingSchedule

US = 1_000


def gaps(schedule: TimingSchedule, step_ns: int, count: int = 2000) -> list[int]:
    """The gaps the schedule draws on a run of steps of ``step_ns`` each, after the first
    ``TIME_ALL_FIRST`` steps (all timed)."""
    for step in range(TIME_ALL_FIRST - 1):
        assert schedule.gap(step, step * step_ns) == 1
    out, step = [], TIME_ALL_FIRST - 1
    while len(out) < count:
        out.append(schedule.gap(step, step * step_ns))
        step += out[-1]
    return out


def test_short_steps_are_timed_one_in_cost_over_budget_at_random():
    # 20k draws from 1..399: each end is missed with odds of e^-50, so the bounds are exact
    drawn = gaps(TimingSchedule(), 400 * US, 20_000)
    expected = TIMED_STEP_COST_NS / BUDGET_NS
    assert statistics.mean(drawn) == pytest.approx(expected, rel=0.1)
    assert min(drawn) == 1 and max(drawn) == round(2 * expected) - 1
    assert len(set(drawn)) > expected  # spread out: no fixed stride to alias with a periodic pattern


def test_long_steps_and_every_step_mode_time_every_step():
    assert set(gaps(TimingSchedule(), 1_000_000 * US, 50)) == {1}
    assert set(gaps(TimingSchedule(every_step=True), 400 * US, 50)) == {1}


def test_a_suspended_stretch_does_not_count_as_step_time():
    schedule = TimingSchedule()
    start = TIME_ALL_FIRST * 400 * US
    schedule.gap(TIME_ALL_FIRST, start)
    schedule.skip(10_000_000_000)  # 10 s suspended
    assert schedule.gap(TIME_ALL_FIRST + 10, start + 10_000_000_000 + 10 * 400 * US) > 1  # still 0.4 ms steps


def test_the_users_random_state_is_untouched():
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    gaps(TimingSchedule(), 400 * US, 100)
    assert [random.random() for _ in range(3)] == expected
