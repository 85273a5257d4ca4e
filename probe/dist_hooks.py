"""Collective time (``comm``): calls into ``torch.distributed`` collectives, wrapped at
module level, in processes where torch.distributed is available.

DDP's gradient all-reduce runs inside the C++ reducer during backward, not through
these functions: for DDP it shows inside ``backward`` (the straggler's peers wait there).
"""

from __future__ import annotations

import threading

import torch.distributed as dist

from fastmon.phases import COMM
from fastmon.probe.guard import Part

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
               "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "all_to_all",
               "all_to_all_single", "reduce", "gather", "scatter", "monitored_barrier")


class DistPart(Part):
    name = "distributed"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.originals: dict[str, object] = {}

    def install(self) -> None:
        for name in COLLECTIVES:
            original = getattr(dist, name, None)
            if original is not None:
                self.originals[name] = original
                setattr(dist, name, self._wrap(original))

    def uninstall(self) -> None:
        for name, original in self.originals.items():
            setattr(dist, name, original)
        self.originals = {}

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
