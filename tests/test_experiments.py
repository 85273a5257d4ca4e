"""The experiment runner on synthetic steps: what a trial claims is what its steps
recorded, a worker count pays for its start-ups, a cheap switch is interleaved and its
verdict survives drift, and the answers of the training are taken as they come."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from fastmon.experiments import (ACK_TIMEOUT_S, ACK_TIMEOUT_STEPS, EXTENSIONS, MIN_MEASURE_SECONDS, PAIRS,
                                 SETTLE_STEPS, ExperimentRunner, LoaderFigures)
from fastmon.common.phases import STEP_FIELDS, StepRow
from fastmon.trial_measure import Schedule, measure
from fastmon.common.verdicts import NOISE


def step_rows(first: int, n: int, samples_per_s: float, samples: int = 32) -> list[StepRow]:
    rows = []
    for step in range(first, first + n):
        row = dict.fromkeys(STEP_FIELDS, 0)
        row.update(step=step, samples=samples, wall=samples / samples_per_s)
        rows.append(StepRow(**row))
    return rows


class Probe:
    """Plays the probe's side: keeps what the runner sends."""

    def __init__(self):
        self.sent = []

    def __call__(self, message):
        self.sent.append(message)


def drive(runner, probe, rates, start=30, back=100.0):
    """Feed ``rates[i]`` samples/s after the i-th apply, ``back`` after a revert; returns
    the result."""
    results = []
    runner.done = results.append
    rows = step_rows(0, start, 100.0)
    seen = applies = 0
    for _ in range(100):
        if results:
            break
        if len(probe.sent) > seen:
            message = probe.sent[seen]
            seen += 1
            step = rows[-1].step + 1
            if message["t"] == "revert":
                runner.on_ack({"t": "reverted", "exp": message["exp"], "ok": True, "step": step})
                rows += step_rows(step, 400, back)
                continue
            rate = rates[min(applies, len(rates) - 1)]
            applies += 1
            if rate is None:
                runner.on_ack({"t": "applied", "exp": message["exp"], "ok": False, "error": "CUDA out of memory"})
                continue
            runner.on_ack({"t": "applied", "exp": message["exp"], "ok": True, "step": step})
            rows += step_rows(step, 400, rate)
        runner.tick(rows)
    assert results, "the experiment did not conclude"
    return results[0]


def advice(search=(), changes_maths=False, action="loader", est_gain=None):
    return {"id": "x", "est_gain": est_gain, "apply": {"action": action, "params": {"n": 1}, "search": search,
                                                        "changes_maths": changes_maths}}


@pytest.fixture
def no_return(monkeypatch):
    """No return to the original before the verdict: the tests of other parts."""
    import fastmon.experiments as experiments

    monkeypatch.setattr(experiments, "DRIFT_PROOF", 0.0)


def record_rate(rows, window: dict) -> float:
    """What the record says of a window: its samples over its wall time, plus the
    start-up it states, over the steps its blocks name."""
    steps = {s for first, last in window["blocks"] for s in range(first, last + 1)}
    counted = [r for r in rows if r.step in steps]
    return sum(r.samples for r in counted) / (sum(r.wall for r in counted) + window["startup_s"])


def test_an_experiment_that_helps_is_kept():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0])
    assert result["kept"] and result["speedup"] == pytest.approx(2.0)
    assert [m["t"] for m in probe.sent] == ["apply"]  # 2x: beyond what drift could make
    # the steps measured, for the chart: the baseline's before the change, then the trial's
    (base_first, base_last), (trial_first, trial_last) = result["windows"]
    assert (base_first, base_last) == (10, 29) and 30 < trial_first <= trial_last
    assert result["holds_from"] == 33  # after the steps that warm the change up


def test_an_experiment_that_hurts_is_reverted():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [80.0])
    assert not result["kept"] and result["state"] == "reverted"
    # -20%: within what a shared machine drifts by: back to the original once, then again
    assert [m["t"] for m in probe.sent] == ["apply", "revert", "apply", "revert"]
    assert result["drift"] == 0 and result["returned"]["samples_per_s"] == pytest.approx(100)


@pytest.mark.parametrize("changes_maths, kept", [(False, True), (True, False)])
def test_no_measurable_change_keeps_only_a_harmless_change(changes_maths, kept):
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(changes_maths=changes_maths), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [97.0])
    assert result["verdict"] == "no measurable change" and result["kept"] is kept
    low, high = result["speedup_interval"]
    assert low < 1 < high


def test_a_search_settles_on_the_fewest_workers_within_noise_of_the_best():
    # 4 workers measured 2.5% faster than 2: noise; 2 again and again is the repeatable answer.
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(search=({"n": 2}, {"n": 4}, {"n": 8})), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, 205.0, 200.0])
    assert result["kept"] and result["params"] == {"n": 2} and result["verdict"] == "faster"
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 2}]
    # measured again once back: the claim pools both windows of 2, and holds from the return
    assert result["after_samples_per_s"] == pytest.approx(200.0, rel=1e-3)
    assert result["holds_from"] == 833


def test_a_search_stops_where_a_doubling_buys_less_than_worth_more():
    # 4 workers 7.5% faster than 2: beyond the 5% noise floor, but not worth twice the
    # workers; on a shared machine that much comes and goes between windows.
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(search=({"n": 2}, {"n": 4}, {"n": 8})), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, 215.0, 200.0, 260.0])
    assert result["kept"] and result["params"] == {"n": 2}
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 2}]


def test_a_search_keeps_the_best_candidate():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    candidates = ({"n": 2}, {"n": 4}, {"n": 8}, {"n": 16})
    runner.start(advice(search=candidates), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, 390.0, 380.0, 390.0])
    assert result["kept"] and result["params"] == {"n": 4}
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 8}, {"n": 4}]


def test_a_search_the_run_ends_says_what_each_candidate_measured_and_which_ran_unmeasured():
    from fastmon.common.verdicts import OPEN, advice_status, kept_faster, result_text, search_text
    from fastmon.permanent import permanent_changes

    probe = Probe()
    runner = ExperimentRunner(probe, None)
    results = []
    runner.done = results.append
    search = ({"num_workers": 2}, {"num_workers": 4}, {"num_workers": 8})
    runner.start({"id": "dataloader.num_workers", "apply": {"action": "loader", "params": search[0], "search": search,
                                                            "changes_maths": False}}, step_rows(0, 30, 100.0))
    rows, rates = step_rows(0, 30, 100.0), {2: 200.0, 4: 390.0}
    while len(probe.sent) < 3:  # 2 and 4 measured; 8 applied when the training ends
        message = probe.sent[-1]
        step = rows[-1].step + 1
        runner.on_ack({"t": "applied", "exp": message["exp"], "ok": True, "step": step})
        rows += step_rows(step, 400, rates[message["params"]["num_workers"]])
        runner.tick(rows)
    runner.on_ack({"t": "applied", "exp": probe.sent[-1]["exp"], "ok": True, "step": rows[-1].step + 1})
    runner.end_of_run()
    (result,) = results
    assert result["state"] == "incomplete" and result["running_at_end"] == {"num_workers": 8}
    assert search_text(result) == ("searched (samples/s against the 100.0 before): num_workers=2 2.00x, "
                                   "num_workers=4 3.90x, num_workers=8 running when the run ended, not measured")
    # the fastest measured is still worth keeping: said with its figure, and its code given
    assert result["params"] == {"num_workers": 4} and result["verdict"] == "faster"
    assert result_text(result).startswith("3.9x samples/s [") and result_text(result).endswith(
        "], the fastest measured; the run ended while num_workers=8 was under trial")
    assert not kept_faster(result) and advice_status(result) == OPEN  # it did not stay: still the advice
    loader = {"id": "train", "role": "train", "location": "train.py:9", "num_workers": 0}
    (change,) = permanent_changes([result], {"loaders": [loader]})
    assert change["code"] == "DataLoader(..., num_workers=4)", change


def test_a_change_the_run_ended_as_it_was_judged_is_no_search_and_no_fix():
    from fastmon.common.verdicts import kept_faster, result_text, running_at_end, search_text
    from fastmon.experiments import Experiment

    # an interleaved switch judged faster, the verdict sent as the training ended
    exp = Experiment(1, "tf32", "tf32", [{"value": "high"}], True, 10, "interleaved", live_params={"value": "high"},
                     change=(1.2, 1.1, 1.3, 0.05), state="incomplete")
    result = exp.result()
    assert result["running_at_end"] is None and search_text(result) == ""
    assert result_text(result) == "+20% samples/s [+10%, +30%], measured; the run ended as it was being applied"
    # a worker count measured faster, the run ended while its drift check ran the original
    returning = dict(result, id="dataloader.num_workers", method="sequential", kept=True)
    assert not kept_faster(returning) and not kept_faster(result)
    # older records: no verdict, kept meant faster; a search's unmeasured candidate is its params
    assert kept_faster({"kept": True, "state": "incomplete"})
    assert running_at_end({"state": "incomplete", "params": {"n": 8}, "tried": [{"params": {"n": 2}}]}) == {"n": 8}
    assert running_at_end({"state": "incomplete", "params": {"value": "high"}, "tried": []}) is None  # no search


def test_a_failed_candidate_leaves_the_one_running_kept_without_a_new_apply():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(search=({"n": 2}, {"n": 4})), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, None])
    assert result["kept"] and result["params"] == {"n": 2}
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}]  # 2 never stopped running
    assert "out of memory" in result["error"]


def test_a_change_that_fails_at_once_is_reported_not_kept():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [None])
    assert not result["kept"] and result["state"] == "failed"


def test_the_verdicts_interval_widens_with_the_windows_spread(no_return):
    def verdict(after_rows):
        results = []
        runner = ExperimentRunner(Probe(), results.append)
        runner.start(advice(), step_rows(0, 40, 100.0))
        runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 40})
        for _ in range(EXTENSIONS + 1):
            runner.tick(step_rows(0, 40, 100.0) + after_rows)
        return results[0]

    # The same 110.8 samples/s on average: steady, or in blocks alternating 80 and 180.
    steady = verdict(step_rows(40, 160, 110.77))
    blocks = [step_rows(40 + 40 * i, 40, 80.0 if i % 2 == 0 else 180.0) for i in range(4)]
    swinging = verdict([row for block in blocks for row in block])
    assert steady["speedup"] == pytest.approx(swinging["speedup"], rel=0.01)
    assert steady["verdict"] == "faster" and swinging["verdict"] == "no measurable change"


def test_a_trial_that_cannot_decide_is_measured_longer_then_called_no_change(no_return):
    # after the change, steps swing between 70 and 160 samples/s every 4 steps, about as
    # fast as before on average: each window's interval straddles 1; the trial grows
    # window by window, then concludes
    results = []
    runner = ExperimentRunner(Probe(), results.append)
    runner.start(advice(), step_rows(0, 40, 100.0))
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 40})
    rows = step_rows(0, 40, 100.0)
    first = 40
    while not results and first < 40_000:
        rate = 70.0 if (first // 4) % 2 == 0 else 160.0
        rows += step_rows(first, 4, rate)
        first += 4
        runner.tick(rows)
    (result,) = results
    assert result["verdict"] == "no measurable change" and result["extensions"] == EXTENSIONS
    window = result["after"]
    assert window["wall_s"] >= MIN_MEASURE_SECONDS * (1 + EXTENSIONS)
    assert result["after_samples_per_s"] == pytest.approx(record_rate(rows, window), rel=1e-4)


def test_a_worker_trial_pays_for_its_start_ups_and_claims_what_its_steps_recorded():
    # 200-step epochs. Without workers: 100 samples/s. With 16: 1,600 samples/s between
    # epoch starts, but each epoch start waits 6 s for them: 200 steps take 4 s + 6 s, i.e.
    # 640 samples/s over an epoch. An epoch begins inside the trial's window (step 300).
    results = []
    runner = ExperimentRunner(Probe(), results.append)
    before = step_rows(0, 100, 100.0)
    runner.start(advice(search=({"num_workers": 16},)), before, LoaderFigures(epoch_steps=200.0))
    # the rebuild at step 100 started them: 6 s (the probe's answer says so), then settled
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 100, "settle": 0, "startup_s": 6.0})
    rows = before + step_rows(100, 300, 1600.0)
    rows[0] = rows[0]._replace(wall=0.32)
    rows[100] = rows[100]._replace(wall=6.02)
    rows[300] = rows[300]._replace(wall=6.02)
    loader = LoaderFigures(((100, 6.0, 16, 1, 0), (300, 6.0, 16, 0, 0)), 200.0, 16)
    runner.tick(rows, loader)
    (result,) = results
    after = result["after"]
    assert 300 not in {s for a, b in after["blocks"] for s in range(a, b + 1)}  # luck left out ...
    assert after["startup_s"] == pytest.approx(6.0 * after["steps"] / 200)  # ... its share put back
    assert result["after_samples_per_s"] == pytest.approx(640, rel=0.01)
    assert result["after_samples_per_s"] == pytest.approx(record_rate(rows, after), rel=1e-4)
    assert result["before_samples_per_s"] == pytest.approx(record_rate(rows, result["before"]), rel=1e-4)


def test_a_trial_waits_for_the_batches_in_flight_before_measuring(no_return):
    # the first 32 batches after the rebuild came from the store of prefetched batches
    results = []
    runner = ExperimentRunner(Probe(), results.append)
    runner.start(advice(), step_rows(0, 30, 100.0))
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 30, "settle": 32})
    rows = step_rows(0, 30, 100.0) + step_rows(30, 32, 10_000.0) + step_rows(62, 100, 110.0)
    runner.tick(rows)
    (result,) = results
    assert result["after"]["blocks"][0][0] >= 62
    assert result["after_samples_per_s"] == pytest.approx(110.0, rel=1e-3)


def test_persistent_workers_are_measured_over_whole_epochs():
    # 40-step epochs of 20 ms steps; each epoch's first step waits 2 s for its workers until
    # they persist. Applied at step 100: the epoch at 120 starts them once more, 160's does not.
    def epochs(first, n, stalls):
        return [row._replace(wall=2.0) if row.step in stalls else row for row in step_rows(first, n, 1600.0)]

    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    before = epochs(0, 100, {0, 40, 80})
    loader = LoaderFigures(((0, 2.0, 2, 0), (40, 2.0, 2, 0), (80, 2.0, 2, 0)), 40.0, 2)
    runner.tick(before, loader)
    exp = runner.start({"id": "dataloader.persistent_workers", "apply": {"action": "loader",
                        "params": {"persistent_workers": True}}}, before, loader, epoch=40)
    runner.on_ack({"t": "applied", "exp": exp.exp, "ok": True, "step": 100})
    rows = before + epochs(100, 60, {120})
    runner.tick(rows, loader)
    assert not results  # the epoch that starts the persistent workers is not the measure
    runner.tick(rows + epochs(160, 40, set()), loader)
    assert not results  # two whole epochs
    runner.tick(rows + epochs(160, 80, set()), loader)
    (result,) = results
    assert result["kept"] and result["method"] == "epochs" and result["verdict"] == "faster"
    # after: the two whole epochs as they ran; before: the same epochs, each start waiting
    # what a restart took before the change (2 s): the machine's drift is in both alike
    assert result["after"]["blocks"] == [[160, 239]]
    assert result["after_samples_per_s"] == pytest.approx(1600, rel=1e-3)
    assert result["before"]["blocks"] == [[161, 199], [201, 239]]
    assert result["before"]["startup_s"] == pytest.approx(2.0 * 78 / 40)
    assert result["before_samples_per_s"] == pytest.approx(78 * 32 / (78 * 0.02 + 2.0 * 78 / 40), rel=1e-3)
    assert result["holds_from"] == 160
    # and the report says the "before" is built, from what
    from fastmon.common.verdicts import measured_text

    assert measured_text(result).startswith(
        "measured over whole epochs: steps 160-239 as they ran (after), and the same steps with their epoch starts "
        "waiting 3.90 s in all, as restarts of the workers took before the change (before)")


# --- interleaved trials -------------------------------------------------------------
def run_interleaved(rate_of, changes_maths=False, steps=20_000, block=None, est_gain=None, seed=7, end_at=None):
    """An interleaved trial where step ``s`` runs at ``rate_of(s, setting)`` samples/s;
    the schedule the runner sends is followed exactly; ``end_at``: the run ends at that
    step. Returns (result, rows, probe)."""
    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append, seed=seed)
    rows = [r._replace(wall=32 / rate_of(r.step, "A")) for r in step_rows(0, 30, 100.0)]
    runner.start(advice(action="anomaly_detection", changes_maths=changes_maths, est_gain=est_gain), rows)
    (command,) = probe.sent
    assert command["t"] == "interleave"
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 30,
                   "interleave": {"first": 30, "block": command["block"], "order": command["order"]}})
    schedule = Schedule(30, command["block"], command["order"], SETTLE_STEPS)
    step = 30
    while not results and step < steps:
        setting = schedule.order[(step - 30) // schedule.block] if step < 30 + len(schedule.order) * schedule.block \
            else "A"
        rows.append(step_rows(step, 1, rate_of(step, setting))[0])
        step += 1
        if step == end_at:
            runner.end_of_run()
            break
        if step % 50 == 0:
            runner.tick(rows)
            if len(probe.sent) > 1 and probe.sent[-1]["t"] == "conclude":
                keep = probe.sent[-1]["keep"]
                probe.concluded_at = step + 1
                runner.on_ack({"t": "applied" if keep else "reverted", "exp": 1, "ok": True, "step": step + 1})
    assert results, "the trial did not conclude"
    return results[0], rows, probe


def test_an_interleaved_trial_sees_the_change_through_drift():
    # the machine slows 3x over the trial (another job starting); the change makes steps
    # 1.5x faster throughout. Before/after windows in sequence would see mostly the drift.
    def rate_of(step, setting):
        return (100.0 / (1 + 2 * min(step, 3000) / 3000)) * (1.5 if setting == "B" else 1.0)

    result, rows, probe = run_interleaved(rate_of)
    assert result["method"] == "interleaved" and result["verdict"] == "faster" and result["kept"]
    assert 1.3 < result["speedup"] < 1.7
    assert result["pairs"] >= PAIRS
    assert result["after_samples_per_s"] == pytest.approx(record_rate(rows, result["after"]), rel=1e-4)
    assert result["before_samples_per_s"] == pytest.approx(record_rate(rows, result["before"]), rel=1e-4)
    assert result["speedup"] == pytest.approx(result["after_samples_per_s"] / result["before_samples_per_s"], rel=1e-3)
    assert probe.sent[-1] == {"t": "conclude", "exp": 1, "keep": True}
    # each pair holds the change once and the original once, the order drawn per pair
    order = probe.sent[0]["order"]
    assert all(order[i:i + 2] in ("AB", "BA") for i in range(0, len(order), 2)) and "AB" in order and "BA" in order
    assert result["holds_from"] == probe.concluded_at + SETTLE_STEPS


def test_an_interleaved_trial_of_no_change_under_noise_extends_then_concludes():
    # a noisy machine (steps at 70-130 samples/s, in stretches), and a change that does nothing
    def rate_of(step, setting):
        return 100.0 + 30.0 * math.sin(step / 17.0)

    result, _, probe = run_interleaved(rate_of, changes_maths=True)
    assert result["verdict"] == "no measurable change" and not result["kept"]  # it changes the maths
    assert probe.sent[-1] == {"t": "conclude", "exp": 1, "keep": False}


def busy_core(seed: int, gain: float, spread: float, stretch: int, jitter: float):
    """3 ms steps on a core another job takes in bursts: each stretch of ``stretch`` steps at
    1 ± ``spread`` of 10,000 samples/s, each step ± ``jitter`` more, times ``gain`` under the
    change."""
    noise = random.Random(seed)
    stretches = [noise.uniform(1 - spread, 1 + spread) for _ in range(20_000 // stretch + 1)]
    steps = [noise.uniform(1 - jitter, 1 + jitter) for _ in range(20_000)]
    return lambda step, setting: 10_000.0 * stretches[step // stretch] * steps[step] * (gain if setting == "B" else 1)


def test_a_change_that_does_nothing_is_kept_as_faster_at_most_once_in_twenty_however_long_it_is_looked_at():
    # issue 56: a trial extends while a promising change (est. 2x) cannot decide; each look
    # is free to stop it, so each is held to 5% / looks (before: 3 of these 20 read faster)
    faster = [seed for seed in range(20) if run_interleaved(busy_core(seed, 1.0, 0.5, 200, 0.4), est_gain=2.0,
                                                            seed=seed)[0]["verdict"] == "faster"]
    assert len(faster) <= 1, faster


def test_a_2x_change_on_a_busy_core_is_measured_until_it_decides():
    # mistakes.py with a core spinning: anomaly detection off (~2x) read "no measurable change
    # (2.1x [0.9x, 3.2x]) — reverted" in 2 of 5 runs: the trial stopped before it decided
    for seed in range(10):
        result, _, _ = run_interleaved(busy_core(100 + seed, 2.0, 0.9, 150, 0.3), changes_maths=True, est_gain=2.0,
                                       seed=seed)
        assert result["verdict"] == "faster" and result["kept"], (seed, result["speedup_interval"], result["pairs"])


def test_a_short_run_s_trial_is_judged_at_each_new_pair_before_it_ends():
    # mistakes.py beside a spinning core: the run ended after 7 pairs of 0.4 s blocks, the
    # trial undecided at 4 and never looked at again (it looked every 4): 1.5x [1.1x, 2.0x]
    # left unjudged. Each of these runs ends 7 pairs (of 125 steps a block) in.
    decided = 0
    for seed in range(20):
        result, _, _ = run_interleaved(busy_core(200 + seed, 1.8, 0.3, 150, 0.3), est_gain=2.0, seed=seed,
                                       end_at=30 + 7 * 2 * 125)
        decided += result["verdict"] == "faster" and result["kept"]
    assert decided == 20, decided  # looked at every 4 pairs: 16 of these 20


def test_an_interleaved_trial_that_hurts_is_undone():
    result, _, probe = run_interleaved(lambda step, setting: 60.0 if setting == "B" else 100.0)
    assert result["verdict"] == "slower" and not result["kept"] and result["state"] == "reverted"


# --- the training's answers, as they come ---------------------------------------------
def started(runner, probe):
    runner.start(advice(), step_rows(0, 30, 100.0))
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 30})
    rows = step_rows(0, 30, 100.0) + step_rows(30, 200, 50.0)
    runner.tick(rows)  # slower: the runner reverts
    assert probe.sent[-1]["t"] == "revert"
    return rows


def test_a_revert_is_given_its_own_time_to_be_answered(monkeypatch):
    # the apply was sent long before the revert: the revert's own sending starts its clock
    import fastmon.experiments as experiments

    now = [1000.0]
    monkeypatch.setattr(experiments.time, "monotonic", lambda: now[0])
    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    runner.start(advice(), step_rows(0, 30, 100.0))
    now[0] += 500  # a long trial
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 30})
    rows = step_rows(0, 30, 100.0) + step_rows(30, 200, 50.0)
    runner.tick(rows)
    assert probe.sent[-1]["t"] == "revert"
    runner.tick(rows + step_rows(230, ACK_TIMEOUT_STEPS + 5, 50.0))
    assert not results  # not "did not answer" one tick after sending it
    now[0] += ACK_TIMEOUT_S + 1
    runner.tick(rows + step_rows(230, ACK_TIMEOUT_STEPS + 5, 50.0))
    (result,) = results
    assert result["state"] == "revert failed" and "did not answer" in result["error"]


def test_no_experiment_starts_while_a_revert_is_unanswered(monkeypatch):
    import fastmon.experiments as experiments

    now = [1000.0]
    monkeypatch.setattr(experiments.time, "monotonic", lambda: now[0])
    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    rows = started(runner, probe)
    now[0] += ACK_TIMEOUT_S + 1
    rows += step_rows(230, ACK_TIMEOUT_STEPS + 5, 50.0)
    runner.tick(rows)
    assert results and runner.active is None
    assert runner.busy and runner.start(advice(), rows) is None  # the next one waits ...
    assert "undoing" in runner.why_busy()
    runner.on_ack({"t": "reverted", "exp": 1, "ok": True, "step": 250})  # ... until the answer comes
    assert not runner.busy


def test_a_late_answer_of_another_rank_does_not_resume_a_reverting_experiment():
    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    rows = started(runner, probe)
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 31})  # rank 1, late
    runner.tick(rows + step_rows(230, 200, 200.0))
    assert runner.active is not None and runner.active.state == "reverting" and not results
    runner.on_ack({"t": "reverted", "exp": 1, "ok": True, "step": 240})
    (result,) = results
    assert result["state"] == "reverted" and not result["kept"]


def test_a_loader_the_script_replaces_is_not_judged():
    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    runner.start(advice(), step_rows(0, 30, 100.0))
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 30})
    runner.tick(step_rows(0, 40, 100.0))
    runner.on_event({"t": "event", "kind": "replaced", "what": "DataLoader", "step": 37, "rank": 0})
    assert probe.sent[-1] == {"t": "revert", "exp": 1}
    runner.on_ack({"t": "reverted", "exp": 1, "ok": True, "step": 41, "note": "the DataLoader it changed is gone"})
    (result,) = results
    assert result["verdict"] == "not judged" and not result["kept"]
    assert "built a new DataLoader at step 37" in result["error"]


def test_a_windows_rate_is_its_samples_over_its_wall_and_stated_start_up():
    rows = step_rows(0, 10, 100.0)
    rows[4] = rows[4]._replace(wall=3.0)
    window = measure(rows, frozenset({4}))
    assert window.blocks == ((0, 3), (5, 9)) and window.steps == 9 and window.startup == 0
    assert window.rate == pytest.approx(100.0)
    assert NOISE > 0


def test_a_new_training_loader_in_the_facts_ends_the_trial_before_its_steps_are_measured():
    # the new loader's fact comes with its first steps, ahead of the probe's event
    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    runner.start(advice(), step_rows(0, 30, 100.0), LoaderFigures(id="L0", began=0))
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 30})
    runner.tick(step_rows(0, 40, 100.0) + step_rows(40, 200, 50.0), LoaderFigures(id="L1", began=40))
    assert probe.sent[-1] == {"t": "revert", "exp": 1}
    runner.on_ack({"t": "reverted", "exp": 1, "ok": True, "step": 241})
    (result,) = results
    assert result["verdict"] == "not judged" and "built a new DataLoader at step 40" in result["error"]


def test_a_start_up_costs_what_its_cold_steps_took_beyond_the_steady_ones():
    # after the epoch start at 300 the 4 batches made meanwhile come from workers still cold:
    # 0.2 s each instead of 0.02; what the epoch start costs is all of that
    results = []
    runner = ExperimentRunner(Probe(), results.append)
    before = step_rows(0, 100, 100.0)
    runner.start(advice(search=({"num_workers": 16},)), before, LoaderFigures(epoch_steps=200.0))
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 100, "settle": 0, "startup_s": 1.0})
    rows = before + step_rows(100, 300, 1600.0)
    rows[100] = rows[100]._replace(wall=1.0)
    rows[300] = rows[300]._replace(wall=1.0)
    for step in range(301, 305):
        rows[step] = rows[step]._replace(wall=0.2)
    loader = LoaderFigures(((100, 1.0, 16, 1, 0), (300, 1.0, 16, 0, 4)), 200.0, 16)
    runner.tick(rows, loader)
    (result,) = results
    after = result["after"]
    assert not {300, 301, 302, 303, 304} & {s for a, b in after["blocks"] for s in range(a, b + 1)}
    # the two start-ups: 1.0 s at the rebuild, 1.0 + 4 x 0.2 - 5 x 0.02 = 1.7 s at the epoch start
    assert after["startup_s"] == pytest.approx(statistics.median([1.0, 1.7]) * after["steps"] / 200, rel=1e-3)
    assert result["after_samples_per_s"] == pytest.approx(record_rate(rows, after), rel=1e-4)


def test_a_modest_change_is_checked_against_the_machines_drift():
    # +30% after the change; back on the original, the machine now runs 25% faster too:
    # what the trial saw was mostly the machine, and the verdict says so
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [130.0, 135.0], back=125.0)
    assert [m["t"] for m in probe.sent] == ["apply", "revert", "apply"]
    assert result["drift"] == pytest.approx(0.25) and result["verdict"] == "no measurable change"
    assert result["before"]["blocks"][0] == [10, 29] and len(result["before"]["blocks"]) == 2  # both, pooled
    assert 100 < result["before_samples_per_s"] < 125
    steady = ExperimentRunner(Probe(), None)
    steady.start(advice(), step_rows(0, 30, 100.0))
    assert drive(steady, steady.send, [130.0, 130.0], back=100.0)["verdict"] == "faster"  # no drift: +30% stands


def test_a_search_whose_last_two_candidates_swap_places_settles_on_the_one_running(no_return):
    # the busy demo: 8 and 16 workers within WORTH_MORE, each re-measure flipping their
    # order; 8, 16, 8, 16 ... were applied until the run ended, nothing concluded
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(search=({"n": 2}, {"n": 4}, {"n": 8})), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, 300.0, 320.0] + [250.0, 280.0] * 20)
    assert result["kept"] and result["params"] == {"n": 4}
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 8}, {"n": 4}]


def test_a_worker_search_ranks_by_steady_rate_where_the_restarts_will_persist():
    # the busy demo: 16 workers cost 1.4 s to start each epoch, 8 cost 0.4 s; 16 run 40%
    # faster between. Ranked with the restarts in, it kept 8 or 16 by chance, and 16 ran
    # 50% faster once persistent workers (tried next) removed the restarts.
    from fastmon.experiments import Experiment
    from fastmon.trial_measure import Measured

    def search(rank_steady):
        exp = Experiment(1, "dataloader.num_workers", "loader", [{"num_workers": 8}, {"num_workers": 16}], False, 0,
                         "sequential", rank_steady=rank_steady)
        exp.trials = [({"num_workers": 8}, Measured(steps=100, samples=3200, wall=1.4, startup=0.4)),
                      ({"num_workers": 16}, Measured(steps=100, samples=3200, wall=1.0, startup=1.4))]
        return exp.best()

    params, claimed = search(rank_steady=True)
    assert params == {"num_workers": 16} and claimed.rate == pytest.approx(3200 / 2.4)  # the claim pays the restarts
    assert search(rank_steady=False)[0] == {"num_workers": 8}
