"""The step clock: exclusive-time attribution of each step's wall time to its phases.

Every nanosecond between two step boundaries is charged to exactly one phase: the
innermost one open at the time, or ``other`` when none is. Nested phases (a forward run
inside an optimizer closure, an ``.item()`` inside a forward) are therefore charged to
the inner phase, and the seven phase times add up to the step's wall time by
construction.
"""

from __future__ import annotations

from time import perf_counter_ns

from fastmon.phases import DATA_WAIT, OTHER, PHASES


class StepClock:
    __slots__ = (
        "acc", "stack", "mark", "step_start", "step", "samples", "loader_batches",
        "forwards", "backwards_since_step", "h2d_bytes", "h2d_pageable_bytes", "sync_calls",
        "eval_forwards", "eval_grad_forwards", "micro_batches", "started", "_emit", "_before_emit",
    )

    def __init__(self, emit, before_emit=None) -> None:
        self._emit = emit
        self._before_emit = before_emit or (lambda clock: (0, 0, 0))
        self.stack: list[int] = []
        self.step = 0
        self.started = False
        now = perf_counter_ns()
        self.mark = now
        self.step_start = now
        self._reset_counters()

    def _reset_counters(self) -> None:
        self.acc = [0] * len(PHASES)
        self.samples = 0
        self.loader_batches = 0
        self.forwards = 0
        self.backwards_since_step = 0
        self.h2d_bytes = 0
        self.h2d_pageable_bytes = 0
        self.sync_calls = 0
        self.eval_forwards = 0
        self.eval_grad_forwards = 0
        self.micro_batches = 0

    def enter(self, phase: int) -> None:
        now = perf_counter_ns()
        if not self.started:
            # Step 0 starts at the first training activity, not at interpreter start-up:
            # imports and model construction are not part of any step.
            self.started = True
            self.step_start = self.mark = now
        stack = self.stack
        self.acc[stack[-1] if stack else OTHER] += now - self.mark
        stack.append(phase)
        self.mark = now

    def leave(self, charge_to: int | None = None) -> None:
        """Close the innermost phase; ``charge_to`` relabels its last stretch (e.g. a
        ``.to()`` that turned out not to cross to the device)."""
        now = perf_counter_ns()
        stack = self.stack
        phase = stack.pop() if stack else OTHER
        if charge_to is not None:
            phase = charge_to if charge_to >= 0 else (stack[-1] if stack else OTHER)
        self.acc[phase] += now - self.mark
        self.mark = now

    def reclassify_gap_as_data_wait(self) -> None:
        """A step with no DataLoader batch: the time before its first forward was spent
        producing the batch by other means (a custom batch function)."""
        acc = self.acc
        if acc[DATA_WAIT] == 0 and not self.stack:
            now = perf_counter_ns()
            acc[OTHER] += now - self.mark
            self.mark = now
            acc[DATA_WAIT] = acc[OTHER]
            acc[OTHER] = 0

    def end_step(self) -> None:
        now = perf_counter_ns()
        stack = self.stack
        self.acc[stack[-1] if stack else OTHER] += now - self.mark
        self.mark = now
        mem = self._before_emit(self)
        self._emit((
            self.step, now, now - self.step_start, *self.acc,
            self.samples, *mem, self.h2d_bytes, self.h2d_pageable_bytes, self.sync_calls,
            self.eval_forwards, self.eval_grad_forwards, self.micro_batches,
        ))
        self.step += 1
        self.step_start = now
        self._reset_counters()
