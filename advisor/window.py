"""Statistics over a window of step rows (rows aligned with ``STEP_FIELDS``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastmon.phases import PHASES, STEP_FIELDS

_I = {name: i for i, name in enumerate(STEP_FIELDS)}
# Where a DDP rank waits for the slowest one: gradient all-reduce (inside backward), syncs, collectives.
WAIT_PHASES = ("backward", "sync", "comm")


def quantile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass
class Window:
    steps: int = 0
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
    mem_peak: int = 0
    micro_batches: int = 0
    first_step: int = 0
    last_step: int = 0
    own_work_median: float = 0.0  # per step: wall minus the phases where a rank waits for others

    @classmethod
    def from_rows(cls, rows) -> "Window":
        w = cls()
        rows = list(rows)
        if not rows:
            w.phase_totals = {p: 0.0 for p in PHASES}
            w.phase_median = dict(w.phase_totals)
            w.phase_p90 = dict(w.phase_totals)
            return w
        col = lambda name: [r[_I[name]] or 0 for r in rows]  # noqa: E731
        walls = col("wall")
        w.steps = len(rows)
        w.wall = sum(walls)
        w.samples = sum(col("samples"))
        for phase in PHASES:
            values = col(phase)
            w.phase_totals[phase] = sum(values)
            w.phase_median[phase] = quantile(values, 0.5)
            w.phase_p90[phase] = quantile(values, 0.9)
        w.step_median = quantile(walls, 0.5)
        w.step_p90 = quantile(walls, 0.9)
        w.sync_calls = sum(col("sync_calls"))
        w.h2d_bytes = sum(col("h2d_bytes"))
        w.h2d_pageable_bytes = sum(col("h2d_pageable_bytes"))
        w.eval_forwards = sum(col("eval_forwards"))
        w.eval_grad_forwards = sum(col("eval_grad_forwards"))
        allocs = col("mem_alloc")
        w.mem_alloc_first, w.mem_alloc_last = allocs[0], allocs[-1]
        w.mem_peak = max(col("mem_peak"))
        w.micro_batches = sum(col("micro_batches"))
        w.first_step, w.last_step = rows[0][_I["step"]], rows[-1][_I["step"]]
        waits = [_I[p] for p in WAIT_PHASES if p in _I]
        w.own_work_median = quantile([r[_I["wall"]] - sum(r[i] or 0 for i in waits) for r in rows], 0.5)
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
    def steps_per_s(self) -> float:
        return self.steps / self.wall if self.wall > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall if self.wall > 0 else 0.0

    @property
    def sync_calls_per_step(self) -> float:
        return self.sync_calls / self.steps if self.steps else 0.0

    @property
    def pageable_fraction(self) -> float:
        return self.h2d_pageable_bytes / self.h2d_bytes if self.h2d_bytes else 0.0

    @property
    def mem_growth_per_step(self) -> float:
        span = self.last_step - self.first_step
        return (self.mem_alloc_last - self.mem_alloc_first) / span if span > 0 else 0.0
