"""Statistics over a window of step rows (rows aligned with ``STEP_FIELDS``).

Steps, time and samples count every row. Phases, counts and memory come from the timed
rows (``timed`` 1; on short steps the probe times a random sample of them). Each timed
row stands for the steps up to the next timed one (the gaps are drawn at random): its
split of the step is applied to their time, and its phase times weigh as many steps in
the medians. So a run whose first 50 steps are all timed, or whose sampling rate moved
after a fix, is not described by where its timed steps crowd. Phases leave out the steps
that held evaluation forwards (an eval pass inside a training step, as accelerate's and
Lightning's loops do), with the steps they stand for: theirs is not training's time."""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field

from fastmon.common.phases import COLUMN, PHASES

# Where a DDP rank waits for the slowest one: gradient all-reduce (inside backward), syncs, collectives.
WAIT_PHASES = ("backward", "sync", "comm")
MIN_TIMED_ROWS = 20  # a recent window reaches back until it holds this many timed steps
# ``quantiles``: a sample of ~10,000 values; a bracket of 4 standard deviations of a sample
# quantile's rank (at most 50 in 10,000) either side
BRACKETED_FROM, SAMPLE_SIZE, BRACKET = 100_000, 10_000, 200


def quantile(values: list[float], q: float, ordered: bool = False) -> float:
    if not values:
        return 0.0
    ordered = values if ordered else sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def quantiles(values: list[float], qs: tuple[float, ...]) -> list[float]:
    """``quantile`` at each of ``qs``, exactly, without sorting a long list: a sorted sample
    of the values brackets each wanted rank, and only the values inside are sorted (the
    whole list where a bracket misses). A million steps' wall times: 0.1 s, not 0.2."""
    n = len(values)
    if n < BRACKETED_FROM:
        ordered = sorted(values)
        return [quantile(ordered, q, ordered=True) for q in qs]
    sample = sorted(values[::n // SAMPLE_SIZE])
    out = []
    for q in qs:
        pos = (n - 1) * q
        lo_rank, hi_rank = int(pos), min(int(pos) + 1, n - 1)
        middle = int((len(sample) - 1) * q)
        lo, hi = sample[max(0, middle - BRACKET)], sample[min(len(sample) - 1, middle + BRACKET)]
        below = sum(map(operator.lt, values, itertools.repeat(lo)))
        inside = sorted([v for v in values if lo <= v <= hi])
        if not below <= lo_rank < hi_rank + 1 <= below + len(inside):
            return [quantile(values, q) for q in qs]
        a, b = inside[lo_rank - below], inside[hi_rank - below]
        out.append(a + (b - a) * (pos - lo_rank))
    return out


def weighted_quantile(pairs: list[tuple[float, int]], q: float) -> float:
    """``quantile`` of the values, each repeated its (whole) weight times."""
    pairs = sorted(p for p in pairs if p[1] > 0)
    if not pairs:
        return 0.0
    pos = (sum(w for _, w in pairs) - 1) * q
    lo_rank, frac = int(pos), pos - int(pos)
    seen, lo = 0, None
    for value, weight in pairs:
        if lo is None and lo_rank < seen + weight:
            lo = value
            if frac == 0 or lo_rank + 1 < seen + weight:
                return lo
        elif lo is not None:
            return lo + (value - lo) * frac
        seen += weight
    return lo


def segments(walls: list[float], timed: list[int]) -> dict[int, tuple[float, int]]:
    """For each timed position (ascending): the time and the number of the steps it stands
    for, itself and the untimed ones up to the next timed one (those before the first timed
    one go to the first)."""
    if not timed:
        return {}
    ends = [0, *timed[1:], len(walls)]
    each = iter(walls)
    return {pos: (sum(itertools.islice(each, end - start)), end - start) for pos, start, end in zip(timed, ends, ends[1:])}


def recent(rows, steps: int) -> list:
    """The last ``steps`` rows, reaching further back until they hold ``MIN_TIMED_ROWS``
    timed ones (the probe times a sample of short steps) or the rows run out."""
    rows = list(rows)
    start = max(0, len(rows) - steps)
    timed = sum(1 for r in rows[start:] if r.timed)
    while start > 0 and timed < MIN_TIMED_ROWS:
        start -= 1
        timed += bool(rows[start].timed)
    return rows[start:]


def window_tokens(timed_rows: list, steps: int, samples: int) -> tuple[int | None, int | None]:
    """``Window.tokens`` and ``tokens_nonpad`` from its timed rows."""
    counted = [r for r in timed_rows if r.tokens is not None]
    if not counted:
        return None, None
    tokens = sum(r.tokens for r in counted)
    by_samples = sum(r.samples or 0 for r in counted)
    total = round(samples * tokens / by_samples) if samples and by_samples else round(steps * tokens / len(counted))
    masked = [r for r in counted if r.tokens_nonpad is not None]
    if not masked or not (of := sum(r.tokens for r in masked)):
        return total, None
    return total, round(total * sum(r.tokens_nonpad for r in masked) / of)


LONG_STEP = 3.0  # a step this many times the median is a long one


@dataclass
class Window:
    steps: int = 0
    timed_steps: int = 0
    wall: float = 0.0
    samples: int = 0
    phase_totals: dict = field(default_factory=dict)
    phase_median: dict = field(default_factory=dict)
    phase_p90: dict = field(default_factory=dict)
    step_median: float = 0.0
    step_p90: float = 0.0
    sync_calls: int = 0
    h2d_bytes: int = 0
    h2d_pageable_bytes: int = 0
    eval_forwards: int = 0
    eval_grad_forwards: int = 0
    mem_alloc_first: int = 0
    mem_alloc_last: int = 0
    mem_steps: int = 0  # steps from the first timed row to the last
    mem_peak: int = 0
    micro_batches: int = 0
    first_step: int = 0
    last_step: int = 0
    own_work_median: float = 0.0  # per timed step: wall minus the phases where a rank waits for others
    # the timed step that waited longest for its batch: its part of the data wait's total, and
    # of the window's time (with the untimed steps it stands for)
    longest_data_wait: float = 0.0
    longest_data_segment: float = 0.0
    # Steps that take over LONG_STEP times the median (all steps, by their walls): the seconds
    # they take beyond the median; and of that excess in the timed ones, the share spent
    # waiting for data (None: no long step was timed). A slow read now and then shows so.
    long_excess: float = 0.0
    long_data_share: float | None = None
    # Kish's effective sample size of the timed steps, each weighing the steps it stands for:
    # 50 steps timed at the start and one more standing for 250 are worth ~1.4 timed steps
    timed_effective: float = 0.0
    # collectives issued without waiting, running under the phases: seconds, as phase_totals;
    # the part of comm inside the forward (FSDP's all-gathers), the same way
    comm_overlapped: float = 0.0
    comm_in_forward: float = 0.0
    # Tokens of every step: the timed steps' tokens per sample (per step, without samples) over
    # the window's samples, so exact where every step is timed or each sample is as long; None
    # where no timed step counted any. Non-padding ones likewise, where masks told them.
    tokens: int | None = None
    tokens_nonpad: int | None = None

    @classmethod
    def from_rows(cls, rows) -> "Window":
        rows = list(rows)
        return cls.from_columns([r.wall for r in rows], sum(r.samples or 0 for r in rows),
                                {i: r for i, r in enumerate(rows) if r.timed},
                                rows[0].step if rows else 0, rows[-1].step if rows else 0)

    @classmethod
    def from_columns(cls, walls: list[float], samples: int, timed: dict[int, tuple], first_step: int,
                     last_step: int) -> "Window":
        """The window of steps whose wall times are ``walls`` (in step order), ``samples``
        in all, with the full rows of the timed ones by position: a long run's record is
        read so, without a row object per step."""
        w = cls()
        w.phase_totals = {p: 0.0 for p in PHASES}
        w.phase_median = dict(w.phase_totals)
        w.phase_p90 = dict(w.phase_totals)
        if not walls:
            return w
        w.steps, w.timed_steps = len(walls), len(timed)
        w.wall = sum(walls)
        w.samples = samples
        w.step_median, w.step_p90 = quantiles(walls, (0.5, 0.9))
        w.first_step, w.last_step = first_step, last_step
        long = LONG_STEP * w.step_median
        w.long_excess = sum(wall - w.step_median for wall in walls if wall > long)
        if not timed:
            return w
        long_timed = [timed[i] for i in timed if timed[i].wall > long and not timed[i].eval_forwards]
        # an evaluating step is long for its own forwards, not for the loader: out of both
        w.long_excess -= sum(timed[i].wall - w.step_median for i in timed
                             if timed[i].wall > long and timed[i].eval_forwards)
        if long_timed:
            w.long_data_share = min(1.0, sum(r.data_wait or 0 for r in long_timed)
                                    / sum(r.wall - w.step_median for r in long_timed))
        order = sorted(timed)
        rows = [timed[i] for i in order]
        col = lambda name: [r[COLUMN[name]] or 0 for r in rows]  # noqa: E731
        stands_for = segments(walls, order)
        training = [i for i in order if not timed[i].eval_forwards] or order
        # totals in seconds of the window's training time: the evaluating steps' own time left out
        covered = sum(stands_for[i][0] for i in training)
        evaluating = sum(timed[i].wall for i in set(order) - set(training))
        scale = (w.wall - evaluating) / covered if covered > 0 else 0.0
        for phase in PHASES:
            # the step's split of its time, over the time of the steps it stands for
            column, wall = COLUMN[phase], COLUMN["wall"]
            w.phase_totals[phase] = scale * sum((timed[i][column] or 0) / timed[i][wall] * stands_for[i][0]
                                                for i in training if timed[i][wall] > 0)
            weighted = [(timed[i][COLUMN[phase]] or 0, stands_for[i][1]) for i in training]
            w.phase_median[phase] = weighted_quantile(weighted, 0.5)
            w.phase_p90[phase] = weighted_quantile(weighted, 0.9)
        w.comm_overlapped, w.comm_in_forward = (
            scale * sum((getattr(timed[i], name) or 0) / timed[i].wall * stands_for[i][0]
                        for i in training if timed[i].wall > 0) for name in ("comm_overlapped", "comm_in_forward"))
        w.tokens, w.tokens_nonpad = window_tokens(rows, w.steps, samples)
        w.sync_calls = sum(col("sync_calls"))
        w.h2d_bytes = sum(col("h2d_bytes"))
        w.h2d_pageable_bytes = sum(col("h2d_pageable_bytes"))
        w.eval_forwards = sum(col("eval_forwards"))
        w.eval_grad_forwards = sum(col("eval_grad_forwards"))
        allocs = col("mem_alloc")
        w.mem_alloc_first, w.mem_alloc_last = allocs[0], allocs[-1]
        w.mem_steps = rows[-1].step - rows[0].step
        w.mem_peak = max(col("mem_peak"))
        w.micro_batches = sum(col("micro_batches"))
        weights = [stands_for[i][1] for i in training]
        w.timed_effective = sum(weights) ** 2 / sum(n * n for n in weights)
        longest = max(training, key=lambda i: timed[i].data_wait or 0)
        if timed[longest].wall > 0:
            w.longest_data_segment = scale * stands_for[longest][0]
            w.longest_data_wait = (timed[longest].data_wait or 0) / timed[longest].wall * w.longest_data_segment
        waits = [COLUMN[p] for p in WAIT_PHASES if p in COLUMN]
        # each timed step one vote: weighed by the steps it stands for, one step timed late
        # (standing for 250) outvoted the 50 timed at the start and named a straggler alone
        w.own_work_median = quantile([timed[i].wall - sum(timed[i][k] or 0 for k in waits) for i in order], 0.5)
        return w

    @property
    def shares(self) -> dict:
        total = sum(self.phase_totals.values())
        if total <= 0:
            return {p: 0.0 for p in PHASES}
        return {p: v / total for p, v in self.phase_totals.items()}

    def share(self, phase: str) -> float:
        return self.shares.get(phase, 0.0)

    @property
    def comm_in_forward_share(self) -> float:
        """The share of the step exposed in collectives inside the forward (FSDP's all-gathers)."""
        total = sum(self.phase_totals.values())
        return self.comm_in_forward / total if total > 0 else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall if self.wall > 0 else 0.0

    @property
    def recurring_data_wait(self) -> float | None:
        """The data wait's share of the time without the timed step that waited longest (and
        the steps it stands for): a wait all in one step (a first batch, workers starting)
        is not the steps' habit. None without timed steps."""
        if not self.timed_steps:
            return None
        rest = sum(self.phase_totals.values()) - self.longest_data_segment
        return max(self.phase_totals["data_wait"] - self.longest_data_wait, 0.0) / rest if rest > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall if self.wall > 0 else 0.0

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.tokens is None else self.tokens / self.wall if self.wall > 0 else 0.0

    @property
    def sync_calls_per_step(self) -> float:
        return self.sync_calls / self.timed_steps if self.timed_steps else 0.0

    @property
    def h2d_bytes_per_step(self) -> float:
        return self.h2d_bytes / self.timed_steps if self.timed_steps else 0.0

    @property
    def pageable_fraction(self) -> float:
        return self.h2d_pageable_bytes / self.h2d_bytes if self.h2d_bytes else 0.0

    @property
    def mem_growth_per_step(self) -> float:
        return (self.mem_alloc_last - self.mem_alloc_first) / self.mem_steps if self.mem_steps > 0 else 0.0
