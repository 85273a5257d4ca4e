"""Code-level causes the rules name with a file:line: ``torch.tensor(ndarray)`` in the loop,
where anomaly detection was switched on and a profiler made, LR schedulers and gradient clipping in use, sampled gradient norms (spikes), and training
handed to processes of ``torch.multiprocessing.spawn``/``start_processes``, which the
probe does not follow (it is off in forks, absent from spawned interpreters). The
``torch.tensor`` and clipping wrappers are in while a step is timed: a habit of the loop
shows in any step.

Gradient norms are sampled every ``GRAD_NORM_EVERY`` steps or more, with the gradients
final: just before the optimizer step in a timed step, just after it in an untimed one
(``step()`` reads ``.grad`` and leaves it as it was), so a sample never makes a step
timed. A sample costs tens of µs of host time whatever the step (one fused kernel per
device and dtype, and a small reduction), so like step timing it is held to a budget a
step: ``NORM_BUDGET_NS`` on short steps, ``NORM_BUDGET_SHARE`` of the step on long ones.
On an accelerator the norm is copied to pinned memory without blocking and read at the
next sample, once its event has completed: the probe never waits on the device.
"""

from __future__ import annotations

import collections
import functools
import math
import statistics
import sys
import threading
import weakref
from time import perf_counter_ns

import torch
import torch.multiprocessing

from fastmon.probe import facts
from fastmon.probe.compiling import is_compiling
from fastmon.probe.guard import Part
from fastmon.probe.location import called_by_fastmon, fmt, user_frame
from fastmon.probe.torch_private import foreach_norm

GRAD_NORM_EVERY = 50  # steps between gradient-norm samples at the least
NORM_BUDGET_NS = 250  # per step spent on norm samples, on short steps
NORM_BUDGET_SHARE = 0.0001  # of the step time, on long ones
NORM_COSTS_KEPT = 3  # samples whose cheapest is the cost: a cost that grew (gradients unfrozen) is seen
SPIKE_FACTOR = 10.0
MIN_NORM_SAMPLES = 5
NORM_HISTORY = 50
TENSOR_COPY_REPORT_AFTER = 3  # torch.tensor(ndarray) calls inside steps before it is reported


class CodeChecksPart(Part):
    name = "checks"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self._orig_tensor = torch.tensor
        self._orig_clip = torch.nn.utils.clip_grad_norm_
        self._orig_scheduler_init = torch.optim.lr_scheduler.LRScheduler.__init__
        self._orig_anomaly_inits = (torch.autograd.set_detect_anomaly.__init__, torch.autograd.detect_anomaly.__init__)
        self._orig_profiler_init = torch.autograd.profiler.profile.__init__
        self._orig_conv_init = torch.nn.modules.conv._ConvNd.__init__
        self._spawn_module = sys.modules["torch.multiprocessing.spawn"]  # the attribute is the function
        self._orig_start_processes = self._spawn_module.start_processes
        self.tensor_copies = 0
        self.tensor_copy_reported = False
        self.norms: list[float] = []
        self.pending_norm = None  # (step, cpu tensor, event or None)
        self.spike_reported = False
        self.scheduler_refs: list = []  # weak references, for a batch change's LR scaling
        self.norm_every = GRAD_NORM_EVERY
        self.next_norm_step = GRAD_NORM_EVERY
        self.last_norm = (0, 0)  # (step, perf_counter_ns) at the last sample
        # the last samples' costs: the cheapest is the work (a dearer one waited for a core)
        self.norm_costs: collections.deque = collections.deque(maxlen=NORM_COSTS_KEPT)
        self.timed_wrappers = (self._orig_tensor, self._orig_clip)

    def install(self) -> None:
        part = self
        orig_tensor, orig_clip, orig_init = self._orig_tensor, self._orig_clip, self._orig_scheduler_init

        def tensor(data, *args, **kwargs):
            if not is_compiling() and part.on and type(data).__module__ == "numpy" and threading.get_ident() == part.main_thread:
                try:
                    part.on_tensor_copy()
                except Exception as exc:
                    part.fail(exc)
            return orig_tensor(data, *args, **kwargs)

        def clip_grad_norm_(*args, **kwargs):
            if not is_compiling() and part.on:
                part.probe.fact("grad_clipping", {"used": True})
            return orig_clip(*args, **kwargs)

        def scheduler_init(scheduler, *args, **kwargs):
            if part.on:
                part.probe.fact("lr_scheduler", {"class": type(scheduler).__name__})
                part.scheduler_refs.append(weakref.ref(scheduler))
            return orig_init(scheduler, *args, **kwargs)

        orig_set_anomaly, orig_detect_anomaly = self._orig_anomaly_inits

        def set_detect_anomaly_init(switch, mode, *args, **kwargs):
            if mode and part.on:
                part.on_anomaly_switched_on()
            return orig_set_anomaly(switch, mode, *args, **kwargs)

        def detect_anomaly_init(switch, *args, **kwargs):
            if part.on:
                part.on_anomaly_switched_on()
            return orig_detect_anomaly(switch, *args, **kwargs)

        orig_profiler_init = self._orig_profiler_init

        def profiler_init(profiler, *args, **kwargs):
            # torch.profiler.profile builds one of these too; fastmon's own capture does not count
            if part.on and not called_by_fastmon(2):
                try:
                    part.probe.fact("profiler_created_at", {"location": fmt(user_frame(2))})
                except Exception as exc:
                    part.fail(exc)
            return orig_profiler_init(profiler, *args, **kwargs)

        orig_start_processes = self._orig_start_processes

        def start_processes(fn, args=(), nprocs=1, *more, **kwargs):
            # torch.multiprocessing.spawn calls this by its module's name.
            if part.on:
                try:
                    part.probe.event("spawned_training", nprocs=nprocs, location=fmt(user_frame(2)))
                except Exception as exc:
                    part.fail(exc)
            return orig_start_processes(fn, args, nprocs, *more, **kwargs)

        orig_conv_init = self._orig_conv_init

        @functools.wraps(orig_conv_init)
        def conv_init(conv, *args, **kwargs):
            # where the script builds each conv (a LightningModule's __init__): a conv-bias advice's line
            orig_conv_init(conv, *args, **kwargs)
            if part.on:
                try:
                    facts.BUILT_AT[conv] = fmt(user_frame(2))
                except Exception as exc:
                    part.fail(exc)

        self.timed_wrappers = (tensor, clip_grad_norm_)
        torch.nn.modules.conv._ConvNd.__init__ = conv_init
        torch.optim.lr_scheduler.LRScheduler.__init__ = scheduler_init
        torch.autograd.set_detect_anomaly.__init__ = set_detect_anomaly_init
        torch.autograd.detect_anomaly.__init__ = detect_anomaly_init
        torch.autograd.profiler.profile.__init__ = profiler_init
        self._spawn_module.start_processes = torch.multiprocessing.start_processes = start_processes

    def uninstall(self) -> None:
        self.disarm()
        torch.optim.lr_scheduler.LRScheduler.__init__ = self._orig_scheduler_init
        torch.autograd.set_detect_anomaly.__init__, torch.autograd.detect_anomaly.__init__ = self._orig_anomaly_inits
        torch.autograd.profiler.profile.__init__ = self._orig_profiler_init
        torch.nn.modules.conv._ConvNd.__init__ = self._orig_conv_init
        self._spawn_module.start_processes = torch.multiprocessing.start_processes = self._orig_start_processes

    def arm(self) -> None:
        torch.tensor, torch.nn.utils.clip_grad_norm_ = self.timed_wrappers

    def disarm(self) -> None:
        torch.tensor = self._orig_tensor
        torch.nn.utils.clip_grad_norm_ = self._orig_clip

    def schedulers(self) -> list:
        return [s for s in (ref() for ref in self.scheduler_refs) if s is not None]

    def on_anomaly_switched_on(self) -> None:
        """Where the script switched anomaly detection on: the line the advice names."""
        try:
            self.probe.fact("anomaly_detection_at", {"location": fmt(user_frame(3))})
        except Exception as exc:
            self.fail(exc)

    def on_tensor_copy(self) -> None:
        if self.tensor_copy_reported or not self.probe.clock.step:
            return
        self.tensor_copies += 1
        if self.tensor_copies >= TENSOR_COPY_REPORT_AFTER:
            self.tensor_copy_reported = True
            self.probe.event("tensor_from_ndarray", location=fmt(user_frame(3)), count=self.tensor_copies)

    # --- gradient norms -----------------------------------------------------------------
    def grad_norm_if_due(self, optimizer) -> None:
        """A sample of ``optimizer``'s gradients at the step numbered ``next_norm_step`` (or
        later): from a timed step's optimizer pre hook or an untimed step's end."""
        if self.probe.clock.step < self.next_norm_step:
            return
        try:
            self._sample_grad_norm(optimizer)
        except Exception as exc:
            self.fail(exc)

    def _sample_grad_norm(self, optimizer) -> None:
        if not self.on or self.spike_reported:
            return
        started = perf_counter_ns()
        step = self.probe.clock.step
        self._collect()
        if self.pending_norm is not None:
            return  # the last sample's copy is still in flight: the next step tries again
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        on_host = None
        if grads:
            norm = total_norm(grads)
            if norm.device.type == "cpu":
                on_host = float(norm)
            else:
                host = torch.empty((), dtype=norm.dtype, pin_memory=True)
                host.copy_(norm, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self.pending_norm = (step, host, event)
        self._plan_next_norm(step, started)
        if on_host is not None:
            self._observe(step, on_host)  # after the plan: a spike stops the samples

    def _plan_next_norm(self, step: int, started: int) -> None:
        """Space the samples so that their cost stays within budget. The first sample's
        cost is never used: it pays for warming up (lazy kernel loading on a GPU). The
        cheapest of the last few samples is the cost, and the spacing at most doubles a
        sample: one sample the scheduler paused for 1 ms put the next beyond a 2000-step run."""
        last_step, last_ns = self.last_norm
        if last_ns and step > last_step:
            cost = perf_counter_ns() - started
            self.norm_costs.append(cost)
            step_ns = (started - last_ns) / (step - last_step)
            budget_ns = max(NORM_BUDGET_NS, NORM_BUDGET_SHARE * step_ns)
            self.norm_every = min(max(GRAD_NORM_EVERY, math.ceil(min(self.norm_costs) / budget_ns)), 2 * self.norm_every)
        self.last_norm = (step, started)
        self.next_norm_step = step + self.norm_every

    def _collect(self) -> None:
        if self.pending_norm is None:
            return
        step, host, event = self.pending_norm
        if event.query():
            self.pending_norm = None
            self._observe(step, float(host))

    def _observe(self, step: int, norm: float) -> None:
        history = self.norms
        median = statistics.median(history) if len(history) >= MIN_NORM_SAMPLES else None
        if not math.isfinite(norm) or (median and norm > SPIKE_FACTOR * median):
            self.spike_reported = True
            self.next_norm_step = math.inf
            self.probe.event("grad_norm_spike", norm=norm if math.isfinite(norm) else str(norm),
                             median=median, step=step)
            return
        if math.isfinite(norm):
            history.append(norm)
            del history[:-NORM_HISTORY]


def total_norm(grads: list) -> torch.Tensor:
    """The 2-norm of all of ``grads`` together. torch's foreach norm runs one kernel per
    device and dtype (8 tensors: ~16 µs here, against ~22 µs one norm per tensor);
    gradients spread over devices, which one ``stack`` cannot take, and a torch without
    it take one norm per tensor (torch's own ``get_total_norm`` came in 2.6)."""
    with torch.no_grad():
        try:
            norms = foreach_norm(grads)
            if norms is not None:
                return torch.linalg.vector_norm(torch.stack(norms))
        except RuntimeError:  # gradients on several devices
            pass
        device = grads[0].device
        return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g).to(device) for g in grads]))
