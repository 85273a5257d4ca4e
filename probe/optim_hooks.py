"""Step boundaries: global optimizer step hooks, and the fallbacks.

A step ends when ``optimizer.step()`` returns: the post hook is in for the whole run, and
at the end of an untimed step (``fastmon.probe.sampling``) all it does is log the time.
The pre hook, which opens the optimizer phase, is in while steps are timed (and for good
once one optimizer's step is seen inside another's: its depth count is needed then).
``step`` with a closure runs forward and backward inside it; the clock charges those to
forward/backward, the rest to optimizer. GradScaler skips ``optimizer.step`` on overflow,
so its ``update`` also ends a step that had none. A process that never creates an
optimizer (manual SGD; ``created == 0``) falls back: a step ends when the next batch,
training forward or backward starts after a backward.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from time import perf_counter_ns

import torch
import torch.optim.optimizer as optim_module

from fastmon.probe import facts
from fastmon.probe.compiling import STEPPED_IN_GRAPH, is_compiling
from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.probe.torch_private import optimizer_hook_dicts
from fastmon.common.phases import OPTIMIZER
from fastmon.common.step_events import ENTER


class OptimizerPart(Part):
    name = "optimizer"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.created = 0
        self.depth = 0
        self.step_at_update = 0  # the step count at the last GradScaler.update
        self.fast = False  # untimed steps may end the post hook's short way: on, untimed, no depth to count
        self.seen: list = []  # weak references to the optimizers that have stepped
        self.force_set_to_none = False
        self.zero_grad_reported = False
        self.nested = False  # an optimizer's step ran inside another's (ZeroRedundancyOptimizer)
        self.steps_in_graph = False  # optimizer.step() runs inside a compiled function
        self.compile_in_use = False  # torch.compile was called: optimizers keep their plain zero_grad
        self.pre_handle = self.post_handle = None
        self.created_at: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # optimizer -> file:line
        self.pre_hooks, self.post_hooks = optimizer_hook_dicts()  # ours goes in and out by its handle's id
        self._orig_init = torch.optim.Optimizer.__init__
        self._orig_module_zero_grad = torch.nn.Module.zero_grad
        self._scaler_cls = getattr(getattr(torch, "amp", None), "GradScaler", None)
        self._orig_update = self._scaler_cls.update if self._scaler_cls else None

    def install(self) -> None:
        part = self
        orig_init = self._orig_init

        def __init__(opt, *args, **kwargs):
            part.created += 1
            try:
                part.created_at[opt] = fmt(user_frame(2))  # where the advice on its settings points
            except Exception as exc:
                part.fail(exc)
            return orig_init(opt, *args, **kwargs)

        torch.optim.Optimizer.__init__ = __init__
        self._install_zero_grad()
        clock = self.probe.clock
        keep_end, keep_reading = clock.ends.append, clock.readings.append

        def post(optimizer, args, kwargs):
            # At every step of the run: the untimed step's end is kept to these few lines.
            step = clock.step
            if step < clock.short_until and optimizer.__weakref__ is clock.short_ref:
                keep_end(perf_counter_ns())
                keep_reading(clock.reading_base + clock.train_it._num_yielded)
                clock.step = step + 1
            else:
                part.post(optimizer)

        def compile_safe_post(optimizer, args, kwargs):
            if is_compiling():  # a step inside a compiled function: its eager wrapper ends it
                STEPPED_IN_GRAPH.optimizer = optimizer
                return
            post(optimizer, args, kwargs)

        self.compile_safe_post = compile_safe_post
        self.post_handle = optim_module.register_optimizer_step_post_hook(
            compile_safe_post if self.compile_in_use else post)  # (installed again after a suspend)
        if self._scaler_cls is not None:
            orig_update = self._orig_update

            def update(scaler, *args, **kwargs):
                if not is_compiling() and part.on and threading.get_ident() == part.main_thread:
                    try:
                        part.on_scaler_update()
                    except Exception as exc:
                        part.fail(exc)
                return orig_update(scaler, *args, **kwargs)

            self._scaler_cls.update = update

    def uninstall(self) -> None:
        self.disarm()
        self._remove_pre_hook()
        if self.post_handle is not None:
            self.post_handle.remove()
            self.post_handle = None
        torch.optim.Optimizer.__init__ = self._orig_init
        torch.nn.Module.zero_grad = self._orig_module_zero_grad
        for optimizer in self.optimizers():
            try:
                del optimizer.zero_grad
            except AttributeError:
                pass
        if self._scaler_cls is not None:
            self._scaler_cls.update = self._orig_update

    def arm(self) -> None:
        self.fast = False
        if self.pre_handle is None:
            self.pre_handle = optim_module.register_optimizer_step_pre_hook(self._pre)
        else:  # cheaper than a new handle at every timed step
            self.pre_hooks[self.pre_handle.id] = self._pre
        if not self.compile_in_use:
            self._set_zero_grads(True)

    def disarm(self) -> None:
        # Nested steps need the depth count at every step; and dynamo guards on the hook
        # dict and on each optimizer's zero_grad: a compiled step would recompile at each swap.
        if not self.nested and not self.steps_in_graph and self.pre_handle is not None:
            self.pre_hooks.pop(self.pre_handle.id, None)
            self.fast = self.on
        if not self.force_set_to_none and not self.compile_in_use:
            self._set_zero_grads(False)

    def _remove_pre_hook(self) -> None:
        if self.pre_handle is not None:
            self.pre_handle.remove()
            self.pre_handle = None

    def _install_zero_grad(self) -> None:
        """``model.zero_grad(set_to_none=False)`` is reported once; in for the whole run (a
        class attribute set on ``nn.Module`` at each timed step would invalidate every module
        type's attribute caches). Optimizers get theirs per instance: ``_watch_zero_grad``."""
        part = self
        orig_module_zero = self._orig_module_zero_grad

        def module_zero_grad(module, set_to_none: bool = True):
            if not set_to_none and not is_compiling() and part.on:
                set_to_none = part.check_set_to_none(set_to_none)
            return orig_module_zero(module, set_to_none)

        torch.nn.Module.zero_grad = module_zero_grad

    def _watch_zero_grad(self, optimizer) -> None:
        """An optimizer's ``zero_grad(set_to_none=False)`` is reported once, and a hot-apply
        can force True. The wrapper sits in the instance's ``zero_grad`` attribute while steps
        are timed (or while forced); in between, the attribute holds the plain bound method,
        so the key never comes and goes. ``Optimizer.__getstate__`` leaves both out. Set as
        attributes, never through ``optimizer.__dict__``: that makes CPython build the
        instance's dict, after which no method call on the optimizer is specialized any
        more (torch's step makes several; ``benchmarks/probe_instructions.py``)."""
        part = self
        plain = optimizer.zero_grad

        def zero_grad(set_to_none: bool = True):
            if not set_to_none and not is_compiling() and part.on:
                set_to_none = part.check_set_to_none(set_to_none)
            return plain(set_to_none)

        optimizer._fastmon_zero_grad = (zero_grad, plain)
        if not self.compile_in_use or self.force_set_to_none:
            optimizer.zero_grad = zero_grad

    def on_compile_in_use(self) -> None:
        """Dynamo guards on each optimizer's ``zero_grad`` and traces our wrapper: compiled
        steps keep the plain method (``set_to_none=False`` goes unreported there). The
        post hook becomes the one that asks ``is_compiling()`` first."""
        self.compile_in_use = True
        if not self.force_set_to_none:
            self._set_zero_grads(False)
        # Its check costs ~80 ns a step, so it goes in only now: before any compiled call.
        if self.post_handle is not None:
            self.post_hooks[self.post_handle.id] = self.compile_safe_post

    def _set_zero_grads(self, wrapped: bool) -> None:
        for optimizer in self.optimizers():
            if wrapped or not self.compile_in_use:
                optimizer.zero_grad = optimizer._fastmon_zero_grad[0 if wrapped else 1]
            else:
                try:  # the class's method again (never through __dict__: that builds the instance's dict)
                    del optimizer.zero_grad
                except AttributeError:
                    pass

    def optimizers(self) -> list:
        return [opt for opt in (ref() for ref in self.seen) if opt is not None]

    def check_set_to_none(self, set_to_none: bool) -> bool:
        if not set_to_none and not self.zero_grad_reported:
            self.zero_grad_reported = True
            self.probe.event("zero_grad_set_to_none_false", location=fmt(user_frame(3)))
        return True if self.force_set_to_none else set_to_none

    def _pre(self, optimizer, args, kwargs):
        if is_compiling() or not self.on or threading.get_ident() != self.main_thread:
            return None
        self.depth += 1
        if self.depth > 1:
            self.nested = True
        elif self.probe.clock.timing:
            try:
                self.on_step_begin(optimizer)
            except Exception as exc:
                self.depth = 0
                self.fail(exc)
        return None

    def on_step_begin(self, optimizer, enter: bool = True) -> None:
        if not any(ref() is optimizer for ref in self.seen):
            self.seen.append(weakref.ref(optimizer))
            self._watch_zero_grad(optimizer)
            if not self.created:
                self.created = 1
            name = type(optimizer).__name__
            same_class = sum(1 for ref in self.seen if type(ref()).__name__ == name)
            # dcgan's two Adams are two facts
            self.probe.fact(f"optimizer.{name}" + (f".{same_class}" if same_class > 1 else ""),
                            dict(facts.describe_optimizer(optimizer), location=self.created_at.get(optimizer)))
            if len(self.seen) == 1:
                self.probe.fact("framework", facts.framework(sys._getframe(1)))
        if enter:
            self.probe.clock.put((ENTER + OPTIMIZER, perf_counter_ns()))
        self.probe.checks_part.grad_norm_if_due(optimizer)

    def post(self, optimizer) -> None:
        """The step's end, the long way: a timed step, or nested steps to count."""
        if not self.on or threading.get_ident() != self.main_thread:
            return
        try:
            if STEPPED_IN_GRAPH.optimizer is optimizer:  # from a compiled function's wrapper
                STEPPED_IN_GRAPH.optimizer = None
                self.steps_in_graph = True
                if self.probe.clock.timing:
                    self.on_step_begin(optimizer, enter=False)
            leaving = self.depth > 0  # the pre hook opened the optimizer phase
            if leaving:
                self.depth -= 1
                if self.depth:
                    return
            if self.probe.clock.timing:
                self.probe.end_step(leaving=leaving, optimizer=optimizer)
            else:
                self.probe.end_untimed_step(optimizer)
        except Exception as exc:
            self.fail(exc)

    def wrap_compiled_function(self, compiled):
        """A compiled function may hold ``optimizer.step()``, whose post hook dynamo traced:
        the step ends when the function returns, here, outside the graph."""
        post, stepped = self.post, STEPPED_IN_GRAPH

        @functools.wraps(compiled)
        def compiled_call(*args, **kwargs):
            out = compiled(*args, **kwargs)
            optimizer = stepped.optimizer
            if optimizer is not None:
                post(optimizer)
            return out

        return compiled_call

    def on_scaler_update(self) -> None:
        clock = self.probe.clock
        if clock.step == self.step_at_update:  # the scaler skipped optimizer.step: the step still ended
            if not clock.timing:
                self.probe.end_untimed_step()
            elif clock.backwards_since_step:
                self.probe.end_step()
        self.step_at_update = clock.step
