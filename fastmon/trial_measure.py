"""How a live change is measured, from the recorded steps alone: a window's rate (its
samples over its wall time, plus the DataLoader start-ups it accounts), and an
interleaved trial's blocks, paired. Pure: step rows in, figures out; docs/live-trials.md
"How a live change is measured" says why each choice."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from fastmon.common.verdicts import NOISE, rate_error

BLOCKS = 4  # a window's blocks, whose spread gives its error
# two-sided 95% quantiles of Student's t, by degrees of freedom
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 12: 2.18,
       15: 2.13, 20: 2.09, 30: 2.04}


def t95(df: int) -> float:
    if df < 1:
        return math.inf
    return next((T95[d] for d in sorted(T95) if d >= df), 1.96)


@dataclass(frozen=True)
class StartupCost:
    """What one epoch start costs a setting (the wait for its workers to start, measured),
    spread over the steps of an epoch: a window of n steps accounts n / epoch_steps of it."""

    seconds: float
    epoch_steps: float

    def over(self, steps: int) -> float:
        return self.seconds * steps / self.epoch_steps if self.epoch_steps > 0 else 0.0


@dataclass(frozen=True)
class Measured:
    """The steps a window counted, as runs of consecutive steps (``blocks``), and what
    they recorded; ``startup``: seconds of worker start-ups it accounts on top."""

    blocks: tuple[tuple[int, int], ...] = ()
    steps: int = 0
    samples: int = 0
    wall: float = 0.0
    startup: float = 0.0
    error: float = 0.0  # the rate's relative standard error

    @property
    def rate(self) -> float:
        total = self.wall + self.startup
        return self.samples / total if total > 0 else 0.0

    def to_dict(self) -> dict:
        return {"blocks": [list(b) for b in self.blocks], "steps": self.steps, "samples": self.samples,
                "wall_s": round(self.wall, 6), "startup_s": round(self.startup, 6),
                "samples_per_s": round(self.rate, 2)}


def runs(steps) -> tuple[tuple[int, int], ...]:
    """Sorted step numbers as runs of consecutive ones: ((first, last), ...)."""
    out: list[list[int]] = []
    for step in steps:
        if out and step == out[-1][1] + 1:
            out[-1][1] = step
        else:
            out.append([step, step])
    return tuple((a, b) for a, b in out)


def measure(rows, startup_steps=frozenset(), cost: StartupCost | None = None) -> Measured:
    """``rows`` (consecutive steps), less the steps that waited for workers to start
    (luck: whether an epoch begins inside a window), plus the setting's own start-up
    in proportion to the steps counted (what the run pays for it, on average)."""
    counted = [r for r in rows if r.step not in startup_steps]
    walls, samples = [r.wall for r in counted], [r.samples for r in counted]
    return Measured(runs(r.step for r in counted), len(counted), sum(samples), sum(walls),
                    cost.over(len(counted)) if cost else 0.0, rate_error(walls, samples, BLOCKS))


def pooled(windows) -> Measured:
    """Several windows of one setting as one."""
    windows = [w for w in windows if w.steps]
    if not windows:
        return Measured()
    wall = sum(w.wall for w in windows)
    # the pooled rate's error: each window's, weighted by its share of the time
    error = math.sqrt(sum((w.error * w.wall / wall) ** 2 for w in windows)) if wall > 0 else 0.0
    return Measured(tuple(b for w in windows for b in w.blocks), sum(w.steps for w in windows),
                    sum(w.samples for w in windows), wall, sum(w.startup for w in windows), error)


def speed_change(after: Measured, before: Measured, floor: float = NOISE) -> tuple[float, float, float, float]:
    """after's rate over before's, its ~95% interval from the windows' errors (never
    narrower than ``floor`` either way), and the half-width the errors alone give."""
    ratio = after.rate / before.rate if before.rate > 0 else 0.0
    half = 2 * math.hypot(after.error, before.error)
    return ratio, ratio * max(0.0, 1 - max(floor, half)), ratio * (1 + max(floor, half)), half


@dataclass(frozen=True)
class Schedule:
    """An interleaved trial as the probe runs it: block ``i`` holds ``block`` steps from
    ``first + i * block`` and runs the change where ``order[i]`` is "B", the original
    where "A"; each pair of blocks holds one of each, in a random order. The first
    ``settle`` steps of a block are not counted: the switch's own cost."""

    first: int
    block: int
    order: str
    settle: int

    def blocks(self, rows_by_step: dict) -> list[tuple[str, Measured]]:
        """Each complete block's setting and figures, in order, up to the first one
        the rows do not yet hold (a block is complete when its last step is in)."""
        out = []
        for i, setting in enumerate(self.order):
            start = self.first + i * self.block
            last = start + self.block - 1
            if last not in rows_by_step:
                break
            rows = [rows_by_step[s] for s in range(start + self.settle, last + 1) if s in rows_by_step]
            out.append((setting, measure(rows)))
        return out


def paired(blocks: list[tuple[str, Measured]]) -> tuple[Measured, Measured, list[float]]:
    """The original's blocks and the change's, each pooled, and each complete pair's
    log speed-up (change over original)."""
    originals, changes, logs = [], [], []
    for i in range(0, len(blocks) - 1, 2):
        pair = dict(blocks[i:i + 2])
        a, b = pair.get("A"), pair.get("B")
        if a is None or b is None or not a.steps or not b.steps or a.rate <= 0 or b.rate <= 0:
            continue
        originals.append(a)
        changes.append(b)
        logs.append(math.log(b.rate / a.rate))
    before, after = pooled(originals), pooled(changes)
    return before, after, logs


def looked(looks: int) -> float:
    """How much wider an interval must be where the pairs were looked at ``looks`` times,
    each time free to stop (Bonferroni: each look at 5% / looks, two-sided), so that a
    change that does nothing is called faster 2.5% of the time, however often it is looked
    at: the normal quantile's ratio to 1.96."""
    return statistics.NormalDist().inv_cdf(1 - 0.025 / max(looks, 1)) / 1.96


def paired_change(before: Measured, after: Measured, logs: list[float],
                  floor: float = NOISE, looks: int = 1) -> tuple[float, float, float, float]:
    """The pooled speed-up with its ~95% interval from the spread of the pairs (drift
    between pairs cancels within each), never narrower than ``floor``, widened for the
    ``looks`` taken at them so far; and the half-width the pairs alone give."""
    ratio = after.rate / before.rate if before.rate > 0 else 0.0
    n = len(logs)
    if n < 2:
        return ratio, 0.0, math.inf, math.inf
    mean = sum(logs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = math.expm1(t95(n - 1) * looked(looks) * sd / math.sqrt(n))
    width = max(floor, half)
    return ratio, ratio * max(0.0, 1 - width), ratio * (1 + width), half
