"""Forward timing: the outermost ``nn.Module`` call in the training thread.

Global module hooks run on every module call and send each call through torch's slow
path, so they only run for the first ``DISCOVERY_STEPS`` steps, to learn which modules
are called at the top level (the model, the loss). Then each of those instances gets a
timing wrapper as its ``_compiled_call_impl``: the per-instance slot that
``nn.Module.__call__`` calls when set (``Module.compile()`` uses it), which keeps torch's
hook-free fast path, costs one Python call per top-level forward, and is left out by
``nn.Module.__getstate__``, so pickling, ``torch.save`` and ``copy.deepcopy`` of the model
never carry it. Instances where that slot cannot be ours keep instance hooks: those
called inside a ``DataParallel`` (its replicas copy the instance dict, slot included).

Between timed steps the slot holds the module's plain call (its key stays: a key that
comes and goes in ``__dict__`` costs more than it saves). ``model.eval()`` in an untimed
step starts timing at once, so a validation pass is seen in its step. The discovery's
steps are all timed.

A timed step with a backward but no top-level forward seen means a model the discovery did
not meet (a new model): discovery runs again, at most every ``REDISCOVER_AFTER`` steps,
twice as far apart each time it finds nothing new.

Dynamo guards on the global hook dicts: a model compiled while the discovery's hooks are
in is compiled again when they go. So once ``torch.compile`` or ``Module.compile`` is
called, the global hooks leave for good, and the module compiled is a root at once.
"""

from __future__ import annotations

import math
import threading
import warnings
import weakref
from time import perf_counter_ns

import torch
from torch.nn.modules import module as nn_module

from fastmon.probe import facts
from fastmon.probe.batch_change import remember_inputs
from fastmon.probe.compiling import is_compiling
from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.probe.tokens import token_counts
from fastmon.common.phases import FORWARD
from fastmon.common.step_events import ENTER, FORWARD_EVAL, FORWARD_EVAL_GRAD, FORWARD_TRAIN, LEAVE, SAMPLES, TOKENS

DISCOVERY_STEPS = 3
REDISCOVER_AFTER = 50
AUTOCAST_CHECK_EVERY = 10  # steps between looks at the autocast state, until it is seen on


def batch_size_of(obj, dim: int = 0) -> int:
    """Samples in a batch: dimension ``dim`` (1 for a sequence-first model) of its first tensor."""
    kind = type(obj)
    if (kind is tuple or kind is list) and obj and type(first := obj[0]) is torch.Tensor:
        return first.shape[dim] if first.ndim > dim else 1  # (inputs, targets): most batches
    for _ in range(4):
        if isinstance(obj, torch.Tensor):
            return int(obj.shape[dim]) if obj.dim() > dim else 1
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
        self.cuda = probe.cuda
        self.main_thread = threading.main_thread().ident
        self.roots: "weakref.WeakValueDictionary[int, torch.nn.Module]" = weakref.WeakValueDictionary()
        self.root_has_params: dict[int, bool] = {}
        self.sequence_first: set[int] = set()  # roots whose inputs are (time, batch, ...)
        self.token_roots: set[int] = set()  # roots holding an nn.Embedding: their integer input is tokens
        self.handles: list = []
        self.global_handles: list = []  # the discovery's global hooks, also in handles
        self.compile_in_use = False  # torch.compile was called: no global hook again
        self.hooked: set[int] = set()  # roots timed by instance hooks instead
        # The roots timed through their call slot: what arm and disarm visit (a list, not the
        # WeakValueDictionary: its iteration alone is several µs cold). Weak references only:
        # a wrapper holds its module, so only the module's own slot may hold the wrapper.
        self.timed_slots: list[weakref.ref] = []
        self.discovering = True
        self.discovery_ends = DISCOVERY_STEPS
        self.rediscover_at = 0
        self.rediscover_wait = REDISCOVER_AFTER
        self.roots_before = 0
        self.eval_grad_reported = False
        self.next_autocast_check = 0
        self.last_inputs = None
        self.count_watch = None  # a compiled model's FLOP count: the counted step's forwards (shape_count.Watch)
        self._orig_train = nn_module.Module.train
        self._orig_compile = torch.compile
        self._orig_module_compile = nn_module.Module.compile

    def install(self) -> None:
        self._install_train()
        self._install_compile()
        if not self.discovering:  # reinstalled after a suspend: the roots are known
            self._time_roots()
            return
        self._hook_globally()

    def uninstall(self) -> None:
        nn_module.Module.train = self._orig_train
        torch.compile, nn_module.Module.compile = self._orig_compile, self._orig_module_compile
        for handle in self.handles:
            handle.remove()
        self.handles = []
        for module in list(self.roots.values()):
            slot = module.__dict__.get("_compiled_call_impl")
            if self._is_ours(slot) and slot.previous is not None:
                module.__dict__["_compiled_call_impl"] = slot.previous
            elif self._is_ours(slot) or self._is_plain(slot, module):
                del module.__dict__["_compiled_call_impl"]

    def arm(self) -> None:
        if self.discovering:
            return
        for ref in self.timed_slots:
            module = ref()
            if module is not None:
                self._wrap_call(module)

    def disarm(self) -> None:
        # The slot keeps its key, with the plain call in it: a key that comes and goes in the
        # module's __dict__ would cost more than the wrapper it saves.
        for ref in self.timed_slots:
            module = ref()
            if module is None:
                continue
            slot = module.__dict__.get("_compiled_call_impl")
            if self._is_ours(slot):
                module.__dict__["_compiled_call_impl"] = slot.previous or module._call_impl

    def _install_train(self) -> None:
        """``model.eval()`` in an untimed step starts timing: a validation pass is seen in its step."""
        part, orig_train = self, self._orig_train
        get_ident, main_thread = threading.get_ident, self.main_thread

        def train(module, mode: bool = True):
            if not mode and not (part.compile_in_use and is_compiling()) and not part.probe.clock.timing \
                    and part.on and get_ident() == main_thread and id(module) in part.roots:
                part.probe.time_from_here()
            return orig_train(module, mode)

        nn_module.Module.train = train

    def _install_compile(self) -> None:
        """``torch.compile(model)`` and ``model.compile()``: the module is a root before its
        first call, and the discovery's global hooks leave before dynamo can guard on them."""
        part, orig_compile, orig_module_compile = self, self._orig_compile, self._orig_module_compile

        def compile(model=None, *args, **kwargs):
            compiled = orig_compile(model, *args, **kwargs)
            if not part.on:
                return compiled
            if isinstance(compiled, torch.nn.Module):
                part.guarded(part.on_compiled, compiled)
                return compiled
            part.guarded(part.on_compiled, None)
            if model is None or isinstance(getattr(model, "__self__", None), torch.nn.Module):
                return compiled  # a decorator to come back through here; Module.compile's call
            return part.probe.optimizer_part.wrap_compiled_function(compiled)

        def module_compile(module, *args, **kwargs):
            result = orig_module_compile(module, *args, **kwargs)
            if part.on:
                part.guarded(part.on_compiled, module)
            return result

        compile.__wrapped__ = orig_compile
        compile.__doc__ = orig_compile.__doc__
        module_compile.__wrapped__ = orig_module_compile
        torch.compile, nn_module.Module.compile = compile, module_compile

    def guarded(self, call, *args) -> None:
        try:
            call(*args)
        except Exception as exc:
            self.fail(exc)

    def on_compiled(self, module) -> None:
        if not self.compile_in_use:
            self.compile_in_use = True
            self.probe.event("compile_called", location=fmt(user_frame(3)))
            for other in (self.probe.backward_part, self.probe.optimizer_part):
                if other.on:
                    try:
                        other.on_compile_in_use()
                    except Exception as exc:
                        other.fail(exc)
        if self.global_handles and self.depth == 0:
            for handle in self.global_handles:
                handle.remove()
            self.handles = [h for h in self.handles if h not in self.global_handles]
            self.global_handles = []
            self.discovering = False
            self._time_roots()
        if module is not None and id(module) not in self.roots:
            self._first_sight(module)
            if not self.discovering:
                self.timed_slots.append(weakref.ref(module))
                self._wrap_call(module)

    def after_step(self, step: int) -> None:
        if self.discovering and step + 1 >= self.discovery_ends and self.depth == 0:
            for handle in self.handles:  # the global hooks (and instance hooks, put back below)
                handle.remove()
            self.handles, self.global_handles = [], []
            self.discovering = False
            if len(self.roots) == self.roots_before:
                self.rediscover_wait *= 2
            self._time_roots()

    def forward_missed(self, step: int) -> bool:
        """A training step went by without a top-level forward that the probe saw;
        True when that starts a discovery."""
        if self.discovering or self.compile_in_use or step < self.rediscover_at:
            return False
        self.rediscover_at = step + self.rediscover_wait
        self.roots_before = len(self.roots)
        self.discovering = True
        self.discovery_ends = step + DISCOVERY_STEPS
        self._hook_globally()
        return True

    def _hook_globally(self) -> None:
        # torch warns that these global hooks fire for an OptimizedModule too: the
        # discovery counts depth, so they do no harm, and the user did not add them.
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        if self.compile_in_use:
            self.discovering = False
            return
        self.global_handles = [nn_module.register_module_forward_pre_hook(self._pre)]
        self.handles += self.global_handles
        try:
            post = nn_module.register_module_forward_hook(self._post, with_kwargs=True, always_call=True)
        except TypeError:  # torch < 2.6: global hooks see no keywords (a forward called with them: no tokens)
            post = nn_module.register_module_forward_hook(self._post, always_call=True)
        self.global_handles.append(post)
        self.handles.append(post)

    def _time_roots(self) -> None:
        roots = list(self.roots.values())
        self.hooked = {id(m) for root in roots if isinstance(root, torch.nn.DataParallel) for m in root.modules()}
        self.timed_slots = [weakref.ref(module) for module in roots if id(module) not in self.hooked]
        for module in roots:
            if id(module) in self.hooked:
                self.handles.append(module.register_forward_pre_hook(self._pre))
                self.handles.append(module.register_forward_hook(self._post, with_kwargs=True, always_call=True))
            else:
                self._wrap_call(module)

    def check_call_slots(self) -> None:
        """A ``Module.compile()`` after the wrapping replaced the wrapper: wrap again."""
        for module in list(self.roots.values()):
            if id(module) not in self.hooked and not self._is_ours(module.__dict__.get("_compiled_call_impl")):
                self._wrap_call(module)

    def _is_ours(self, slot) -> bool:
        return getattr(slot, "fastmon_part", None) is self

    def _wrap_call(self, module) -> None:
        # A module compiled with ``Module.compile()`` already uses the slot: time around it.
        previous = module.__dict__.get("_compiled_call_impl")
        if self._is_ours(previous):
            return
        if self._is_plain(previous, module):
            previous = None
        inner = previous or module._call_impl
        part, clock, put = self, self.probe.clock, self.probe.clock.put
        get_ident, main_thread = threading.get_ident, self.main_thread

        def timed_call(*args, **kwargs):
            # compile_in_use first: an attribute read, where the call costs ~80 ns a forward
            if (part.compile_in_use and is_compiling()) or not clock.timing or part.depth or not part.on \
                    or get_ident() != main_thread:
                return inner(*args, **kwargs)
            try:
                part.on_root_forward(module, args, kwargs)
            except Exception as exc:
                part.fail(exc)
                return inner(*args, **kwargs)
            part.depth = 1
            try:
                return inner(*args, **kwargs)
            finally:
                part.depth = 0
                put((LEAVE, perf_counter_ns()))
                if part.cuda:
                    part.mark_forward_end()

        timed_call.fastmon_part, timed_call.previous = self, previous
        module.__dict__["_compiled_call_impl"] = timed_call

    @staticmethod
    def _is_plain(slot, module) -> bool:
        """The slot holds the module's own call, put there by ``disarm``."""
        return getattr(slot, "__self__", None) is module and getattr(slot, "__func__", None) is type(module)._call_impl

    # --- discovery hooks, and instance hooks where the call slot is not ours ----------
    def _pre(self, module, args):
        if is_compiling() or not self.probe.clock.timing or not self.on or threading.get_ident() != self.main_thread:
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

    def _post(self, module, args, *rest):
        # (kwargs, output), or (output) where torch passes no keywords: a torch before 2.6's
        # global hooks, and any always-called hook after a forward that raised
        if is_compiling() or not self.on or threading.get_ident() != self.main_thread or self.depth == 0:
            return None
        self.depth -= 1
        if self.depth == 0:
            if module.training and len(rest) == 2:  # global hooks see a call's keywords only here
                try:
                    self.count_tokens(module, args, rest[0])
                except Exception as exc:
                    self.fail(exc)
            self.probe.clock.leave()
            if self.cuda:
                self.mark_forward_end()
        return None

    # --- timing ---------------------------------------------------------------------
    def on_root_forward(self, module, args, kwargs=None) -> None:
        """A top-level forward starts: the probe's own bookkeeping, then the event."""
        probe = self.probe
        clock = probe.clock
        has_params = self.root_has_params.get(id(module))
        if has_params is None:
            has_params = self._first_sight(module)
        if module.training:
            if clock.backwards_since_step and not probe.optimizer_part.created:
                probe.end_step()
            if clock.loader_batches:
                clock.loader_fed = True
                probe.loader_part.fed_training()
            elif not clock.loader_fed or clock.eval_took_batch:
                if clock.forwards == 0:
                    clock.reclassify_gap_as_data_wait()
                if has_params and args:
                    clock.put((SAMPLES, batch_size_of(args[0], 1 if id(module) in self.sequence_first else 0)))
            if kwargs is not None:  # called through the slot; the hooks' way counts at the call's end (_post)
                self.count_tokens(module, args, kwargs)
            if has_params and self.count_watch is not None:
                self.count_watch.add(module, args, kwargs)
            if has_params and self.cuda:  # for a batch-size trial between steps (batch_change.check_fits)
                self.last_inputs = (weakref.ref(module), remember_inputs(args))
            if clock.step >= self.next_autocast_check and clock.forwards == 0:
                self._look_for_autocast(clock.step)
            clock.forwards += 1
            if has_params:
                clock.model_forwards += 1
            code = FORWARD_TRAIN if has_params else ENTER + FORWARD
        elif has_params and torch.is_grad_enabled():
            code = FORWARD_EVAL_GRAD
            if not self.eval_grad_reported:
                self.eval_grad_reported = True
                probe.event("eval_forward_with_grad", location=fmt(user_frame(4)), module=type(module).__name__)
        else:
            code = FORWARD_EVAL
            # What it took is not the training's batch (validation), or is taken again by a
            # training forward (a distilling teacher's), which then counts it as without a
            # DataLoader: the monitor, like this, lets an eval-mode forward's batch go.
            if clock.loader_batches:
                clock.loader_batches, clock.eval_took_batch = 0, True
                probe.loader_part.fed_eval()
        clock.put((code, perf_counter_ns()))
        if self.cuda:
            probe.cuda_mark("forward_start")

    def count_tokens(self, module, args, kwargs) -> None:
        if id(module) in self.token_roots and (counted := token_counts(args, kwargs)) is not None:
            self.probe.clock.put((TOKENS, *counted))

    def mark_forward_end(self) -> None:
        try:
            self.probe.cuda_mark("forward_end")
        except Exception as exc:
            self.fail(exc)

    def _first_sight(self, module) -> bool:
        key = id(module)
        self.roots[key] = module
        self.root_has_params[key] = has_params = any(True for _ in module.parameters())
        probe = self.probe
        if has_params:
            described = facts.describe_model(module)
            if described["sequence_first"]:
                self.sequence_first.add(key)
            if described["embedding"]:
                self.token_roots.add(key)
            probe.fact(f"model.{described['class']}", described)  # the model as the user wrote it
        if probe.dist_part is not None and isinstance(module, torch.nn.parallel.DistributedDataParallel):
            probe.dist_part.watch_ddp(module)
            probe.ddp_watch = probe.dist_part
        return has_params

    def _look_for_autocast(self, step: int) -> None:
        if torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu"):
            self.next_autocast_check = math.inf  # seen on: a fact for good
            self.probe.fact("amp.autocast", {"enabled": True})
        else:
            self.next_autocast_check = step + AUTOCAST_CHECK_EVERY
