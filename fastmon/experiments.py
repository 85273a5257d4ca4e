"""Hot-apply as an experiment: a change applied live, measured, and kept only as far as
the measurement says. Three ways of measuring, by what the change costs to switch:

- interleaved: a change switched in microseconds (anomaly detection, set_to_none, TF32,
  cudnn.benchmark, AMP, foreach) runs in blocks alternating with the original, in a
  random order per pair, judged on the pairs' differences: drift of the machine cancels;
- sequential: a DataLoader change (workers, pin_memory, a batch size) rebuilds the
  loader, so it is measured after the baseline, once the pipeline has settled, with each
  setting's own measured worker start-up accounted per step; a worker count is searched;
- over whole epochs: persistent workers, whose gain is at epoch starts.

A trial that cannot decide is extended by up to ``EXTENSIONS`` windows (an interleaved
trial the advice expects much of, ``PROMISING``: ``PROMISING_EXTENSIONS``, its interval
widened for each look), then concluded "no measurable change". docs/live-trials.md "How a
live change is measured" has the why of each.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field

from fastmon.trial_measure import (Measured, Schedule, StartupCost, measure, paired, paired_change, pooled,
                                   speed_change)
from fastmon.common.verdicts import (FASTER, NO_CHANGE, NOISE, NOT_JUDGED, NOT_MEASURED, ExperimentState, judge,
                                     keeps)

BASELINE_STEPS = 20
BASELINE_SECONDS = 1.0
MEASURE_STEPS = 16
MIN_MEASURE_SECONDS = 1.0
WARMUP_STEPS = 3
EXTENSIONS = 3  # more windows for a trial whose interval straddles 1 ...
PROMISING = 1.3  # ... or, for an interleaved trial whose advice estimated this much or more,
PROMISING_EXTENSIONS = 9  # this many (40 pairs in all, within MAX_TRIAL_SECONDS)
MAX_TRIAL_SECONDS = 60.0  # ... within this much of the training's time
# The training answers a command at its next step's end: no answer after this long and
# this many steps means it will not come.
ACK_TIMEOUT_S = 10.0
ACK_TIMEOUT_STEPS = 10
# interleaved trials
INTERLEAVED = frozenset({"anomaly_detection", "set_to_none", "cudnn_benchmark", "matmul_precision", "autocast",
                         "optimizer_foreach", "num_threads"})
BLOCK_SECONDS = 0.4  # a block's length: longer than the ~100 ms stretches a shared core slows for
MIN_BLOCK_STEPS = 8
MAX_BLOCK_STEPS = 2000
SETTLE_STEPS = 2  # not counted after each switch
PAIRS = 4  # a window of an interleaved trial
LOADER_ACTIONS = frozenset({"loader", "batch_size"})
EPOCHS_MEASURED = 2  # a change measured over whole epochs: this many after it
FIRST_MEASURED = 2  # ... from the epoch after next: the next one starts the workers
# A DataLoader change measured in sequence goes back to the original for a window before its
# verdict, unless its interval already lies beyond this factor either way: a shared machine
# drifts 20-40% over minutes, which cannot flip a larger change.
DRIFT_PROOF = 1.5
WORTH_MORE = 0.10  # a search's next setting (twice the workers) must buy this much

(APPLYING, MEASURING, FINALIZING, REVERTING, RETURNING, KEPT, REVERTED, REVERT_FAILED, FAILED, INCOMPLETE,
 NOT_JUDGED_STATE) = ExperimentState


def last_epoch_measured(current: int) -> int:
    """The last epoch (counted from 1) a whole-epoch trial begun in epoch ``current``
    reads: the next epoch starts the workers, the EPOCHS_MEASURED after it are measured."""
    return current + FIRST_MEASURED + EPOCHS_MEASURED - 1


def worth_more(larger: float, smaller: float) -> bool:
    """A search's larger setting is worth taking over a smaller one: its rate faster by
    WORTH_MORE at least. Sequential windows on a shared machine differ by several percent,
    and a loader window's interval (its worker start-ups in it) is too wide to tell 4
    workers from 8: a margin on the rate is what gives one answer run after run."""
    return larger > smaller * (1 + WORTH_MORE)


def aftermath(startup) -> range:
    """The steps a worker start-up slows: the one that waited for the first batch, then
    those of the batches made meanwhile (the old workers' in flight, the new ones' first
    store), whose workers run cold (fresh processes: page faults, first calls)."""
    settle = startup[4] if len(startup) > 4 else 0
    return range(startup[0], startup[0] + 1 + settle)


@dataclass(frozen=True)
class LoaderFigures:
    """What the training loader's record tells a trial (``fastmon.session``): each worker
    start-up as (step, seconds, workers, rebuilt, settle), an epoch's steps, the loader's
    settings."""

    startups: tuple = ()
    epoch_steps: float = 0.0
    num_workers: int = 0
    persistent: bool = False
    id: str | None = None  # the probe's name for it: L0, L1, ...
    began: int | None = None  # the step its latest epoch began

    @property
    def startup_steps(self) -> frozenset:
        """The steps worker start-ups slowed: left out of a window (whether a start falls
        in one is luck), their cost put back in proportion (``cost``)."""
        return frozenset(step for startup in self.startups for step in aftermath(startup))

    def cost(self, num_workers: int, walls: dict, steady: float, more=()) -> StartupCost | None:
        """What each epoch start costs with ``num_workers`` workers: of each of their
        start-ups (``more``: those the trials' answers told of), the time its steps took
        beyond ``steady`` seconds a step, where the rows are at hand (``walls``: step ->
        wall); else its wait for the first batch. The median of them."""
        if self.persistent or not num_workers or not self.epoch_steps:
            return None
        costs = []
        known = {startup[0]: startup for startup in (*more, *self.startups)}  # the record's, where both tell one
        for startup in known.values():
            if len(startup) > 2 and startup[2] == num_workers:
                steps = aftermath(startup)
                taken = [walls[s] for s in steps if s in walls]
                costs.append(max(startup[1], sum(taken) - steady * len(taken)) if len(taken) == len(steps)
                             else startup[1])
        return StartupCost(statistics.median(costs), self.epoch_steps) if costs else None

    def restarts(self, num_workers: int) -> list[float]:
        """The seconds each epoch start waited for ``num_workers`` workers to start again
        (rebuilds' start-ups where no epoch start is known)."""
        at_epochs = [s[1] for s in self.startups if (len(s) < 3 or s[2] == num_workers) and (len(s) < 4 or not s[3])]
        return at_epochs or [s[1] for s in self.startups if len(s) > 2 and s[2] == num_workers]

    def epoch_began(self) -> int | None:
        """The step at which the current epoch began: the last start-up at an epoch start."""
        starts = [s[0] for s in self.startups if len(s) < 4 or not s[3]]
        return starts[-1] if starts else None


@dataclass
class Experiment:
    exp: int
    advice_id: str
    action: str
    candidates: list
    changes_maths: bool
    started_step: int
    method: str  # interleaved, sequential, epochs
    original_workers: int = 0
    epoch: int | None = None  # steps in an epoch, for a change measured over whole epochs
    restarts: list = field(default_factory=list)  # seconds each epoch start waited for its workers, before
    baseline: Measured = field(default_factory=Measured)
    trials: list = field(default_factory=list)  # [(params, Measured)], in the order measured
    state: ExperimentState = APPLYING
    index: int = 0
    measure_from: int | None = None
    measure_until: int | None = None  # the last step of a whole-epoch window
    live_params: dict | None = None  # what was last sent to the probe, None while the original
    running: dict | None = None  # what the probe said it runs now, None while the original
    final_window: int | None = None  # the index in trials of the window measured after re-applying
    final_params: dict | None = None
    kept: bool | None = None
    error: str | None = None
    note: str | None = None
    sent_at: float = field(default_factory=time.monotonic)
    sent_step: int = 0
    extensions: int = 0
    startups: list = field(default_factory=list)  # the trials' start-ups, from their answers (as LoaderFigures')
    schedule: Schedule | None = None
    after: Measured | None = None  # the settled trial's window (an interleaved trial's: its B blocks)
    change: tuple | None = None  # (ratio, low, high, the noise's own half-width)
    holds_from: int | None = None  # the first step of the run as the kept change leaves it: what its claim is of
    pairs: int = 0
    looks: int = 0  # an interleaved trial's judgements so far (each one free to stop it)
    judged_pairs: int = 0  # ... and the pairs it had at the last
    began_at: float = field(default_factory=time.monotonic)
    not_judged: bool = False  # the script replaced what the change was made to
    logs: list = field(default_factory=list)  # an interleaved trial's pairs: log(rate with / without)
    returned: Measured | None = None  # the original again, measured after the trials (a drift check)
    return_for: dict | None = None  # the settled candidate, applied again after the return
    drift: float = 0.0  # how far the original's rate moved between the baseline and the return
    loader_id: str | None = None  # the training loader a DataLoader change was made to
    predicted: float | None = None  # the advice's estimate as the trial began (its first candidate's)
    # A worker search on a loader that starts its workers each epoch, which persistent
    # workers (a change of their own, tried next) remove: its candidates are ranked by their
    # steady rate. With the restarts in, 16 workers' (0.7-1.4 s an epoch on a busy 2-core
    # machine) made the demo keep 8 or 16 by chance, and 16 ran 50% faster once persistent.
    # Its claim still counts the restarts: what the run gets until they persist.
    rank_steady: bool = False

    @property
    def current(self) -> dict:
        return self.candidates[self.index]

    def workers(self, params: dict | None) -> int:
        return int((params or {}).get("num_workers", self.original_workers))

    def best(self) -> tuple[dict | None, Measured | None]:
        """The trial to settle on: the first tried (in a worker search, the fewest
        workers) that the fastest does not beat by WORTH_MORE beyond noise: the same answer
        run after run where a larger setting buys little. All the windows measured of its
        setting, pooled."""
        tried = []  # each setting once, in the order first tried
        for params, _ in self.trials:
            if params not in tried:
                tried.append(params)
        if not tried:
            return None, None
        merged = [(params, self.measured(params)) for params in tried]
        fastest = max((w for _, w in merged), key=self.ranking_rate)
        return next((p, w) for p, w in merged if not worth_more(self.ranking_rate(fastest), self.ranking_rate(w)))

    def ranking_rate(self, window: Measured) -> float:
        """The rate a search ranks ``window`` by (see ``rank_steady``)."""
        if self.rank_steady:
            return window.samples / window.wall if window.wall > 0 else 0.0
        return window.rate

    def measured(self, params: dict) -> Measured:
        """All the windows measured of ``params``, pooled."""
        return pooled([w for p, w in self.trials if p == params])

    def running_at_end(self) -> dict | None:
        """The candidate a search was trying, not yet measured, when the run ended."""
        if self.state != INCOMPLETE or self.method != "sequential" or not self.trials \
                or self.live_params in [p for p, _ in self.trials]:
            return None
        return self.live_params

    def verdict(self) -> str:
        if self.not_judged:
            return NOT_JUDGED
        return judge(self.change[:3]) if self.change else NOT_MEASURED

    def windows(self) -> list:
        """Every run of steps measured, for the chart: the baseline's, then the trials'."""
        blocks = list(self.baseline.blocks) + [b for _, w in self.trials for b in w.blocks]
        if self.method == "interleaved" and self.after is not None:
            blocks += list(self.after.blocks)
        return [list(b) for b in blocks]

    def result(self) -> dict:
        after = self.after
        change = self.change
        return {"exp": self.exp, "id": self.advice_id, "action": self.action, "step": self.started_step,
                "method": self.method,
                "params": self.final_params or self.live_params or self.candidates[0],
                "tried": [{"params": p, "samples_per_s": round(w.rate, 2), "window": w.to_dict()}
                          for p, w in self.trials],
                "before": self.baseline.to_dict(), "after": after.to_dict() if after else None,
                "before_samples_per_s": round(self.baseline.rate, 2),
                "after_samples_per_s": round(after.rate, 2) if after and after.steps else None,
                "speedup": round(change[0], 3) if change else None,
                "speedup_interval": [round(change[1], 3), round(change[2], 3)] if change else None,
                "predicted": self.predicted, "pairs": self.pairs or None, "extensions": self.extensions,
                "returned": self.returned.to_dict() if self.returned else None, "drift": round(self.drift, 4),
                "verdict": self.verdict(), "kept": bool(self.kept), "state": self.state, "error": self.error,
                "holds_from": self.holds_from if self.kept else None, "running_at_end": self.running_at_end(),
                "windows": self.windows(), "note": self.note}


class ExperimentRunner:
    """Drives one experiment at a time. ``send(message)`` reaches the probe(s);
    ``done(result)`` is called when an experiment concludes. Acks, ticks, events and
    starts all come from the session's state owner (fastmon.state_owner): one thread."""

    def __init__(self, send, done, seed: int | None = None) -> None:
        self.send = send
        self.done = done
        self.active: Experiment | None = None
        self._next_exp = 1
        self._random = random.Random(seed)
        self.latest_step = -1
        # Where the run has been as it is now since: a new baseline starts here.
        self.settled_from = 0
        self.unanswered: set[int] = set()  # experiments whose revert the training has not answered
        self.loader = LoaderFigures()  # the training loader's, as of the last tick

    @property
    def busy(self) -> bool:
        return self.active is not None or bool(self.unanswered)

    def why_busy(self) -> str:
        if self.active is not None:
            return "another change is being measured; try again when it is done"
        return "the training has not answered the undoing of the last change yet"

    # --- start ------------------------------------------------------------------------
    def start(self, advice: dict, rows: list, loader: LoaderFigures = LoaderFigures(),
              epoch: int | None = None) -> Experiment | None:
        """``rows``: rank 0's measured steps; ``loader``: the training loader's figures;
        ``epoch``: steps in an epoch, for a change that shows only at epoch starts (not
        before an epoch's worth of steps is there to compare with). None if it cannot
        start now."""
        apply = advice.get("apply") or {}
        candidates = list(apply.get("search") or ()) or [apply.get("params", {})]
        if self.busy or not rows:
            return None
        action = apply["action"]
        method = "epochs" if epoch else "interleaved" if action in INTERLEAVED else "sequential"
        exp = Experiment(self._next_exp, advice["id"], action, candidates, bool(apply.get("changes_maths")),
                         rows[-1].step + 1, method, original_workers=loader.num_workers, epoch=epoch,
                         loader_id=loader.id if action in LOADER_ACTIONS else None,
                         predicted=advice.get("est_gain"),
                         rank_steady=(len(candidates) > 1 and not loader.persistent
                                      and all("num_workers" in c for c in candidates)))
        steady = [r for r in rows if r.step >= self.settled_from]
        if method == "epochs":
            exp.restarts = loader.restarts(loader.num_workers)
            if not exp.restarts:
                return None
        elif method == "sequential":
            left_out = loader.startup_steps
            counted = [r for r in steady if r.step not in left_out]
            baseline_rows = take_last(counted, BASELINE_STEPS, BASELINE_SECONDS)
            if len(baseline_rows) < BASELINE_STEPS:
                return None
            exp.baseline = measured_with_startups(baseline_rows, rows, loader, loader.num_workers)
        elif len(steady) < BASELINE_STEPS:
            return None
        self._next_exp += 1
        self.active = exp
        if method == "interleaved":
            self._interleave(exp, steady)
        else:
            self._apply(exp, exp.current)
        return exp

    def _interleave(self, exp: Experiment, rows: list) -> None:
        step_s = statistics.median(r.wall for r in rows[-BASELINE_STEPS:])
        block = min(MAX_BLOCK_STEPS, max(MIN_BLOCK_STEPS, round(BLOCK_SECONDS / max(step_s, 1e-9))))
        pair_s = 2 * block * step_s
        most = PAIRS * (1 + self._extensions_for(exp))
        pairs = max(PAIRS, min(most, int(MAX_TRIAL_SECONDS / pair_s) if pair_s > 0 else most))
        order = "".join(self._random.choice(("AB", "BA")) for _ in range(pairs))
        exp.live_params = exp.current
        self._send(exp, {"t": "interleave", "exp": exp.exp, "action": exp.action, "params": exp.current,
                         "order": order, "block": block})

    @staticmethod
    def _extensions_for(exp: Experiment) -> int:
        """How many more windows an undecided interleaved trial may take: more where the
        advice expected much, or could not say (its estimate withheld on a busy machine,
        whose waiting threads inflate the shares it reads)."""
        return PROMISING_EXTENSIONS if exp.predicted is None or exp.predicted >= PROMISING else EXTENSIONS

    def _apply(self, exp: Experiment, params: dict) -> None:
        exp.measure_from = exp.measure_until = None
        exp.live_params = params
        if exp.state != FINALIZING:
            exp.state = APPLYING
        self._send(exp, {"t": "apply", "exp": exp.exp, "action": exp.action, "params": params})

    def _send(self, exp: Experiment, message: dict) -> None:
        exp.sent_at, exp.sent_step = time.monotonic(), self.latest_step
        self.send(message)

    # --- the screens ------------------------------------------------------------------
    def progress(self, rows) -> dict | None:
        """Where the change under way stands, for the screens: ``rows``, rank 0's latest
        steps (a deque or list, oldest first)."""
        exp = self.active
        if exp is None:
            return None
        base = {"id": exp.advice_id, "params": exp.current, "candidate": exp.index + 1, "method": exp.method,
                "candidates": len(exp.candidates), "state": exp.state, "from_step": exp.started_step}
        if exp.method == "interleaved":
            done = self._interleaved_so_far(exp, rows)
            before, after, logs = done if done else (Measured(), Measured(), [])
            return {**base, "baseline": before.rate, "now": after.rate or None, "steps": len(logs),
                    "needed": PAIRS * (1 + exp.extensions), "unit": "pairs",
                    "windows": [list(b) for b in (*before.blocks, *after.blocks)]}
        window = self._window(exp, rows, self.loader) if exp.measure_from is not None else None
        return {**base, "baseline": exp.baseline.rate, "now": window.rate if window and window.steps else None,
                "steps": window.steps if window else 0, "unit": "steps",
                "needed": exp.epoch * EPOCHS_MEASURED if exp.method == "epochs" else MEASURE_STEPS,
                "windows": exp.windows() + ([list(b) for b in window.blocks] if window else [])}

    # --- the training's answers -------------------------------------------------------
    def on_ack(self, message: dict) -> None:
        exp_id = message.get("exp")
        if message.get("t") == "reverted":
            self.unanswered.discard(exp_id)
            self.settled_from = max(self.settled_from, settled_after(message))
        exp = self.active
        if exp is None or exp_id != exp.exp:
            return
        if message.get("t") == "reverted":
            if exp.state == RETURNING and message.get("ok"):  # the original again: measured as a baseline
                exp.running = None
                exp.measure_from = settled_after(message)
                return
            if exp.state in (REVERTING, RETURNING):
                if exp.not_judged:
                    exp.state = NOT_JUDGED_STATE
                elif message.get("ok"):
                    exp.state = REVERTED
                else:
                    exp.state, exp.error = REVERT_FAILED, message.get("error") or "the undo failed"
                self._conclude(exp)
            return
        if exp.state not in (APPLYING, FINALIZING) or (exp.method != "interleaved" and (
                message.get("params") not in (None, exp.live_params))):
            return  # another rank's answer, to an earlier candidate or after the verdict
        if not message.get("ok"):
            exp.error = message.get("error") or "failed"
            exp.live_params = exp.running  # nothing changed
            if message.get("gone"):  # what it would change is gone: the change cannot take
                exp.not_judged, exp.kept, exp.state = True, False, NOT_JUDGED_STATE
                self._conclude(exp)
                return
            if exp.trials and exp.method != "interleaved":  # a later candidate failed (e.g. OOM): the best so far
                exp.state = MEASURING
                self._settle(exp)
            else:
                self._revert(exp, FAILED)
            return
        exp.note = message.get("note") or exp.note
        step = int(message.get("step", 0))
        if exp.method == "interleaved":
            if exp.state == FINALIZING:  # the verdict, taken: the change stays from here
                exp.measure_from = exp.holds_from = step + SETTLE_STEPS
                exp.state = KEPT
                self._conclude(exp)
                return
            plan = message.get("interleave") or {}
            exp.schedule = Schedule(int(plan["first"]), int(plan["block"]), plan["order"], SETTLE_STEPS)
            exp.state = MEASURING
            return
        exp.running = exp.live_params
        if message.get("startup_s") is not None:
            exp.startups.append((step, float(message["startup_s"]), exp.workers(exp.live_params), 1,
                                 int(message.get("settle") or 0)))
        exp.measure_from = step + int(message.get("settle") or 0) + WARMUP_STEPS
        if exp.method == "epochs":
            # The first epoch to begin after the change starts the workers; the next one
            # shows what keeping them saves. (An epoch beginning at the very step applied
            # may have started its workers before: one epoch more is waited then.)
            began = self.loader.began if self.loader.began is not None else self.loader.epoch_began()
            began = step if began is None else began
            exp.measure_from = began + exp.epoch * ((step - began) // exp.epoch + FIRST_MEASURED)
            exp.measure_until = exp.measure_from + exp.epoch * EPOCHS_MEASURED - 1
        exp.state = FINALIZING if exp.state == FINALIZING else MEASURING

    def on_event(self, event: dict) -> None:
        """A probe event: the script replaced what the change was made to, or the
        training could not go on switching it."""
        exp = self.active
        if exp is None or exp.state == REVERTING:
            return
        replaced_loader = event.get("kind") == "replaced" and event.get("what") == "DataLoader" \
            and exp.action in LOADER_ACTIONS and exp.state != APPLYING
        mine = event.get("exp") == exp.exp
        if replaced_loader:
            self._not_judged(exp, f"built a new DataLoader at step {event.get('step')}")
        elif mine and event.get("kind") == "replaced":
            self._not_judged(exp, f"changed {event.get('what')} at step {event.get('step')}")
        elif mine and event.get("kind") == "trial_stopped":
            exp.error = f"the trial stopped at step {event.get('step')}: {event.get('error')}"
            self._revert(exp, FAILED)

    def _not_judged(self, exp: Experiment, what: str) -> None:
        exp.error = f"the script {what}: the change did not stay"
        exp.not_judged = True
        self._revert(exp, REVERTING)

    # --- measuring --------------------------------------------------------------------
    def tick(self, rows: list, loader: LoaderFigures = LoaderFigures()) -> None:
        """``rows``: rank 0's measured steps, oldest first; ``loader``: its loader's figures."""
        if rows:
            self.latest_step = max(self.latest_step, rows[-1].step)
        self.loader = loader
        exp = self.active
        if exp is None:
            return
        if exp.loader_id and loader.id and loader.id != exp.loader_id and exp.state not in (APPLYING, REVERTING):
            # the loader facts come with the steps: a new training loader is seen before its steps are measured
            self._not_judged(exp, f"built a new DataLoader at step {loader.began}")
            return
        if exp.state in (APPLYING, FINALIZING, REVERTING, RETURNING) and exp.measure_from is None:
            self._check_answer(exp)
            return
        if exp.method == "interleaved":
            self._tick_interleaved(exp, rows)
            return
        if exp.measure_from is None:
            return
        window = self._window(exp, rows, loader)
        if exp.method == "epochs":
            if window.steps and rows and rows[-1].step >= exp.measure_until:
                self._judge_epochs(exp, rows)
            return
        if window.steps < MEASURE_STEPS or window.wall < MIN_MEASURE_SECONDS * (1 + exp.extensions):
            return
        if exp.state == RETURNING:
            exp.returned = window
            exp.state = FINALIZING
            self._apply(exp, exp.return_for)
            return
        if exp.state == FINALIZING:  # the settled setting again: measured, pooled with its trial
            if exp.final_window is None:
                exp.final_window = len(exp.trials)
                exp.trials.append((exp.running, window))
            else:
                exp.trials[exp.final_window] = (exp.running, window)
            self._settle(exp)
            return
        if exp.extensions and exp.trials:
            exp.trials[-1] = (exp.live_params, window)  # the same trial, measured longer
        else:
            exp.trials.append((exp.current, window))
        best_before = max((w for _, w in exp.trials[:-1]), key=exp.ranking_rate, default=exp.baseline)
        if (not exp.extensions and worth_more(exp.ranking_rate(window), exp.ranking_rate(best_before))
                and exp.index + 1 < len(exp.candidates)):
            exp.index += 1
            self._apply(exp, exp.current)
            return
        self._settle(exp)

    def _window(self, exp: Experiment, rows, loader: LoaderFigures | None) -> Measured:
        last = exp.measure_until if exp.measure_until is not None else float("inf")
        chosen = [r for r in rows if exp.measure_from <= r.step <= last]
        if exp.method == "epochs" or loader is None:
            return measure(chosen)
        return measured_with_startups(chosen, rows, loader, exp.workers(exp.live_params), exp.startups)

    def _settle(self, exp: Experiment) -> None:
        params, after = exp.best()
        if after is None:
            self._revert(exp, FAILED)
            return
        if params != exp.running and exp.final_window is not None:
            # measured again once already: two candidates within WORTH_MORE of each other
            # swap places window by window on a shared machine (8 and 16 workers, back and
            # forth until the run ended); the one running stays
            params, after = exp.running, exp.measured(exp.running)
        exp.after = after
        before = exp.baseline
        if exp.returned is not None and exp.returned.steps and exp.baseline.rate:
            # the original, before and after the trials: what it moved by is the machine's drift
            exp.drift = abs(exp.returned.rate / exp.baseline.rate - 1)
            before = pooled([exp.baseline, exp.returned])
        exp.change = speed_change(after, before, floor=max(NOISE, exp.drift))
        verdict = judge(exp.change[:3])
        undecided = verdict == NO_CHANGE and exp.change[3] > NOISE
        live = params == exp.running
        if (undecided and live and exp.method == "sequential" and exp.extensions < EXTENSIONS
                and time.monotonic() - exp.began_at < MAX_TRIAL_SECONDS):
            exp.extensions += 1  # measure longer, from the same step
            return
        if exp.method == "sequential" and exp.returned is None and exp.change[1] < DRIFT_PROOF \
                and exp.change[2] * DRIFT_PROOF > 1:
            exp.return_for, exp.state, exp.measure_from = params, RETURNING, None
            self._send(exp, {"t": "revert", "exp": exp.exp})
            return
        if exp.returned is not None:
            exp.baseline = before
        keep = keeps(verdict, exp.changes_maths)
        if not keep:
            self._revert(exp, REVERTING)
            return
        exp.kept, exp.final_params = True, params
        if not live:  # settled on a candidate tried before: applied again, measured again
            exp.state = FINALIZING
            self._apply(exp, params)
            return
        exp.state = KEPT
        exp.holds_from = exp.measure_from
        self._conclude(exp)

    def _judge_epochs(self, exp: Experiment, rows) -> None:
        """Persistent workers, over whole epochs after the change: those epochs as they ran
        (after), against the same epochs with each epoch start's wait swapped for what a
        restart of the workers took before the change (before). Both sides hold the same
        steps, so a machine that slows or speeds up moves them alike."""
        chosen = [r for r in rows if exp.measure_from <= r.step <= exp.measure_until]
        starts = frozenset(range(exp.measure_from, exp.measure_until + 1, exp.epoch))
        restart = statistics.median(exp.restarts)
        exp.after = measure(chosen)
        exp.baseline = measure(chosen, starts, StartupCost(restart, exp.epoch))
        waits = [r.wall for r in chosen if r.step in starts]
        n = len(waits)
        spread_before = statistics.stdev(exp.restarts) / len(exp.restarts) ** 0.5 if len(exp.restarts) > 1 else \
            NOISE * restart
        spread_after = statistics.stdev(waits) / n ** 0.5 if n > 1 else 0.0
        ratio = exp.after.rate / exp.baseline.rate if exp.baseline.rate else 0.0
        total = exp.after.wall
        half = 2 * n * (spread_before ** 2 + spread_after ** 2) ** 0.5 / total if total else 0.0
        exp.change = (ratio, ratio * (1 - max(NOISE, half)), ratio * (1 + max(NOISE, half)), half)
        exp.trials.append((exp.running, exp.after))
        verdict = judge(exp.change[:3])
        keep = keeps(verdict, exp.changes_maths)
        if not keep:
            self._revert(exp, REVERTING)
            return
        exp.kept, exp.final_params, exp.state = True, exp.running, KEPT
        exp.holds_from = exp.measure_from
        self._conclude(exp)

    def _interleaved_so_far(self, exp: Experiment, rows) -> tuple | None:
        if exp.schedule is None:
            return None
        by_step = {r.step: r for r in rows if r.step >= exp.schedule.first}
        return paired(exp.schedule.blocks(by_step))

    def _tick_interleaved(self, exp: Experiment, rows) -> None:
        if exp.state != MEASURING:
            return
        before, after, logs = self._interleaved_so_far(exp, rows)
        exp.baseline, exp.after, exp.pairs, exp.logs = before, after, len(logs), logs
        schedule = exp.schedule
        all_done = self.latest_step >= schedule.first + len(schedule.order) * schedule.block - 1
        # judged at each new pair from the first PAIRS on, each look held to its share of the
        # 5% (a short run ends a trial of 0.4 s blocks on a busy core after 7 pairs: a look
        # every 4 never came)
        if (len(logs) < PAIRS or len(logs) <= exp.judged_pairs) and not all_done:
            return
        exp.judged_pairs = len(logs)
        exp.looks += 1
        exp.change = paired_change(before, after, logs, floor=NOISE, looks=exp.looks)
        verdict = judge(exp.change[:3])
        undecided = verdict == NO_CHANGE and exp.change[3] > NOISE
        exp.extensions = max(0, (len(logs) - 1) // PAIRS)
        if undecided and not all_done and len(logs) < PAIRS * (1 + self._extensions_for(exp)) \
                and time.monotonic() - exp.began_at < MAX_TRIAL_SECONDS:
            return
        keep = keeps(verdict, exp.changes_maths)
        exp.kept = keep
        exp.final_params = exp.current
        exp.state = FINALIZING if keep else REVERTING
        self._send(exp, {"t": "conclude", "exp": exp.exp, "keep": keep})
        if not keep:
            exp.measure_from = None

    # --- ends -------------------------------------------------------------------------
    def _check_answer(self, exp: Experiment) -> None:
        waited = time.monotonic() - exp.sent_at
        if waited > ACK_TIMEOUT_S and self.latest_step > exp.sent_step + ACK_TIMEOUT_STEPS:
            if exp.state == REVERTING:
                self.unanswered.add(exp.exp)
                exp.state = REVERT_FAILED
                exp.error = (exp.error + "; " if exp.error else "") + "the training did not answer the undo"
            else:
                exp.kept, exp.state = False, FAILED
                exp.error = "the training process did not answer"
                self.unanswered.add(exp.exp)
                self.send({"t": "revert", "exp": exp.exp})
            self._conclude(exp)

    def _revert(self, exp: Experiment, state: ExperimentState) -> None:
        """Undo everything the experiment changed; it concludes when the training answers
        (``FAILED``: at once, the undo still sent)."""
        exp.kept = False
        exp.measure_from = None
        if exp.method == "interleaved" and exp.schedule is not None and state != FAILED:
            self._send(exp, {"t": "conclude", "exp": exp.exp, "keep": False})
        else:
            self._send(exp, {"t": "revert", "exp": exp.exp})
        if state == FAILED:
            exp.state = FAILED
            self.unanswered.add(exp.exp)
            self._conclude(exp)
            return
        exp.state = REVERTING

    def end_of_run(self) -> None:
        """The training has ended: conclude the experiment under way, as far as it got.
        Whatever was applied stayed in effect until the end: that is what "kept" says."""
        exp = self.active
        if exp is None:
            return
        applied = exp.measure_from is not None or bool(exp.trials) or exp.schedule is not None
        decided = exp.method == "interleaved" and exp.change is not None and exp.state in (FINALIZING, REVERTING)
        exp.kept = applied and exp.state not in (REVERTING,) and exp.method != "interleaved"
        exp.state = INCOMPLETE
        if decided:  # judged, the verdict sent: the training ended before it answered
            exp.error = "the run ended as the verdict was being applied"
        elif exp.method == "interleaved" and exp.schedule is not None:  # the pairs so far, for what they say
            pairs = len(exp.logs)
            exp.change = paired_change(exp.baseline, exp.after, exp.logs, floor=NOISE, looks=exp.looks + 1) \
                if pairs >= 2 else None
            exp.error = f"the run ended after {pairs} pair{'s' if pairs != 1 else ''} of blocks"
        else:
            exp.error = exp.error or "the run ended before the measurement finished"
            exp.change = None
            if exp.running_at_end() is not None:
                self._fastest_so_far(exp)
        self.active = None
        self.done(exp.result())

    @staticmethod
    def _fastest_so_far(exp: Experiment) -> None:
        """A search the run ended while it tried a candidate: the one it would settle on
        among those measured, where measured faster (its code is still worth keeping)."""
        params, after = exp.best()
        change = speed_change(after, exp.baseline, floor=max(NOISE, exp.drift))
        if judge(change[:3]) == FASTER:
            exp.after, exp.change, exp.final_params = after, change, params

    def _conclude(self, exp: Experiment) -> None:
        if exp.state == KEPT:
            self.settled_from = max(self.settled_from, exp.measure_from or 0)
        self.active = None
        self.done(exp.result())


def measured_with_startups(chosen: list, rows, loader: LoaderFigures, workers: int, more=()) -> Measured:
    """``chosen`` without the steps start-ups slowed, plus the start-up cost of ``workers``
    workers per step (``rows``: the recent ones, where the start-ups' steps are read)."""
    left_out = loader.startup_steps | frozenset(s for startup in more for s in aftermath(startup))
    plain = measure(chosen, left_out)
    steady = plain.wall / plain.steps if plain.steps else 0.0
    walls = {r.step: r.wall for r in rows}
    return measure(chosen, left_out, loader.cost(workers, walls, steady, more))


def take_last(rows: list, steps: int, seconds: float) -> list:
    """The last rows holding at least ``steps`` steps and ``seconds`` of wall time (all
    of them where there are fewer)."""
    total, count = 0.0, 0
    for row in reversed(rows):
        total += row.wall
        count += 1
        if count >= steps and total >= seconds:
            break
    return rows[len(rows) - count:]


def settled_after(message: dict) -> int:
    """The first step after an answered change that runs as the run will go on."""
    return int(message.get("step") or 0) + int(message.get("settle") or 0) + WARMUP_STEPS
