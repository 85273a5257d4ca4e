"""Forward timing: the outermost ``nn.Module`` call in the training thread.

Global module hooks cost about a microsecond on every module call, so they only run for
the first ``DISCOVERY_STEPS`` steps, to learn which modules are called at the top
level (the model, the loss). Then they are replaced by hooks on those instances only.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch.nn.modules import module as nn_module

from fastmon.probe import facts
from fastmon.probe.batch_change import remember_inputs
from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.phases import FORWARD

DISCOVERY_STEPS = 3


def batch_size_of(obj) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    for _ in range(4):
        if isinstance(obj, torch.Tensor):
            return int(obj.shape[0]) if obj.dim() else 1
        if isinstance(obj, (list, tuple)) and obj:
            obj = obj[0]
        elif isinstance(obj, dict) and obj:
            obj = next(iter(obj.values()))
        else:
            return 0
    return 0


class ForwardPart(Part):
    name = "forward"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.depth = 0
        self.main_thread = threading.main_thread().ident
        self.roots: "weakref.WeakValueDictionary[int, torch.nn.Module]" = weakref.WeakValueDictionary()
        self.root_has_params: dict[int, bool] = {}
        self.handles: list = []
        self.discovering = True
        self.eval_grad_reported = False
        self.autocast_seen = False
        self.last_inputs = None

    def install(self) -> None:
        self.handles = [
            nn_module.register_module_forward_pre_hook(self._pre),
            nn_module.register_module_forward_hook(self._post, always_call=True),
        ]

    def uninstall(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def after_step(self, step: int) -> None:
        if self.discovering and step + 1 >= DISCOVERY_STEPS and self.depth == 0:
            self.uninstall()
            self.discovering = False
            for module in list(self.roots.values()):
                self._hook_instance(module)

    def _hook_instance(self, module) -> None:
        self.handles.append(module.register_forward_pre_hook(self._pre))
        self.handles.append(module.register_forward_hook(self._post, always_call=True))

    def _pre(self, module, args):
        if not self.on or threading.get_ident() != self.main_thread:
            return None
        self.depth += 1
        if self.depth != 1:
            return None
        try:
            self.on_root_forward(module, args)
        except Exception as exc:
            self.depth = 0
            self.fail(exc)
        return None

    def on_root_forward(self, module, args) -> None:
        probe = self.probe
        clock = probe.clock
        key = id(module)
        has_params = self.root_has_params.get(key)
        if has_params is None:
            self.roots[key] = module
            self.root_has_params[key] = has_params = any(True for _ in module.parameters())
            if has_params:
                probe.fact(f"model.{type(module).__name__}", facts.describe_model(module))
            if probe.dist_part is not None and isinstance(module, torch.nn.parallel.DistributedDataParallel):
                probe.dist_part.watch_ddp(module)
                probe.ddp_watch = probe.dist_part
        if module.training:
            if clock.backwards_since_step and probe.optimizer_part.fallback:
                probe.end_step()
            if clock.loader_batches == 0:
                if clock.forwards == 0:
                    clock.reclassify_gap_as_data_wait()
                if has_params and args:
                    clock.samples += batch_size_of(args[0])
            if has_params:
                clock.micro_batches += 1
                if probe.cuda:  # for a batch-size trial between steps (batch_change.check_fits)
                    self.last_inputs = (weakref.ref(module), remember_inputs(args))
            clock.forwards += 1
        else:
            clock.eval_forwards += 1
            if torch.is_grad_enabled() and has_params:
                clock.eval_grad_forwards += 1
                if not self.eval_grad_reported:
                    self.eval_grad_reported = True
                    probe.event("eval_forward_with_grad", location=fmt(user_frame(4)),
                                module=type(module).__name__)
        if not self.autocast_seen and clock.forwards == 1 and (
                torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu")):
            self.autocast_seen = True
            probe.fact("amp.autocast", {"enabled": True})
        clock.enter(FORWARD)
        probe.cuda_mark("forward_start")

    def _post(self, module, args, output):
        if not self.on or threading.get_ident() != self.main_thread or self.depth == 0:
            return None
        self.depth -= 1
        if self.depth == 0:
            try:
                self.on_root_forward_end()
            except Exception as exc:
                self.fail(exc)
        return None

    def on_root_forward_end(self) -> None:
        self.probe.clock.leave()
        self.probe.cuda_mark("forward_end")
