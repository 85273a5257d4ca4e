"""Backward timing and the retained-graph check.

``Tensor.backward`` calls ``torch.autograd.backward`` by module attribute, so wrapping
the latter covers both; the wrapper is in while a step is timed. Each loss seen in a
sampled backward is kept as a weak reference: if it is still alive
``RETAINED_AFTER_STEPS`` steps later, the user's code holds it (for example
``losses.append(loss)``), and with it the autograd history of every step.
"""

from __future__ import annotations

import math
import threading
import weakref
from time import perf_counter_ns

import torch

from fastmon.probe.compiling import is_compiling
from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.common.phases import BACKWARD
from fastmon.common.step_events import ENTER, LEAVE

RETAINED_AFTER_STEPS = 2
RETAINED_REPORT_AT = 3  # sampled steps in a row whose loss was kept before it is reported
RETAINED_SAMPLE_EVERY = 16  # watch the loss of one step in this many: a habit shows in any of them


class BackwardPart(Part):
    name = "backward"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.depth = 0
        self._orig = torch.autograd.backward
        self.watch: list[tuple[int, weakref.ref, tuple | None]] = []
        self.retained_streak = 0
        self.next_watch_step = 0
        self.timed_backward = None
        self.compile_in_use = False

    def install(self) -> None:
        part, orig, probe = self, self._orig, self.probe
        put = probe.clock.put
        get_ident, main_thread = threading.get_ident, self.main_thread

        def backward(tensors, *args, **kwargs):
            if is_compiling() or part.depth or not part.on or get_ident() != main_thread:
                return orig(tensors, *args, **kwargs)
            try:
                started = part.before(tensors)
            except Exception as exc:
                part.fail(exc)
                return orig(tensors, *args, **kwargs)
            part.depth = 1
            try:
                return orig(tensors, *args, **kwargs)
            finally:
                part.depth = 0
                put((LEAVE, perf_counter_ns()))
                if probe.ddp_watch is not None or probe.cuda:
                    part.after(started)

        backward.__wrapped__ = orig
        self.timed_backward = backward
        if self.compile_in_use:  # installed again after a suspend
            self.on_compile_in_use()

    def uninstall(self) -> None:
        self.disarm()

    def on_compile_in_use(self) -> None:
        """Dynamo would compile the wrapper as a frame of its own when a compiled function's
        backward (always a graph break) calls it, with ``is_compiling()`` folded to True for
        good: kept out of dynamo, it runs as in eager."""
        self.compile_in_use = True
        armed = torch.autograd.backward is self.timed_backward
        wrapped = self.timed_backward
        self.timed_backward = torch.compiler.disable(wrapped)
        self.timed_backward.__wrapped__ = self._orig
        if armed:
            self.arm()

    def arm(self) -> None:
        torch.autograd.backward = self.timed_backward

    def disarm(self) -> None:
        torch.autograd.backward = self._orig

    def before(self, tensors) -> int:
        """Bookkeeping, then the event; returns the backward's start time."""
        probe = self.probe
        clock = probe.clock
        if clock.backwards_since_step and not probe.optimizer_part.created:
            probe.end_step()  # no optimizer, no batch or forward seen in between: one step per backward
        if clock.step >= self.next_watch_step and not clock.backwards_since_step:
            self.next_watch_step = clock.step + RETAINED_SAMPLE_EVERY
            if isinstance(tensors, torch.Tensor) and tensors.grad_fn is not None:
                self.watch.append((clock.step, weakref.ref(tensors), user_frame(3)))
        clock.backwards_since_step += 1
        started = perf_counter_ns()
        clock.put((ENTER + BACKWARD, started))
        return started

    def after(self, started: int) -> None:
        try:
            probe = self.probe
            if probe.ddp_watch is not None:
                probe.ddp_watch.backward_done(started)
            if probe.cuda:
                probe.cuda_mark("backward_end")
        except Exception as exc:
            self.fail(exc)

    def next_check(self) -> float:
        """The step after which ``after_step`` has something to look at."""
        if self.watch:
            return self.watch[0][0] + RETAINED_AFTER_STEPS
        return self.next_watch_step + RETAINED_AFTER_STEPS

    def after_step(self, step: int) -> None:
        """Look at the losses of ``RETAINED_AFTER_STEPS`` steps ago: alive means kept."""
        if not self.watch:
            return
        old = step - RETAINED_AFTER_STEPS
        kept = None
        while self.watch and self.watch[0][0] <= old:
            _, ref, where = self.watch.pop(0)
            if ref() is not None:
                kept = where
            elif kept is None:
                self.retained_streak = 0
        if kept is not None:
            self.retained_streak += 1
            if self.retained_streak >= RETAINED_REPORT_AT:
                self.next_watch_step = math.inf  # reported: watch no more
                self.watch.clear()
                self.probe.event("retained_graph", location=fmt(kept),
                                 steps=self.retained_streak + RETAINED_AFTER_STEPS)
