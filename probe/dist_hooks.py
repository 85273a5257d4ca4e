"""Collective time (``comm``): calls into ``torch.distributed`` collectives, wrapped at
module level, and DDP's gradient all-reduce wait.

DDP's all-reduce runs inside the C++ reducer during backward, overlapped with the
gradient computation; what the host waits for after the last gradient is computed is
the communication that did not overlap. A post-accumulate-grad hook on the first few
parameters of a DDP model (the input side, whose gradients come last) marks the end of
the computation; the rest of that backward is charged to ``comm``.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

import torch.distributed as dist

from fastmon.common.phases import COMM
from fastmon.common.step_events import COMM_TAIL
from fastmon.probe.guard import Part

DDP_WATCHED_PARAMS = 2  # the input-side parameters whose gradients DDP's backward computes last

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "all_to_all",
               "all_to_all_single", "reduce", "gather", "scatter", "monitored_barrier")


class DistPart(Part):
    name = "distributed"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.originals: dict[str, object] = {}
        self.wrappers: dict[str, object] = {}  # name -> the timing wrapper, in while armed
        self.ddp_handles: list = []
        self.last_grad_ns = 0

    def install(self) -> None:
        self.originals = {name: getattr(dist, name) for name in COLLECTIVES if getattr(dist, name, None) is not None}
        self.wrappers = {name: self._wrap(original) for name, original in self.originals.items()}

    def arm(self) -> None:
        for name, wrapper in self.wrappers.items():
            setattr(dist, name, wrapper)

    def disarm(self) -> None:
        for name, original in self.originals.items():
            setattr(dist, name, original)

    def uninstall(self) -> None:
        self.disarm()
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

    def _wrap(self, original):
        part = self

        def collective(*args, **kwargs):
            if not part.on or threading.get_ident() != part.main_thread:
                return original(*args, **kwargs)
            clock = part.probe.clock
            clock.enter(COMM)
            try:
                return original(*args, **kwargs)
            finally:
                clock.leave()

        collective.__name__ = original.__name__
        collective.__wrapped__ = original
        return collective
