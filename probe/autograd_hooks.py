"""Backward timing and the retained-graph check.

``Tensor.backward`` calls ``torch.autograd.backward`` by module attribute, so wrapping
the latter covers both. Each loss seen in backward is kept as a weak reference: if it is
still alive ``RETAINED_AFTER_STEPS`` steps later, the user's code holds it (for example
``losses.append(loss)``), and with it the autograd history of every step.
"""

from __future__ import annotations

import threading
import weakref

import torch

from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.phases import BACKWARD

RETAINED_AFTER_STEPS = 2
RETAINED_REPORT_AT = 3  # sampled steps in a row whose loss was kept before it is reported
RETAINED_SAMPLE_EVERY = 4  # watch the loss of one step in this many: a habit shows in any of them


class BackwardPart(Part):
    name = "backward"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.depth = 0
        self._orig = torch.autograd.backward
        self.watch: list[tuple[int, weakref.ref, tuple | None]] = []
        self.retained_streak = 0
        self.retained_reported = False

    def install(self) -> None:
        part, orig = self, self._orig

        def backward(tensors, *args, **kwargs):
            if not part.on or threading.get_ident() != part.main_thread:
                return orig(tensors, *args, **kwargs)
            part.depth += 1
            outer = part.depth == 1
            if outer:
                try:
                    part.before(tensors)
                except Exception as exc:
                    part.depth -= 1
                    part.fail(exc)
                    return orig(tensors, *args, **kwargs)
            try:
                return orig(tensors, *args, **kwargs)
            finally:
                part.depth -= 1
                if outer:
                    try:
                        part.after()
                    except Exception as exc:
                        part.fail(exc)

        backward.__wrapped__ = orig
        torch.autograd.backward = backward

    def uninstall(self) -> None:
        torch.autograd.backward = self._orig

    def before(self, tensors) -> None:
        probe = self.probe
        clock = probe.clock
        if probe.optimizer_part.fallback and clock.backwards_since_step:
            probe.end_step()  # no optimizer, no batch or forward seen in between: one step per backward
        if (not clock.step % RETAINED_SAMPLE_EVERY and not clock.backwards_since_step
                and not self.retained_reported and isinstance(tensors, torch.Tensor) and tensors.grad_fn is not None):
            self.watch.append((clock.step, weakref.ref(tensors), user_frame(3)))
        clock.backwards_since_step += 1
        clock.enter(BACKWARD)

    def after(self) -> None:
        clock = self.probe.clock
        started = clock.mark
        clock.leave()
        if self.probe.ddp_watch is not None:
            self.probe.ddp_watch.backward_done(started)
        self.probe.cuda_mark("backward_end")

    def after_step(self, step: int) -> None:
        """Look at the losses of ``RETAINED_AFTER_STEPS`` steps ago: alive means kept."""
        if self.retained_reported or not self.watch:
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
                self.retained_reported = True
                self.watch.clear()
                self.probe.event("retained_graph", location=fmt(kept),
                                 steps=self.retained_streak + RETAINED_AFTER_STEPS)
