"""Collective time (``comm``): calls into ``torch.distributed`` collectives and the waits on
the ``Work`` they return, and DDP's gradient all-reduce wait.

``comm`` is what the step waited for (exposed): the host inside a collective's call (gloo
and FSDP's default ``async_op=False`` block there) or inside ``Work.wait()``. A collective
issued with ``async_op=True`` runs meanwhile under the step's other phases: that stretch,
from the issue's return to its end (a CPU work's future says when) or to the wait, is
``comm_overlapped``, beside the phases, not in the wall.

The module's functions stay wrapped for the whole run (DeepSpeed and others keep their own
references to them, taken at import); the wrappers time only timed steps. Calls from
autograd's threads count while the training thread is inside its backward (CUDA runs
backward hooks there, FSDP's reduce-scatter among them). Inside a torch.compile graph the
collectives are traced, not called: not timed (docs/sharded.md).

DDP's all-reduce runs inside the C++ reducer during backward, overlapped with the gradient
computation; what the host waits for after the last gradient is computed is the
communication that did not overlap. A post-accumulate-grad hook on the first few
parameters of a DDP model (the input side, whose gradients come last) marks the end of the
computation; the rest of that backward is charged to ``comm``.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

import torch
import torch.distributed as dist

from fastmon.common.phases import COMM
from fastmon.common.step_events import COMM_OVERLAP, COMM_TAIL, ENTER, LEAVE
from fastmon.probe.compiling import is_compiling
from fastmon.probe.guard import Part

DDP_WATCHED_PARAMS = 2  # the input-side parameters whose gradients DDP's backward computes last
PENDING_LIMIT = 1024  # async works issued and not yet waited on, remembered for their overlap

# Every collective and point-to-point call of torch.distributed that a training library makes
# (tests/test_sharded.py checks the calls under torch's own fsdp/ against this list).
COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_single", "all_gather_into_tensor",
               "all_gather_coalesced", "_all_gather_base", "all_gather_object", "reduce_scatter",
               "reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast",
               "broadcast_object_list", "barrier", "monitored_barrier", "all_to_all", "all_to_all_single", "reduce",
               "gather", "gather_object", "scatter", "scatter_object_list", "send", "recv", "isend", "irecv",
               "batch_isend_irecv", "send_object_list", "recv_object_list")


def _on_cpu(args) -> bool:
    """The call's first tensor (or first of a list of them) is in host memory."""
    for arg in args[:2]:
        if isinstance(arg, (list, tuple)) and arg:
            arg = arg[0]
        if isinstance(arg, torch.Tensor):
            return arg.device.type == "cpu"
    return False


class DistPart(Part):
    name = "distributed"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.originals: dict[str, object] = {}
        self.work_class, self.original_wait = None, None
        self.ddp_handles: list = []
        self.last_grad_ns = 0
        self.inside = threading.local()  # a collective's own calls of others are its time
        self.other_thread = 0  # the one other thread (autograd's) timed now, or 0
        # id(work) -> [issue returned at, ended at or 0, step]. Not the work: its future's callback
        # holds the entry, and a work held there would never be freed (nor its buffers).
        self.pending: dict[int, list] = {}

    def install(self) -> None:
        self.originals = {name: getattr(dist, name) for name in COLLECTIVES if getattr(dist, name, None) is not None}
        for name, original in self.originals.items():
            setattr(dist, name, self._wrap(original))
        work = getattr(dist, "Work", None) or getattr(dist, "_Work", None)
        if work is not None:
            try:
                work.wait = self._wrap_wait(work.wait)
            except (AttributeError, TypeError):  # a build whose Work takes no attribute: calls alone are timed
                return
            self.work_class, self.original_wait = work, work.wait.__wrapped__

    def uninstall(self) -> None:
        for name, original in self.originals.items():
            setattr(dist, name, original)
        if self.original_wait is not None:
            self.work_class.wait = self.original_wait
        for handle in self.ddp_handles:
            handle.remove()
        self.ddp_handles = []

    def watch_ddp(self, ddp_module) -> None:
        params = [p for p in ddp_module.module.parameters() if p.requires_grad][:DDP_WATCHED_PARAMS]
        for param in params:
            self.ddp_handles.append(param.register_post_accumulate_grad_hook(self._grad_ready))

    def _grad_ready(self, param) -> None:
        # Runs on autograd's thread: only a timestamp, read by the training thread later.
        self.last_grad_ns = perf_counter_ns()

    def backward_done(self, backward_started_ns: int) -> None:
        """Charge the tail of a DDP backward, after the last gradient, to ``comm``."""
        last = self.last_grad_ns
        if self.ddp_handles and last > backward_started_ns:
            self.probe.clock.put((COMM_TAIL, last))

    def _timed_here(self) -> bool:
        """This call is the step's to time: a timed step, the training thread, or the one
        other thread while the training thread waits in its backward; not inside another
        collective's call (the callers ask is_compiling first)."""
        if not self.on or not self.probe.clock.timing or getattr(self.inside, "depth", 0):
            return False
        me = threading.get_ident()
        if me == self.main_thread:
            return True
        if self.other_thread == 0 and self.probe.backward_part.depth:
            self.other_thread = me
            return True
        return False

    def _enter(self) -> None:
        self.inside.depth = 1
        self.probe.clock.put((ENTER + COMM, perf_counter_ns()))

    def _leave(self) -> None:
        self.probe.clock.put((LEAVE, perf_counter_ns()))
        self.inside.depth = 0
        if self.other_thread == threading.get_ident():
            self.other_thread = 0

    def _issued(self, work, args) -> None:
        """An async collective's work: remember when its issue returned, and where the work
        is in host memory, when it ends (a device's future ends at once: no such time)."""
        if len(self.pending) >= PENDING_LIMIT:
            self.pending.clear()  # works never waited on (polled, or dropped)
        entry = [perf_counter_ns(), 0, self.probe.clock.step]
        self.pending[id(work)] = entry
        if _on_cpu(args):
            try:
                work.get_future().add_done_callback(lambda _future: entry.__setitem__(1, perf_counter_ns()))
            except Exception:  # noqa: BLE001 - a backend without futures: the wait bounds the overlap
                pass

    def _wrap(self, original):
        part = self

        def collective(*args, **kwargs):
            # is_compiling first: dynamo folds it, and traces nothing of the probe's state
            if is_compiling() or not part._timed_here():
                return original(*args, **kwargs)
            part._enter()
            work = None
            try:
                work = original(*args, **kwargs)
                return work
            finally:
                part._leave()
                if work is not None and hasattr(work, "wait") and not isinstance(work, torch.Tensor):
                    try:
                        part._issued(work, args)
                    except Exception as exc:  # noqa: BLE001 - the probe's fault, never the call's
                        part.fail(exc)

        collective.__name__ = original.__name__
        collective.__doc__ = original.__doc__
        collective.__wrapped__ = original
        return collective

    def _wrap_wait(self, original):
        part = self

        def wait(work, *args, **kwargs):
            if is_compiling():
                return original(work, *args, **kwargs)
            # the entry goes in a timed step or not: one left behind could be another work's later
            entry = part.pending.pop(id(work), None) if part.pending else None
            if not part._timed_here():
                return original(work, *args, **kwargs)
            part._enter()
            started = perf_counter_ns()
            try:
                return original(work, *args, **kwargs)
            finally:
                part._leave()
                # an entry of a step before the last is a work never waited on whose id came back
                if entry is not None and entry[2] >= part.probe.clock.step - 1:
                    issued, ended = entry[0], entry[1]
                    part.probe.clock.put((COMM_OVERLAP, (min(ended, started) if ended else started) - issued))

        wait.__name__ = "wait"
        wait.__wrapped__ = original
        return wait
