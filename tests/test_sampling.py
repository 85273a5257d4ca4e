"""Which steps the probe times (fastmon.probe.sampling): a pure schedule, tested alone."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from fastmon.probe.sampling import (BUDGET_NS, MAX_TIMED_STEP_COST_NS, TIME_ALL_FIRST, TIMED_STEP_COST_NS,
                                    TimingSchedule)

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


def run(schedule: TimingSchedule, steps: int, step_ns, *, cold_ns=0, arm_ns=0, timed_ns=0, jitter=0.0,
        first=0, suspend_every=0, resume_cold_ns=0) -> list[int]:
    """Drive the schedule as the probe does, on steps ``first`` .. ``first + steps`` of
    ``step_ns(step)`` (± ``jitter``) whose timing adds ``timed_ns`` to the timed step,
    ``arm_ns`` to the one before and ``cold_ns`` to the one after; with ``suspend_every``, the
    probe is suspended for a second before every so many steps (an A/B), which adds
    ``resume_cold_ns`` to each of the five steps after. Returns the timed steps."""
    noise = random.Random(1)
    now, next_timed, timed = first * 1_000_000, first, []  # 1 ms a step so far: ahead of an earlier run's clock
    for step in range(first, first + steps):
        if suspend_every and step % suspend_every == 0:
            schedule.skip(1_000_000_000)
        wall = step_ns(step) * (1 + jitter * noise.uniform(-1, 1))
        if suspend_every and step % suspend_every < 5:
            wall += resume_cold_ns
        if step == next_timed:
            now += wall + timed_ns
            timed.append(step)
            next_timed = step + schedule.gap(step, now)
            continue
        now += wall + (cold_ns if timed and step == timed[-1] + 1 else 0)
        if step == next_timed - 1:
            schedule.arming(step, now)
            now += arm_ns
        elif step == timed[-1] + 1 or schedule.next_mark(step) == step:  # the steps that end the long way
            schedule.untimed_end(step, now)
    return timed


def test_the_price_of_a_timed_step_is_measured_in_the_run():
    schedule = TimingSchedule()
    timed = run(schedule, 100_000, lambda step: 400 * US, cold_ns=100 * US, arm_ns=60 * US, timed_ns=160 * US,
                jitter=0.1)
    assert schedule.step_cost_ns == pytest.approx(320 * US, rel=0.1)
    later = [b - a for a, b in zip(timed[TIME_ALL_FIRST:], timed[TIME_ALL_FIRST + 1:])][20:]  # once measured
    assert statistics.mean(later) == pytest.approx(320, rel=0.15)  # 320 µs a timed step / 1 µs a step
    said = schedule.news()
    assert said == {"timed_step_us": pytest.approx(320, rel=0.1), "one_in": pytest.approx(320, rel=0.1),
                    "measured": said["measured"]}
    assert said["measured"] > 200  # episodes: one timed step in ~320 of 100,000, most with room for their windows
    assert schedule.news() is None  # said once, until it moves, or the run ends:
    assert schedule.news(final=True) == said


def test_an_episode_with_a_suspension_in_it_is_not_measured():
    # an A/B suspends the probe every ~30 steps; the steps after each resume run cold (the
    # patches just put back): taken for plain steps, they would price a timed step at nothing
    schedule = TimingSchedule()
    timed = run(schedule, 20_000, lambda step: 400 * US, timed_ns=320 * US)
    priced, measured = schedule.step_cost_ns, schedule.measured
    assert priced == pytest.approx(320 * US, rel=0.1)
    run(schedule, 50_000, lambda step: 400 * US, timed_ns=320 * US, first=timed[-1] + 1, suspend_every=30,
        resume_cold_ns=200 * US)
    # the rare episode that fits between two switches is still measured, as it should be
    assert schedule.step_cost_ns == pytest.approx(priced, rel=0.05)
    assert schedule.measured - measured < 20  # of ~150 episodes


def test_a_drifting_step_time_is_not_taken_for_the_probes_cost():
    # a shared core's speed wanders by ±30% over a few hundred steps: the near windows follow it
    schedule = TimingSchedule()
    run(schedule, 100_000, lambda step: 3000 * US * (1 + 0.3 * math.sin(step / 50)), cold_ns=150 * US,
        arm_ns=150 * US, timed_ns=300 * US)
    assert schedule.step_cost_ns == pytest.approx(600 * US, rel=0.15)


def test_one_wild_first_measure_does_not_set_the_rate():
    # the first measured episode has a 2 ms stall (a checkpoint) in the step after its timed
    # step: the price moves towards it, not all the way, and later episodes bring it back
    schedule = TimingSchedule()
    first_said = []

    def step_ns(step):
        said = schedule.news()
        if said and not first_said:
            first_said.append(said)
        stall = not first_said and schedule.marks and step == schedule.marks[0]
        return 400 * US + (2000 * US if stall else 0)

    run(schedule, 50_000, step_ns, timed_ns=300 * US)
    (first,) = first_said
    assert first["measured"] == 1
    assert first["timed_step_us"] == pytest.approx((4 * 200 + 2300) / 5, rel=0.05)  # alone: 2300
    assert schedule.step_cost_ns == pytest.approx(300 * US, rel=0.2)


def test_the_measured_price_is_held_within_its_bounds():
    cheap, dear = TimingSchedule(), TimingSchedule()
    run(cheap, 20_000, lambda step: 400 * US, timed_ns=20 * US)
    run(dear, 20_000, lambda step: 400 * US, timed_ns=5000 * US)
    assert cheap.step_cost_ns == TIMED_STEP_COST_NS and dear.step_cost_ns == MAX_TIMED_STEP_COST_NS


def test_skewed_step_times_do_not_hide_the_cost():
    # one step in twenty half as slow again (a log line's sync, a slowed core): the median
    # episode would read ~200 µs short of the mean one, which is what the budget is of
    slow = random.Random(2)
    schedule = TimingSchedule()
    run(schedule, 300_000, lambda step: 4000 * US * (1.5 if slow.random() < 0.05 else 1), cold_ns=200 * US,
        arm_ns=100 * US, timed_ns=300 * US)
    assert schedule.step_cost_ns == pytest.approx(600 * US, rel=0.3)


def test_one_gradient_norm_sample_the_scheduler_paused_does_not_end_the_spike_watch(monkeypatch):
    # 0.1 ms steps, 30 µs samples; the one at step 100 waited 1 ms for a core: the next came
    # at step 4100, after a 2000-step run, and its blow-up at step 160 was never seen
    from types import SimpleNamespace

    import fastmon.probe.code_checks as code_checks

    clock = {"now": 0}
    monkeypatch.setattr(code_checks, "perf_counter_ns", lambda: clock["now"])
    part = code_checks.CodeChecksPart(SimpleNamespace(clock=SimpleNamespace(step=0)))
    sampled = []
    for step, cost in ((50, 5_000_000), (100, 1_000_000)):  # warming up; then paused
        clock["now"] = step * 100_000 + cost
        part._plan_next_norm(step, step * 100_000)
        sampled.append(step)
    while part.next_norm_step < 2000:
        step = part.next_norm_step
        clock["now"] = step * 100_000 + 30_000
        part._plan_next_norm(step, step * 100_000)
        sampled.append(step)
    assert any(160 < step <= 400 for step in sampled), sampled
    # the spacing settles where the samples' own cost puts it: 30 µs at 250 ns a step
    assert sampled[-1] - sampled[-2] == 120, sampled
    for _ in range(8):  # the gradients grew (a backbone unfrozen): 300 µs a sample from now on
        step = part.next_norm_step
        clock["now"] = step * 100_000 + 300_000
        part._plan_next_norm(step, step * 100_000)
    assert part.norm_every == 1200
