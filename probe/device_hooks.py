"""Host-device traffic: host-to-device copies (``h2d``) and host syncs (``sync``).

Installed only when an accelerator is present: on a CPU-only machine no copy crosses to
a device and nothing waits on one, so nothing is wrapped and nothing is paid. The sync
wrappers time only calls on accelerator tensors; each first call site is reported once
with its file:line, and the per-step count goes into the step row. In untimed steps they
pass straight through: setting ``torch.Tensor`` attributes at each timed step would
invalidate the attribute caches of every tensor type.
"""

from __future__ import annotations

import sys
import threading

import torch

from fastmon.probe.compiling import is_compiling
from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.common.step_events import H2D_COPY
from fastmon.common.phases import H2D, SYNC

TENSOR_SYNC_METHODS = ("item", "tolist", "cpu", "numpy")
SYNC_FUNCTIONS = ("synchronize", "empty_cache")


class DevicePart(Part):
    name = "device"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.originals: list[tuple[object, str, object]] = []
        self.sync_sites: set = set()
        self.seen_call_sites: set = set()

    def install(self) -> None:
        for name in TENSOR_SYNC_METHODS:
            self._wrap(torch.Tensor, name, self._tensor_sync(getattr(torch.Tensor, name), name))
        for name in SYNC_FUNCTIONS:
            self._wrap(torch.cuda, name, self._function_sync(getattr(torch.cuda, name), name))
        self._wrap(torch.Tensor, "to", self._copy(torch.Tensor.to))
        self._wrap(torch.Tensor, "cuda", self._copy(torch.Tensor.cuda))

    def uninstall(self) -> None:
        for owner, name, original in reversed(self.originals):
            setattr(owner, name, original)
        self.originals = []

    def _wrap(self, owner, name, wrapper) -> None:
        self.originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, wrapper)

    def _active(self) -> bool:
        return not (self.probe.forward_part.compile_in_use and is_compiling()) and self.probe.clock.timing \
            and self.on and threading.get_ident() == self.main_thread

    def _tensor_sync(self, orig, name):
        part = self

        def method(tensor, *args, **kwargs):
            if not part._active() or tensor.device.type == "cpu":
                return orig(tensor, *args, **kwargs)
            part.sync_begin(name)
            try:
                return orig(tensor, *args, **kwargs)
            finally:
                part.probe.clock.leave()

        method.__name__ = name
        return method

    def _function_sync(self, orig, name):
        part = self

        def function(*args, **kwargs):
            if not part._active():
                return orig(*args, **kwargs)
            part.sync_begin(name)
            try:
                return orig(*args, **kwargs)
            finally:
                part.probe.clock.leave()

        function.__name__ = name
        return function

    def sync_begin(self, name: str) -> None:
        clock = self.probe.clock
        caller = sys._getframe(2)
        call_site = (caller.f_code, caller.f_lineno)
        if call_site not in self.seen_call_sites:  # the user frame is looked for once per call site
            self.seen_call_sites.add(call_site)
            where = user_frame(3)
            if where is not None and where not in self.sync_sites:
                self.sync_sites.add(where)
                self.probe.event("sync_site", call=name, location=fmt(where))
        clock.enter(SYNC)

    def _copy(self, orig):
        part = self

        def method(tensor, *args, **kwargs):
            if not part._active() or tensor.device.type != "cpu":
                return orig(tensor, *args, **kwargs)
            clock = part.probe.clock
            clock.enter(H2D)
            crossed = False
            try:
                out = orig(tensor, *args, **kwargs)
                crossed = out.device.type != "cpu"
                if crossed:
                    size = tensor.numel() * tensor.element_size()
                    clock.put((H2D_COPY, size, 0 if tensor.is_pinned() else size))
                return out
            finally:
                clock.leave(None if crossed else -1)

        return method
