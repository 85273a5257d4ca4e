"""The control side of hot-apply: changes the monitor asks for, made in the training
thread at a step boundary, each with its undo kept for a revert.

Every command is answered with an ``applied`` message: ok, or the error that stopped it
(in which case nothing changed). The monitor decides keep or revert from throughput.
"""

from __future__ import annotations

import functools

import torch

from fastmon.probe.batch_change import check_fits, new_batch_sampler, scale_learning_rates


class HotApply:
    def __init__(self, probe) -> None:
        self.probe = probe
        self.undo: dict[int, tuple[str, dict]] = {}
        self.waiting: list[dict] = []  # commands for a later step (every DDP rank at the same one)

    def handle(self, command: dict) -> None:
        at_step = command.get("at_step")
        if at_step is not None and self.probe.clock.step < at_step:
            self.waiting.append(command)
            return
        if at_step is not None and self.probe.clock.step > at_step:
            self.probe.message({"t": "applied", "exp": command.get("exp"), "ok": False, "step": self.probe.clock.step,
                                "error": f"rank {self.probe.rank} was past step {at_step}: not applied"})
            return
        kind, exp = command.get("t"), command.get("exp")
        if kind == "apply":
            action, params = command["action"], command.get("params", {})
            self._run(exp, action, params)
        elif kind == "revert" and exp in self.undo:
            action, params = self.undo.pop(exp)
            self._run(exp, action, params, reverting=True)

    def due(self) -> bool:
        """Commands whose step has come; called at each step boundary while any wait.
        True if any was carried out."""
        ready = [c for c in self.waiting if c["at_step"] <= self.probe.clock.step]
        self.waiting = [c for c in self.waiting if c["at_step"] > self.probe.clock.step]
        for command in ready:
            self.handle(command)
        return bool(ready)

    def _run(self, exp, action: str, params: dict, reverting: bool = False) -> None:
        probe = self.probe
        step = probe.clock.step

        def ack(ok: bool, error: str | None = None, note: str | None = None) -> None:
            probe.message({"t": "reverted" if reverting else "applied", "exp": exp, "action": action,
                           "ok": ok, "error": error, "note": note, "step": probe.clock.step,
                           "requested_step": step, "params": params})

        handler = getattr(self, f"_apply_{action}", None)
        if handler is None:
            ack(False, f"unknown action {action!r}")
            return
        try:
            previous = handler(params, ack)
        except Exception as exc:
            ack(False, f"{type(exc).__name__}: {exc}")
            return
        if not reverting and previous is not None:
            # A search applies several candidates under one experiment: undo restores the original.
            self.undo.setdefault(exp, (action, previous))

    # Each handler applies params, acks (now or later) and returns the params that undo it.
    def _apply_loader(self, params: dict, ack):
        state = self.probe.loader_part.training_loader()
        loader = state.ref() if state else None
        if loader is None:
            raise RuntimeError("no DataLoader seen in the training loop")
        previous = {k: getattr(loader, k) for k in params}
        self.probe.loader_part.schedule(params, ack)
        return previous

    def _apply_batch_size(self, params: dict, ack):
        """params: factor (2 doubles the batch), lr_scale (the LR follows: 2 for SGD's
        linear rule, 1.41 for Adam's sqrt rule)."""
        state = self.probe.loader_part.training_loader()
        loader = state.ref() if state else None
        if loader is None or not loader._auto_collation:
            raise RuntimeError("no batched DataLoader seen in the training loop")
        new_batch_sampler(loader, loader.batch_size)  # refuses a custom batch_sampler up front
        factor = float(params.get("factor", 2))
        new_size = max(1, round(loader.batch_size * factor))
        if new_size > loader.batch_size:
            check_fits(self.probe, round(new_size / loader.batch_size))
        scale = float(params.get("lr_scale", 1.0))
        previous = {"factor": loader.batch_size / new_size, "lr_scale": 1.0 / scale}
        scale_learning_rates(self.probe, scale)
        self.probe.loader_part.schedule({"batch_size": new_size}, ack)
        return previous

    def _apply_optimizer_foreach(self, params: dict, ack):
        """The multi-tensor (foreach) update: the same algorithm, batched kernels."""
        value = bool(params.get("value", True))
        groups = [g for opt in self.probe.optimizer_part.optimizers() for g in opt.param_groups if "foreach" in g]
        if not groups:
            raise RuntimeError("no optimizer with a foreach option has stepped")
        previous = {"value": groups[0]["foreach"]}
        for group in groups:
            group["foreach"] = value
        ack(True)
        return previous

    def _apply_cudnn_benchmark(self, params: dict, ack):
        previous = {"value": torch.backends.cudnn.benchmark}
        torch.backends.cudnn.benchmark = bool(params.get("value", True))
        ack(True)
        return previous

    def _apply_anomaly_detection(self, params: dict, ack):
        previous = {"value": torch.is_anomaly_enabled()}
        torch.autograd.set_detect_anomaly(bool(params.get("value", False)))
        ack(True)
        return previous

    def _apply_set_to_none(self, params: dict, ack):
        part = self.probe.optimizer_part
        previous = {"value": part.force_set_to_none}
        part.force_set_to_none = bool(params.get("value", True))
        ack(True)
        return previous

    def _apply_matmul_precision(self, params: dict, ack):
        previous = {"value": torch.get_float32_matmul_precision()}
        torch.set_float32_matmul_precision(params.get("value", "high"))
        ack(True)
        return previous

    def _apply_autocast(self, params: dict, ack):
        """Wrap each training root's forward in autocast (bf16 by default); undo unwraps."""
        dtype_name = params.get("dtype", "bfloat16")
        enable = params.get("value", True)
        roots = [m for key, m in self.probe.forward_part.roots.items()
                 if self.probe.forward_part.root_has_params.get(key)]
        if enable:
            if torch.is_autocast_enabled():
                raise RuntimeError("autocast is already on")
            device_type = "cuda" if torch.cuda.is_available() else "cpu"
            dtype = getattr(torch, dtype_name)
            for module in roots:
                if "forward" not in module.__dict__:
                    module.forward = functools.wraps(module.forward)(
                        torch.autocast(device_type=device_type, dtype=dtype)(module.forward))
        else:
            for module in roots:
                module.__dict__.pop("forward", None)
        ack(True)
        return {"value": not enable, "dtype": dtype_name}
