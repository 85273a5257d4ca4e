"""Hot-apply as an experiment: apply at a step boundary, measure samples/s over a window
before and after, keep what helped beyond noise, revert what hurt or failed. A search
(num_workers 2, 4, 8, ...) goes on while each candidate beats the best so far, then
settles on the fewest within noise of the fastest. Persistent workers are measured over
whole epochs (from the second epoch start after the change). The verdict's interval
comes from the spread of each window's blocks (at least ±NOISE): "faster", "slower" or
"no measurable change", which keeps a safe change (harmless) and reverts one that alters
the maths (AMP, TF32). Steps that waited for workers to start at an epoch's start are
left out of every other change's windows. README "How advice is judged" has the why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastmon.verdicts import FASTER, NO_CHANGE, NOISE, ExperimentState, judge, rate_error, speed_interval

BLOCKS = 4  # a window's blocks, whose spread gives the interval
BASELINE_STEPS = 20
MEASURE_STEPS = 16
MIN_MEASURE_SECONDS = 0.75
WARMUP_STEPS = 3
ACK_TIMEOUT_S = 120.0


APPLYING, MEASURING, FINALIZING, REVERTING, KEPT, REVERTED, REVERT_FAILED, FAILED, INCOMPLETE = ExperimentState


def throughput(rows) -> float:
    """samples/s over consecutive rows: all samples over all time. No step is left out as
    an outlier: workers deliver batches in bursts, so slow steps are part of the rate."""
    wall = sum(r.wall for r in rows)
    return sum(r.samples for r in rows) / wall if wall > 0 else 0.0


def relative_error(rows) -> float:
    """The standard error of a window's throughput, relative to it, from its blocks' rates."""
    return rate_error([r.wall for r in rows], [r.samples for r in rows], BLOCKS)


def enough(rows, span: int) -> bool:
    return len(rows) >= span and sum(r.wall for r in rows) >= MIN_MEASURE_SECONDS


@dataclass
class Experiment:
    exp: int
    advice_id: str
    action: str
    candidates: list
    changes_maths: bool
    warmup: object  # callable(previous params or None for the run's own settings) -> steps to skip
    started_step: int
    epoch: tuple[int, int] | None = None  # (steps in an epoch, a step at which one began)
    baseline: float = 0.0
    baseline_error: float = 0.0  # relative_error of the baseline window
    trials: list = field(default_factory=list)  # [(params, samples_per_s, relative error)]
    windows: list = field(default_factory=list)  # the steps measured: the baseline's, then each trial's (first, last)
    state: ExperimentState = APPLYING
    index: int = 0
    measure_from: int | None = None
    live_params: dict | None = None  # what the probe runs now, None while the original
    final_params: dict | None = None
    kept: bool | None = None
    error: str | None = None
    note: str | None = None
    sent_at: float = field(default_factory=time.monotonic)
    skip: int = WARMUP_STEPS

    def measured(self, rows, startups) -> list:
        """``rows`` that measure the change: a change measured over whole epochs keeps
        their start-ups; any other leaves out the steps that waited for workers to start."""
        if self.epoch or not startups:
            return rows
        return [r for r in rows if r.step not in startups]

    @property
    def current(self) -> dict:
        return self.candidates[self.index]

    def best(self) -> tuple:
        """The trial to settle on: of those within noise of the fastest, the first tried
        (in a worker search, the fewest workers): the same answer run after run."""
        if not self.trials:
            return None, 0.0, 0.0
        fastest = max(rate for _, rate, _ in self.trials)
        return next(t for t in self.trials if t[1] >= fastest * (1 - NOISE))

    def interval(self) -> tuple[float, float, float] | None:
        """The settled trial's speed-up over the baseline, and its ~95% interval."""
        _, after, error = self.best()
        if not self.trials or not self.baseline:
            return None
        # Over whole epochs the blocks differ by design (one holds the epoch's start): that
        # spread is the thing measured, not noise.
        return speed_interval(after / self.baseline, () if self.epoch else (error, self.baseline_error))

    def verdict(self) -> str:
        return judge(self.interval())

    def result(self) -> dict:
        params, after, _ = self.best()
        measured = self.interval()
        return {"exp": self.exp, "id": self.advice_id, "action": self.action, "step": self.started_step,
                "params": self.final_params or params or self.live_params or self.candidates[0],
                "tried": [{"params": p, "samples_per_s": round(s, 2)} for p, s, _ in self.trials],
                "before_samples_per_s": round(self.baseline, 2),
                "after_samples_per_s": round(after, 2) if self.trials else None,
                "speedup": round(measured[0], 3) if measured else None,
                "speedup_interval": [round(measured[1], 3), round(measured[2], 3)] if measured else None,
                "verdict": self.verdict(), "kept": bool(self.kept), "state": self.state, "error": self.error,
                "windows": [list(w) for w in self.windows],
                "note": self.note}


class ExperimentRunner:
    """Drives one experiment at a time. ``send(message)`` reaches the probe(s);
    ``done(result)`` is called when an experiment concludes. Acks, ticks and starts all
    come from the session's state owner (fastmon.state_owner): one thread, one at a time."""

    def __init__(self, send, done) -> None:
        self.send = send
        self.done = done
        self.active: Experiment | None = None
        self._next_exp = 1

    @property
    def busy(self) -> bool:
        return self.active is not None

    def start(self, advice: dict, rows: list, warmup=lambda previous: WARMUP_STEPS,
              epoch: tuple[int, int] | None = None, startups=frozenset()) -> Experiment | None:
        """``epoch``: (steps in an epoch, the step at which the current one began), for a
        change that takes effect at the next epoch: not before an epoch's worth of steps
        is there to compare with. ``startups``: the steps that waited for DataLoader
        workers to start. None if it cannot start now."""
        apply = advice.get("apply") or {}
        candidates = list(apply.get("search") or ()) or [apply.get("params", {})]
        if self.active is not None or not rows:
            return None
        exp = Experiment(self._next_exp, advice["id"], apply["action"], candidates,
                         bool(apply.get("changes_maths")), warmup, rows[-1].step + 1, epoch)
        baseline_rows = exp.measured(rows, startups)[-max(BASELINE_STEPS, epoch[0] if epoch else 0):]
        if not baseline_rows or epoch and len(baseline_rows) < epoch[0]:
            return None
        self._next_exp += 1
        exp.baseline, exp.baseline_error = throughput(baseline_rows), relative_error(baseline_rows)
        exp.windows.append((baseline_rows[0].step, baseline_rows[-1].step))
        self.active = exp
        self._apply(exp, exp.current)
        return exp

    def progress(self, rows) -> dict | None:
        """Where the change under way stands, for the screens: ``rows``, rank 0's latest
        steps (a deque or list, oldest first)."""
        exp = self.active
        if exp is None:
            return None
        measured = []
        if exp.measure_from is not None:
            for row in reversed(rows):
                if row.step < exp.measure_from:
                    break
                measured.append(row)
        return {"id": exp.advice_id, "params": exp.current, "candidate": exp.index + 1,
                "candidates": len(exp.candidates), "state": exp.state, "baseline": exp.baseline,
                "steps": len(measured), "needed": exp.epoch[0] if exp.epoch else MEASURE_STEPS,
                "now": throughput(measured) if measured else None, "from_step": exp.started_step,
                "windows": [*exp.windows, *([(measured[-1].step, measured[0].step)] if measured else [])]}

    def _apply(self, exp: Experiment, params: dict) -> None:
        exp.sent_at = time.monotonic()
        exp.measure_from = None
        exp.skip = exp.warmup(exp.live_params)
        exp.live_params = params
        self.send({"t": "apply", "exp": exp.exp, "action": exp.action, "params": params})

    def on_ack(self, message: dict) -> None:
        exp = self.active
        if exp is None or message.get("exp") != exp.exp:
            return
        if message.get("t") == "applied" and message.get("params") not in (None, exp.live_params):
            return  # another rank's answer to an earlier candidate of this search
        if message.get("t") == "reverted":
            exp.state = REVERTED if message.get("ok") else REVERT_FAILED
            self._conclude(exp)
            return
        if not message.get("ok"):
            exp.error = message.get("error") or "failed"
            if exp.trials:  # a later candidate failed (e.g. OOM): settle on the best one so far
                self._settle(exp)
            else:
                exp.kept, exp.state = False, FAILED
                # Under DDP another rank may have applied it: undo there too.
                self.send({"t": "revert", "exp": exp.exp})
                self._conclude(exp)
            return
        exp.note = message.get("note") or exp.note
        step = int(message.get("step", 0))
        exp.measure_from = step + exp.skip
        if exp.epoch:
            # The first epoch to begin after the change starts the workers; the next one
            # shows what keeping them saves. (An epoch beginning at the very step applied
            # may have started its workers before: one epoch more is waited then.)
            length, began = exp.epoch
            exp.measure_from = began + length * ((step - began) // length + 2)
        exp.state = FINALIZING if exp.state == FINALIZING else MEASURING

    def tick(self, rows: list, startups=frozenset()) -> None:
        """``rows``: recent step rows (one rank), oldest first; ``startups``: the steps
        that waited for DataLoader workers to start."""
        exp = self.active
        if exp is None:
            return
        if exp.measure_from is None:
            if time.monotonic() - exp.sent_at > ACK_TIMEOUT_S:
                exp.kept, exp.state, exp.error = False, FAILED, "the training process did not answer"
                self._conclude(exp)
            return
        window = [r for r in exp.measured(rows, startups) if r.step >= exp.measure_from]
        if not enough(window, exp.epoch[0] if exp.epoch else MEASURE_STEPS):
            return
        measured = throughput(window)
        if exp.state == FINALIZING:
            self._conclude(exp)
            return
        exp.trials.append((exp.current, measured, relative_error(window)))
        exp.windows.append((window[0].step, window[-1].step))
        best_before = max((s for _, s, _ in exp.trials[:-1]), default=exp.baseline)
        improved = measured > best_before * (1 + NOISE)
        if improved and exp.index + 1 < len(exp.candidates):
            exp.index += 1
            self._apply(exp, exp.current)
            return
        self._settle(exp)

    def end_of_run(self) -> None:
        """The training has ended: conclude the experiment under way, as far as it got.
        Whatever was applied stayed in effect until the end: that is what "kept" says."""
        exp = self.active
        if exp is None:
            return
        applied = exp.measure_from is not None or bool(exp.trials)
        exp.state, exp.kept = INCOMPLETE, applied and exp.state != REVERTING
        exp.error = "the run ended before the measurement finished"
        self.active = None
        self.done(exp.result())

    def _settle(self, exp: Experiment) -> None:
        params = exp.best()[0]
        verdict = exp.verdict()
        keep = verdict == FASTER or (verdict == NO_CHANGE and not exp.changes_maths)
        if not keep:
            exp.kept, exp.state = False, REVERTING
            exp.measure_from = None
            self.send({"t": "revert", "exp": exp.exp})
            return
        exp.kept, exp.final_params = True, params
        if params is not exp.current or exp.error:
            exp.state = FINALIZING
            self._apply(exp, params)
            return
        exp.state = KEPT
        self._conclude(exp)

    def _conclude(self, exp: Experiment) -> None:
        if exp.state == FINALIZING:
            exp.state = KEPT
        self.active = None
        self.done(exp.result())
