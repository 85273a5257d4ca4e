"""Step boundaries: global optimizer step hooks, and the fallbacks.

A step ends when ``optimizer.step()`` returns. ``step`` with a closure runs forward and
backward inside it; the clock charges those to forward/backward, the rest to optimizer.
GradScaler skips ``optimizer.step`` on overflow, so its ``update`` also ends a step that
had none. A process that never creates an optimizer (manual SGD; ``created == 0``) falls back:
a step ends when the next batch, training forward or backward starts after a backward.
"""

from __future__ import annotations

import threading
import weakref
from time import perf_counter_ns

import torch
import torch.optim.optimizer as optim_module

from fastmon.probe import facts
from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.phases import OPTIMIZER
from fastmon.step_events import ENTER


class OptimizerPart(Part):
    name = "optimizer"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.created = 0
        self.depth = 0
        self.handles: list = []
        self.steps_since_update = 0
        self.seen: list = []  # weak references to the optimizers that have stepped
        self.force_set_to_none = False
        self.zero_grad_reported = False
        self._orig_init = torch.optim.Optimizer.__init__
        self._orig_zero_grad = torch.optim.Optimizer.zero_grad
        self._orig_module_zero_grad = torch.nn.Module.zero_grad
        self._scaler_cls = getattr(getattr(torch, "amp", None), "GradScaler", None)
        self._orig_update = self._scaler_cls.update if self._scaler_cls else None

    def install(self) -> None:
        part = self
        orig_init, orig_zero, orig_module_zero = self._orig_init, self._orig_zero_grad, self._orig_module_zero_grad

        def __init__(opt, *args, **kwargs):
            part.created += 1
            return orig_init(opt, *args, **kwargs)

        def zero_grad(opt, set_to_none: bool = True):
            if not set_to_none and part.on:
                set_to_none = part.check_set_to_none(set_to_none)
            return orig_zero(opt, set_to_none)

        def module_zero_grad(module, set_to_none: bool = True):
            if not set_to_none and part.on:
                set_to_none = part.check_set_to_none(set_to_none)
            return orig_module_zero(module, set_to_none)

        torch.optim.Optimizer.__init__ = __init__
        torch.optim.Optimizer.zero_grad = zero_grad
        torch.nn.Module.zero_grad = module_zero_grad
        self.handles = [
            optim_module.register_optimizer_step_pre_hook(self._pre),
            optim_module.register_optimizer_step_post_hook(self._post),
        ]
        if self._scaler_cls is not None:
            orig_update = self._orig_update

            def update(scaler, *args, **kwargs):
                if part.on and threading.get_ident() == part.main_thread:
                    try:
                        part.on_scaler_update()
                    except Exception as exc:
                        part.fail(exc)
                return orig_update(scaler, *args, **kwargs)

            self._scaler_cls.update = update

    def uninstall(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        torch.optim.Optimizer.__init__ = self._orig_init
        torch.optim.Optimizer.zero_grad = self._orig_zero_grad
        torch.nn.Module.zero_grad = self._orig_module_zero_grad
        if self._scaler_cls is not None:
            self._scaler_cls.update = self._orig_update

    def optimizers(self) -> list:
        return [opt for opt in (ref() for ref in self.seen) if opt is not None]

    def check_set_to_none(self, set_to_none: bool) -> bool:
        if not set_to_none and not self.zero_grad_reported:
            self.zero_grad_reported = True
            self.probe.event("zero_grad_set_to_none_false", location=fmt(user_frame(3)))
        return True if self.force_set_to_none else set_to_none

    def _pre(self, optimizer, args, kwargs):
        if not self.on or threading.get_ident() != self.main_thread:
            return None
        self.depth += 1
        if self.depth == 1:
            try:
                self.on_step_begin(optimizer)
            except Exception as exc:
                self.depth = 0
                self.fail(exc)
        return None

    def on_step_begin(self, optimizer) -> None:
        if "_fastmon_seen" not in optimizer.__dict__:
            optimizer.__dict__["_fastmon_seen"] = True
            self.seen.append(weakref.ref(optimizer))
            if not self.created:
                self.created = 1
            self.probe.fact(f"optimizer.{type(optimizer).__name__}", facts.describe_optimizer(optimizer))
        clock = self.probe.clock
        clock.put((ENTER + OPTIMIZER, perf_counter_ns()))
        checks = self.probe.checks_part
        if clock.step >= checks.next_norm_step:
            try:
                checks.before_optimizer_step(optimizer)
            except Exception as exc:
                checks.fail(exc)

    def _post(self, optimizer, args, kwargs):
        if not self.on or threading.get_ident() != self.main_thread or self.depth == 0:
            return None
        try:
            self.depth -= 1
            if self.depth == 0:
                self.steps_since_update += 1
                self.probe.end_step(leaving=True)
        except Exception as exc:
            self.fail(exc)
        return None

    def on_scaler_update(self) -> None:
        if self.steps_since_update == 0 and self.probe.clock.backwards_since_step:
            self.probe.end_step()  # the scaler skipped optimizer.step: the step still ended
        self.steps_since_update = 0
