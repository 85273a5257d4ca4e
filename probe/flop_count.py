"""The model's floating-point work, counted on one step: torch's own FLOP formulas
(``torch.utils.flop_counter.flop_registry``: matmuls, convolutions, attention) applied to
each operator of that step as it runs, by a dispatch mode entered and left at the step's
boundaries, in the training thread. Every operator runs as it would have: the count reads
shapes, never values, so it neither synchronizes nor changes a result. The counted step
runs slower (each operator passes through Python) and is left out of the steady run.

Not torch's ``FlopCounterMode`` itself: its module tracker installs global module hooks
(torch.compile then warns on the user's screen) and it decomposes operators it has no
formula for, which runs other kernels. A compiled model's kernels never reach a dispatch
mode: its eager code is counted on shapes alone (``shape_count``). See docs/measures.md "FLOPs, MFU and what bounds the run".
"""

from __future__ import annotations

import collections
import functools
import math
import re
import sys
import time
from time import perf_counter_ns

import torch

from fastmon.probe.shape_count import Watch, can_run_eagerly, count_on_shapes
from fastmon.probe.torch_private import TorchDispatchMode, current_dispatch_mode, dispatch_mode_active

COUNT_AT_STEP = 3  # the first count: past the first step's start-up and the lazy ones after it
# Operators with no FLOP formula that still do a model's heavy work (torch counts nothing for
# an LSTM or, on CPU, the fused attention kernels): timed, and named in the report
UNCOUNTED_HEAVY = re.compile(r"lstm|gru|rnn|attention|attn|conv|matmul|mm|linear|bmm|einsum|baddbmm")


class _Counting(TorchDispatchMode):
    """Runs each operator, and adds its FLOPs (torch's formula for it, where there is one)
    under the dtype of its first tensor input."""

    supports_higher_order_operators = True  # run as they are (not counted), never refused

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Not wrapped in dynamo's disable: its first call imports torch._dynamo, 1.5 s on the
        # training thread at the counted step. Where dynamo is loaded, _under_dynamo() is.
        return False

    def __init__(self, modules: "ModuleStack | None" = None) -> None:
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.formulas = flop_registry
        self.by_dtype: collections.Counter = collections.Counter()
        self.counting = True
        self.modules = modules  # which module's forward runs (None: not followed)
        self.forward_ns = 0  # the operators' time inside module forwards
        self.uncounted: collections.Counter = collections.Counter()  # (module, operator) -> ns in forwards

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        modules = self.modules
        if modules is None or not modules.stack:
            out = func(*args, **kwargs)
            started = 0
        else:
            started = perf_counter_ns()
            out = func(*args, **kwargs)
            took = perf_counter_ns() - started
            self.forward_ns += took
        if self.counting:
            try:
                packet = getattr(func, "_overloadpacket", func)
                formula = self.formulas.get(packet)
                if formula is not None:
                    dtype = next((a.dtype for a in args if isinstance(a, torch.Tensor)), None)
                    self.by_dtype[str(dtype).removeprefix("torch.")] += int(formula(*args, **kwargs, out_val=out))
                elif started and UNCOUNTED_HEAVY.search(name := str(packet)):
                    self.uncounted[(modules.stack[-1], name)] += took
            except Exception:
                self.counting = False  # a formula that fails here: no count rather than a wrong one
        return out

    def uncounted_report(self) -> list[dict]:
        """The modules whose heavy operators have no FLOP formula, and their share of the
        counted forwards' operator time (on a GPU, of their launch time: not their work)."""
        total = self.forward_ns or 1
        return [{"module": module, "operator": op, "forward_share": round(ns / total, 4)}
                for (module, op), ns in self.uncounted.most_common(8)]


class ModuleStack:
    """The module whose forward runs now, by class name: instance hooks on every submodule of
    the model's roots for the counted step alone (global hooks would make torch.compile warn)."""

    def __init__(self, roots) -> None:
        self.stack: list[str] = []
        self.handles = []
        seen = set()
        for root in roots:
            for module in root.modules():
                if id(module) in seen:
                    continue
                seen.add(id(module))
                name = type(module).__name__
                self.handles.append(module.register_forward_pre_hook(lambda m, a, name=name: self.stack.append(name)))
                self.handles.append(module.register_forward_hook(self._pop, always_call=True))

    def _pop(self, module, args, output) -> None:
        if self.stack:
            self.stack.pop()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles, self.stack = [], []


@functools.cache
def _under_dynamo() -> type:
    """The counting mode as torch makes every dispatch mode (its __torch_dispatch__ never
    traced by dynamo), for a process that has dynamo loaded: the wrapping costs nothing
    there, and a compiled function the script calls during the count stays compiled."""
    return type("_CountingUnderDynamo", (_Counting,), {"_should_skip_dynamo": classmethod(lambda cls: True),
                                                        "__torch_dispatch__": _Counting.__torch_dispatch__})


class FlopCount:
    """Counts at ``COUNT_AT_STEP``, once: the summary divides by the step's samples, so a
    batch changed later is followed. The probe's step boundaries call ``at_boundary``
    while ``active`` or once ``start_at`` is reached."""

    def __init__(self, probe) -> None:
        self.probe = probe
        self.start_at = COUNT_AT_STEP
        self.active: _Counting | Watch | None = None
        self.step = 0
        self.span = 1  # steps counted: one for each optimizer that steps in turn (a GAN's two)
        self.started_ns = 0
        self.modules: ModuleStack | None = None

    def at_boundary(self, next_step: int) -> bool:
        """Between steps, before ``next_step``: start or stop the count. True if either happened."""
        try:  # a count that fails costs the count, never the probe's step timing
            if self.active is not None:
                if next_step < self.step + self.span:
                    return False
                self._stop(next_step)
                return True
            if next_step >= self.start_at:
                self.start_at = math.inf
                self._start(next_step)
                return True
        except Exception as exc:
            self.close()
            self.probe.report_fault("flops", exc)
        return False

    def _start(self, step: int) -> None:
        if dispatch_mode_active():
            self._report(step, error="the script runs under a dispatch mode of its own")
            return
        if self.probe.forward_part.compile_in_use:  # its kernels never reach a dispatch mode: count on shapes
            if not can_run_eagerly():
                self._report(step, error="the model is compiled, and this torch cannot run it as eager code on "
                                         "shapes alone (torch.compiler.set_stance: torch 2.6 and later)")
                return
            self.active = self.probe.forward_part.count_watch = Watch()
            self.step = step
            return
        forward = self.probe.forward_part
        self.modules = ModuleStack([m for m in list(forward.roots.values()) if forward.root_has_params.get(id(m))])
        mode = (_under_dynamo() if "torch._dynamo" in sys.modules else _Counting)(self.modules)
        mode.__enter__()
        self.span = max(1, sum(1 for ref in self.probe.optimizer_part.seen if ref() is not None))
        self.active, self.step, self.started_ns = mode, step, time.perf_counter_ns()

    def _stop(self, next_step: int) -> None:
        mode, self.active = self.active, None
        if isinstance(mode, Watch):
            self.probe.forward_part.count_watch = None
            self._count_compiled(mode, next_step)
            return
        seconds = (time.perf_counter_ns() - self.started_ns) / 1e9
        if self.modules is not None:
            self.modules.remove()
            self.modules = None
        if current_dispatch_mode() is not mode:
            mode.counting = False  # a mode the script entered sits above ours: leave the stack to it
            self._report(self.step, error="the script entered a dispatch mode during the counted step",
                         seconds=round(seconds, 4))
            return
        mode.__exit__(None, None, None)
        if not mode.counting:
            self._report(self.step, error="torch's FLOP formula failed on an operator of this step",
                         seconds=round(seconds, 4))
            return
        self._report(self.step, to_step=next_step - 1, flops=sum(mode.by_dtype.values()),
                     by_dtype=dict(mode.by_dtype), seconds=round(seconds, 4), steps=next_step - self.step,
                     uncounted=mode.uncounted_report())

    def _count_compiled(self, watch: Watch, next_step: int) -> None:
        """The step's training forwards, run again on shapes alone between the steps: the
        time it takes falls in ``next_step``, left out of the steady run with the counted one."""
        if not watch.forwards:
            self._report(self.step, error="no training forward of the compiled model was seen in the step")
            return
        started = time.perf_counter_ns()
        mode = _under_dynamo()() if "torch._dynamo" in sys.modules else _Counting()
        try:
            count_on_shapes(watch.forwards, mode, self.probe.forward_part)
        except Exception as exc:
            mode.counting, failed = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        else:
            failed = "torch's FLOP formula failed on an operator of this step" if not mode.counting else None
        seconds = round((time.perf_counter_ns() - started) / 1e9, 4)
        if failed:
            self._report(self.step, to_step=next_step, seconds=seconds,
                         error=f"the compiled model's eager code could not be counted on shapes alone ({failed})")
            return
        by_dtype = collections.Counter({dtype: flops * watch.seen // len(watch.forwards)
                                        for dtype, flops in mode.by_dtype.items()})
        autocast = watch.forwards[0].autocast
        if autocast and "float32" in by_dtype:  # the matrix work autocast ran in its dtype
            by_dtype[autocast] += by_dtype.pop("float32")
        self._report(self.step, to_step=next_step, flops=sum(by_dtype.values()), by_dtype=dict(by_dtype),
                     seconds=seconds, on="shapes")

    def _report(self, step: int, to_step: int | None = None, **fields) -> None:
        self.probe.event("flops", from_step=step, to_step=step if to_step is None else to_step, **fields)

    def close(self) -> None:
        """At the script's exit, or when the probe goes off: a count under way ends uncounted."""
        mode, self.active, self.start_at = self.active, None, math.inf
        if self.modules is not None:
            self.modules.remove()
            self.modules = None
        if isinstance(mode, Watch):
            self.probe.forward_part.count_watch = None
        elif mode is not None and current_dispatch_mode() is mode:
            try:
                mode.__exit__(None, None, None)
            except Exception as exc:
                self.probe.report_fault("flops", exc)
        elif mode is not None:
            mode.counting = False

