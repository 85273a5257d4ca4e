"""The control side of hot-apply: changes the monitor asks for, made in the training
thread at a step boundary, each with its undo kept for a revert; and the interleaved
trial of a change that is cheap to switch (the monitor's ``interleave`` command), which
this side runs itself: block by block, at exact steps, in the order the monitor sent.

Every command is answered: ``applied`` (or ``reverted``) with ok and the first step that
runs with it, or the error that stopped it (in which case nothing changed). A step
number in a command or an answer is always the first step that runs with the change.
The monitor decides keep or revert from the recorded steps.
"""

from __future__ import annotations

import functools
import math
import weakref

import torch

from fastmon.probe.batch_change import check_fits, new_batch_sampler, scale_learning_rates

# The changes an interleaved trial switches back and forth: global settings or flags of
# fastmon's, each set in microseconds with nothing rebuilt.
SWITCHABLE = frozenset({"anomaly_detection", "set_to_none", "cudnn_benchmark", "matmul_precision", "autocast",
                        "optimizer_foreach", "num_threads"})


DEFAULT_VALUE = {"anomaly_detection": False, "set_to_none": True, "cudnn_benchmark": True,
                 "matmul_precision": "high", "autocast": True, "optimizer_foreach": True, "num_threads": 1}


def value_of(action: str, params: dict | None):
    """The setting ``params`` ask of a switchable change, as its handlers read them."""
    return (params or {}).get("value", DEFAULT_VALUE[action])


class Interleave:
    """A trial's schedule: block ``i`` covers ``block`` steps from ``first + i * block``
    and runs the change (``order[i] == "B"``) or the original (``"A"``). After the last
    block, the original until the monitor concludes."""

    def __init__(self, exp, action: str, params: dict, original: dict, order: str, block: int, first: int) -> None:
        self.exp, self.action, self.params, self.original = exp, action, params, original
        self.order, self.block, self.first = order, block, first
        self.running = "A"  # what the training runs now

    def setting_at(self, step: int) -> str:
        index = (step - self.first) // self.block
        return self.order[index] if 0 <= index < len(self.order) else "A"

    def next_switch(self, step: int) -> float:
        """The first step after ``step`` whose block runs something else, or inf."""
        index = max(0, (step - self.first) // self.block + 1)
        for i in range(index, len(self.order) + 1):
            setting = self.order[i] if i < len(self.order) else "A"
            if setting != self.setting_at(step):
                return self.first + i * self.block
        return math.inf


class Gone(RuntimeError):
    """What the change is made to no longer exists: the script let go of it."""


class HotApply:
    def __init__(self, probe) -> None:
        self.probe = probe
        self.undo: dict[int, tuple[str, dict, object]] = {}  # exp -> (action, params that undo it, its target)
        self.waiting: list[dict] = []  # commands for a later step (every DDP rank at the same one)
        self.trial: Interleave | None = None
        # As a task between steps (Probe.between_steps): the next step at which the trial switches.
        self.start_at = math.inf
        self.active = None  # never "active": the trial's steps are sampled as any others

    def handle(self, command: dict, next_step: int) -> None:
        """Carry out ``command`` before ``next_step`` runs, or keep it for its step."""
        at_step = command.get("at_step")
        if at_step is not None and next_step < at_step:
            self.waiting.append(command)
            return
        kind, exp = command.get("t"), command.get("exp")
        answer = "reverted" if kind == "revert" else "applied"
        if at_step is not None and next_step > at_step:
            self.probe.message({"t": answer, "exp": exp, "ok": False, "step": next_step,
                                "error": f"rank {self.probe.rank} was past step {at_step}: not carried out"})
            return
        if kind == "apply":
            self._run(exp, command["action"], command.get("params", {}), next_step)
        elif kind == "interleave":
            self._start_trial(command, next_step)
        elif kind == "conclude":
            self._conclude(command, next_step)
        elif kind == "revert":
            if exp in self.undo:
                action, params, target = self.undo.pop(exp)
                self._run(exp, action, params, next_step, reverting=True, target=target)
            else:  # it never took (it failed, or never reached this rank): nothing to undo
                self.probe.message({"t": "reverted", "exp": exp, "ok": True, "step": next_step,
                                    "note": "nothing to undo here"})

    def due(self, next_step: int) -> bool:
        """Commands whose step has come; called at each step boundary while any wait.
        True if any was carried out."""
        ready = [c for c in self.waiting if c["at_step"] <= next_step]
        self.waiting = [c for c in self.waiting if c["at_step"] > next_step]
        for command in ready:
            self.handle(command, next_step)
        return bool(ready)

    def _run(self, exp, action: str, params: dict, step: int, reverting: bool = False, target=None) -> None:
        probe = self.probe

        def ack(ok: bool, error: str | None = None, note: str | None = None, **extra) -> None:
            # A loader change takes at its iterator's next batch: that step, not the one asked.
            now = probe.clock.step if probe.clock.step > step else step
            probe.message({"t": "reverted" if reverting else "applied", "exp": exp, "action": action,
                           "ok": ok, "error": error, "note": note, "step": now, "requested_step": step,
                           "params": params, **extra})

        handler = getattr(self, f"_apply_{action}", None)
        if handler is None:
            ack(False, f"unknown action {action!r}")
            return
        try:
            previous, changed = handler(params, ack, target)
        except Gone as exc:
            ack(False, str(exc), gone=True)
            return
        except Exception as exc:
            ack(False, f"{type(exc).__name__}: {exc}")
            return
        if not reverting and previous is not None:
            # A search applies several candidates under one experiment: undo restores the original.
            self.undo.setdefault(exp, (action, previous, changed))
        if action in SWITCHABLE:
            self._settings_now()

    def _settings_now(self) -> None:
        """The global settings as a change left them, said at once: the advisor's rules read
        them (torch's thread count, say), and the next poll may be steps away."""
        try:
            self.probe.settings_fact()
        except Exception:
            pass

    # --- the interleaved trial ------------------------------------------------------
    def _start_trial(self, command: dict, step: int) -> None:
        action, params, exp = command["action"], command.get("params", {}), command.get("exp")
        if action not in SWITCHABLE or self.trial is not None:
            self.probe.message({"t": "applied", "exp": exp, "ok": False, "step": step,
                                "error": "a trial is under way" if self.trial else f"{action} cannot be switched"})
            return
        original = self._current(action, params)
        trial = Interleave(exp, action, params, original, command["order"], int(command["block"]), step)
        self.trial = trial
        self.undo[exp] = (action, original, None)
        switched = self._switch_to(trial, trial.setting_at(step), step)
        if switched is not None:
            self.probe.message({"t": "applied", "exp": exp, "ok": False, "step": step, "error": switched})
            return
        self.start_at = trial.next_switch(step)
        self.probe.message({"t": "applied", "exp": exp, "ok": True, "step": step, "action": action, "params": params,
                            "interleave": {"first": step, "block": trial.block, "order": trial.order}})

    def at_boundary(self, next_step: int) -> bool:
        """Before ``next_step``: the trial's switch due there. True if it switched."""
        trial = self.trial
        if trial is None or next_step < self.start_at:
            return False
        error = self._switch_to(trial, trial.setting_at(next_step), next_step)
        if error is not None:
            self.probe.message({"t": "event", "kind": "trial_stopped", "rank": self.probe.rank, "step": next_step,
                                "exp": trial.exp, "error": error})
            return True
        self.start_at = trial.next_switch(next_step)
        return True

    def _switch_to(self, trial: Interleave, setting: str, step: int) -> str | None:
        """Run the change (B) or the original (A) from ``step``: None, or why it could
        not (then the original is back and the trial stopped)."""
        if setting == trial.running:
            return None
        expected = value_of(trial.action, trial.original if trial.running == "A" else trial.params)
        try:
            previous, _ = getattr(self, f"_apply_{trial.action}")(trial.original if setting == "A" else trial.params,
                                                                  lambda *a, **k: None, None)
        except Exception as exc:
            self._stop_trial(trial)
            return f"{type(exc).__name__}: {exc}"
        trial.running = setting
        if value_of(trial.action, previous) != expected:
            # The script set it itself (anomaly detection at every epoch, say): what the
            # trial compares is no longer what it sets.
            self._stop_trial(trial)
            self.probe.message({"t": "event", "kind": "replaced", "rank": self.probe.rank, "step": step,
                                "exp": trial.exp, "what": f"{trial.action} (the script set it to {previous})"})
        return None

    def _stop_trial(self, trial: Interleave) -> None:
        try:
            if trial.running != "A":
                getattr(self, f"_apply_{trial.action}")(trial.original, lambda *a, **k: None, None)
        except Exception:
            pass
        trial.running = "A"
        self.trial, self.start_at = None, math.inf

    def _conclude(self, command: dict, step: int) -> None:
        """The monitor's verdict on the trial: keep the change from ``step`` or not."""
        trial, exp = self.trial, command.get("exp")
        if trial is None or trial.exp != exp:
            self.probe.message({"t": "reverted", "exp": exp, "ok": True, "step": step, "note": "no trial under way"})
            return
        keep = bool(command.get("keep"))
        error = self._switch_to(trial, "B" if keep else "A", step)
        self.trial, self.start_at = None, math.inf
        if not keep:
            self.undo.pop(exp, None)
        self._settings_now()
        self.probe.message({"t": "applied" if keep else "reverted", "exp": exp, "ok": error is None, "error": error,
                            "step": step, "action": trial.action, "params": trial.params if keep else trial.original})

    def _current(self, action: str, params: dict) -> dict:
        """What ``action`` is set to now, in its params' terms."""
        if action == "anomaly_detection":
            return {"value": torch.is_anomaly_enabled()}
        if action == "set_to_none":
            return {"value": self.probe.optimizer_part.force_set_to_none}
        if action == "cudnn_benchmark":
            return {"value": torch.backends.cudnn.benchmark}
        if action == "num_threads":
            return {"value": torch.get_num_threads()}
        if action == "matmul_precision":
            return {"value": torch.get_float32_matmul_precision()}
        if action == "optimizer_foreach":
            groups = self._foreach_groups()
            return {"value": groups[0]["foreach"] if groups else None}
        if action == "autocast":
            return {"value": False, "dtype": params.get("dtype", "bfloat16")}
        raise ValueError(action)

    # Each handler applies params, acks (now or later) and returns the params that undo it
    # and what it changed (where a revert must change that same object, or nothing).
    def _apply_loader(self, params: dict, ack, target):
        state = target() if target is not None else self.probe.loader_part.training_loader()
        loader = state.ref() if state else None
        if loader is None:
            if target is not None:  # a revert: the loader it changed is gone (the script made a new one)
                ack(True, note="the DataLoader it changed is gone")
                return None, None
            if state is not None:
                raise Gone("the script keeps no reference to its DataLoader (a new one for each epoch?): "
                           "a live change would end with the epoch")
            raise RuntimeError("no DataLoader seen in the training loop")
        previous = {k: getattr(loader, k) for k in params}
        self.probe.loader_part.schedule(params, ack, state)
        return previous, weakref.ref(state)

    def _apply_batch_size(self, params: dict, ack, target):
        """params: factor (2 doubles the batch), lr_scale (the LR follows: 2 for SGD's
        linear rule, 1.41 for Adam's sqrt rule)."""
        state = target() if target is not None else self.probe.loader_part.training_loader()
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
        self.probe.loader_part.schedule({"batch_size": new_size}, ack, state)
        return previous, weakref.ref(state)

    def _foreach_groups(self) -> list:
        return [g for opt in self.probe.optimizer_part.optimizers() for g in opt.param_groups if "foreach" in g]

    def _apply_optimizer_foreach(self, params: dict, ack, target):
        """The multi-tensor (foreach) update: the same algorithm, batched kernels."""
        value = params.get("value", True)
        value = None if value is None else bool(value)  # None: torch's own choice, as the script left it
        groups = self._foreach_groups()
        if not groups:
            raise RuntimeError("no optimizer with a foreach option has stepped")
        previous = {"value": groups[0]["foreach"]}
        for group in groups:
            group["foreach"] = value
        ack(True)
        return previous, None

    def _apply_cudnn_benchmark(self, params: dict, ack, target):
        previous = {"value": torch.backends.cudnn.benchmark}
        torch.backends.cudnn.benchmark = bool(params.get("value", True))
        ack(True)
        return previous, None

    def _apply_num_threads(self, params: dict, ack, target):
        # On the training thread, at a step boundary: OpenMP's thread count is the calling
        # thread's setting, so it must be set where the ops run.
        previous = {"value": torch.get_num_threads()}
        torch.set_num_threads(max(1, int(params.get("value", 1))))
        ack(True)
        return previous, None

    def _apply_anomaly_detection(self, params: dict, ack, target):
        previous = {"value": torch.is_anomaly_enabled()}
        torch.autograd.set_detect_anomaly(bool(params.get("value", False)))
        ack(True)
        return previous, None

    def _apply_set_to_none(self, params: dict, ack, target):
        part = self.probe.optimizer_part
        previous = {"value": part.force_set_to_none}
        part.force_set_to_none = bool(params.get("value", True))
        ack(True)
        return previous, None

    def _apply_matmul_precision(self, params: dict, ack, target):
        previous = {"value": torch.get_float32_matmul_precision()}
        torch.set_float32_matmul_precision(params.get("value", "high"))
        ack(True)
        return previous, None

    def _apply_autocast(self, params: dict, ack, target):
        """Wrap each training root's forward in autocast (bf16 by default), around any
        forward the script or a library set on the instance; undo takes out only fastmon's
        wrapper, and only where it is still the one in place."""
        dtype_name = params.get("dtype", "bfloat16")
        enable = params.get("value", True)
        roots = [m for key, m in self.probe.forward_part.roots.items()
                 if self.probe.forward_part.root_has_params.get(key)]
        if enable:
            if torch.is_autocast_enabled():
                raise RuntimeError("autocast is already on")
            if not roots:
                raise RuntimeError("no training model seen")
            device_type = "cuda" if torch.cuda.is_available() else "cpu"
            dtype = getattr(torch, dtype_name)
            wrapped = 0
            for module in roots:
                if getattr(module.__dict__.get("forward"), "fastmon_autocast", False):
                    continue  # already ours
                own = module.__dict__.get("forward")  # the script's or a library's, if any
                forward = functools.wraps(module.forward)(torch.autocast(device_type=device_type, dtype=dtype)(
                    module.forward))
                forward.fastmon_autocast, forward.fastmon_replaced = True, own
                module.forward = forward
                wrapped += 1
            previous = {"value": False, "dtype": dtype_name} if wrapped else None
        else:
            previous = None
            for module in roots:
                forward = module.__dict__.get("forward")
                if getattr(forward, "fastmon_autocast", False):
                    if forward.fastmon_replaced is None:
                        del module.__dict__["forward"]
                    else:
                        module.forward = forward.fastmon_replaced
                    previous = {"value": True, "dtype": dtype_name}
            previous = previous or {"value": False, "dtype": dtype_name}
        ack(True)
        return previous, None
