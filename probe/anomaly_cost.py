"""What autograd's anomaly detection costs a step, measured rather than guessed.

In anomaly mode every autograd node stores the Python stack where it was made, which torch
takes from ``torch.fx.traceback.format_stack`` (looked up by attribute at each node): a
wrapper there times it. That is the forward side of the cost, and it depends on the
model's op count and the stack's depth, which no fixed factor knows (the planted MLP:
~80 µs a node). The backward side (a NaN check of every gradient) has no Python call to
time; the rule ``autograd.detect_anomaly`` estimates it.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

import torch
import torch.fx.traceback

from fastmon.probe.compiling import is_compiling
from fastmon.probe.guard import Part

SKIP_STEPS = 3  # the first steps read the script's source into linecache: dearer than the rest
FIRST_STEPS = 20  # anomaly-mode steps the first figure averages over
LATER_STEPS = 200  # ... and each later one: said again only where it moved
MOVED = 0.2  # from the last one said


def without_this_frame(stack: list[str]) -> list[str]:
    """The stack as torch's own ``format_stack`` gives it: the wrapper's frame is not the
    user's (it would end every anomaly traceback)."""
    return stack[:-1] if stack and stack[-1].startswith(THIS_FRAME) else stack


THIS_FRAME = f'  File "{__file__}"'


class AnomalyCostPart(Part):
    name = "anomaly_cost"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.module = torch.fx.traceback
        self._orig = self.module.format_stack
        self.step = -1  # the step of the last stack taken
        self.steps = 0  # steps in which stacks were taken, since the last figure (skipped ones included)
        self.spent_ns = 0
        self.nodes = 0
        self.said_ms = 0.0
        self.measure = FIRST_STEPS

    def install(self) -> None:
        part, orig = self, self._orig
        get_ident, anomaly_on = threading.get_ident, torch.is_anomaly_enabled

        def format_stack():
            if not part.on or get_ident() != part.main_thread or not anomaly_on() or is_compiling():
                return without_this_frame(orig())
            started = perf_counter_ns()
            try:
                return without_this_frame(orig())
            finally:
                try:
                    part.count(perf_counter_ns() - started)
                except Exception as exc:
                    part.fail(exc)

        format_stack.__wrapped__ = orig
        self.module.format_stack = format_stack

    def uninstall(self) -> None:
        self.module.format_stack = self._orig

    def count(self, spent_ns: int) -> None:
        step = self.probe.clock.step
        if step != self.step:
            self.step = step
            if self.steps == SKIP_STEPS + self.measure:
                self._say()
                self.steps, self.measure = SKIP_STEPS, LATER_STEPS
            if self.steps == SKIP_STEPS:
                self.spent_ns = self.nodes = 0
            self.steps += 1
        self.spent_ns += spent_ns
        self.nodes += 1

    def _say(self) -> None:
        ms = self.spent_ns / self.measure / 1e6
        if abs(ms - self.said_ms) > MOVED * self.said_ms or not self.said_ms:
            self.said_ms = ms
            self.probe.fact("anomaly_cost", {"stack_ms_a_step": round(ms, 3),
                                             "nodes_a_step": round(self.nodes / self.measure)})
