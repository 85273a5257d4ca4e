"""The step clock, the training thread's side: it timestamps phase boundaries into the
step event log (``fastmon.step_events``) and keeps the few counters the probe's own
decisions need (the step number, batches, forwards and backwards so far in the step).

Which phase each nanosecond belongs to is worked out in the monitor from the log. The
hot hooks (DataLoader ``__next__``, the forward and backward wrappers, the optimizer
hooks) append their events directly, ``put((code, perf_counter_ns()))``: one C call each.
"""

from __future__ import annotations

from time import perf_counter_ns

from fastmon.step_events import ENTER, GAP_IS_DATA, LEAVE, LEAVE_AS, LEAVE_STEP_END, MEMORY, RESUMED, STEP_END


class StepClock:
    __slots__ = ("put", "step", "loader_batches", "forwards", "backwards_since_step", "_memory")

    def __init__(self, put, memory=None) -> None:
        self.put = put  # appends one event, atomically: array('q').extend
        self._memory = memory
        self.step = 0
        self.loader_batches = 0
        self.forwards = 0
        self.backwards_since_step = 0

    def enter(self, phase: int) -> None:
        self.put((ENTER + phase, perf_counter_ns()))

    def leave(self, charge_to: int | None = None) -> None:
        """Close the innermost phase; ``charge_to`` relabels its last stretch (e.g. a
        ``.to()`` that turned out not to cross to the device; -1: the enclosing phase)."""
        if charge_to is None:
            self.put((LEAVE, perf_counter_ns()))
        else:
            self.put((LEAVE_AS, perf_counter_ns(), charge_to))

    def reclassify_gap_as_data_wait(self) -> None:
        """A step with no DataLoader batch: the time before its first forward was spent
        producing the batch by other means (a custom batch function)."""
        self.put((GAP_IS_DATA, perf_counter_ns()))

    def resumed(self) -> None:
        """After a suspended stretch: that time belongs to no step."""
        self.put((RESUMED, perf_counter_ns()))

    def end_step(self, leaving: bool = False) -> None:
        """End the step; ``leaving``: closing the innermost phase (the optimizer's) too."""
        if self._memory is not None:
            self.put((MEMORY, *self._memory()))
        self.put((LEAVE_STEP_END if leaving else STEP_END, perf_counter_ns(), self.step))
        self.step += 1
        self.loader_batches = self.forwards = self.backwards_since_step = 0
