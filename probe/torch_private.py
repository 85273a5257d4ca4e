"""The private torch APIs that differ between releases, each feature-detected here.

torch 2.11's Kineto events have no ``is_python_function`` (the H200's profile capture
broke on it): every accessor here falls back to what the public API tells, or to a safe
answer, so an older or newer torch measures a little less and never raises. ``missing()``
names what this torch lacks, for ``fastmon doctor``. The DataLoader's and Module's private
attributes the probe reads (``_num_yielded``, ``_iterator``, ``_compiled_call_impl``) have
kept their names since torch 2.1; ``missing()`` checks them on a real loader and module.
Dynamo's counters are read in ``compiling.py``, only once the script imported dynamo.
"""

from __future__ import annotations

import re

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
from torch.utils._pytree import tree_leaves, tree_map

__all__ = ["TorchDispatchMode", "current_dispatch_mode", "dispatch_mode_active", "foreach_norm", "is_python_frame",
           "kineto_events", "missing", "optimizer_hook_dicts", "pattern_matcher", "profiler_running",
           "tree_leaves", "tree_map"]

# what a Python frame of a with_stack capture is called, where the event cannot say
_PYTHON_FRAME = re.compile(r"^nn\.Module: |^<built-in |\(\d+\): ")


def kineto_events(profiler) -> list:
    """The raw events of a stopped ``torch.profiler.profile``."""
    return profiler.profiler.kineto_results.events()


def is_python_frame(event) -> bool:
    """True for a Python function's event (with_stack), not an operator's."""
    ask = getattr(event, "is_python_function", None)
    if ask is not None:
        return ask()
    return bool(_PYTHON_FRAME.search(event.name()))


def profiler_running() -> bool:
    """Whether an autograd profiler (torch.profiler's included) is recording now."""
    enabled = getattr(torch.autograd, "_profiler_enabled", None)
    if enabled is not None:
        return bool(enabled())
    return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def dispatch_mode_active() -> bool:
    """Whether the script runs under a TorchDispatchMode of its own."""
    depth = getattr(torch._C, "_len_torch_dispatch_stack", None)
    if depth is not None:
        return depth() > 0
    return current_dispatch_mode() is not None


def current_dispatch_mode():
    """The innermost TorchDispatchMode in force, or None."""
    return _get_current_dispatch_mode()


def foreach_norm(tensors: list) -> list | None:
    """One 2-norm per tensor in one kernel per device and dtype; None where torch has no
    ``_foreach_norm`` (the caller then takes one public norm per tensor)."""
    norm = getattr(torch, "_foreach_norm", None)
    return norm(tensors) if norm is not None else None


def optimizer_hook_dicts() -> tuple[dict, dict]:
    """torch's global optimizer pre- and post-hook dicts, keyed by the hook handle's id:
    fastmon swaps its own hook in place, keeping its order among the script's."""
    from torch.optim import optimizer

    return optimizer._global_optimizer_pre_hooks, optimizer._global_optimizer_post_hooks


def pattern_matcher():
    """torch's anti-pattern matchers ("TorchTidy"), or None."""
    try:
        from torch.profiler import _pattern_matcher
    except Exception:
        return None
    return _pattern_matcher


def missing() -> list[str]:
    """The private parts fastmon reads that this torch lacks, each with what goes unmeasured."""
    from torch.utils.data import DataLoader

    lacks = []
    event_type = getattr(getattr(torch._C, "_autograd", None), "_KinetoEvent", None)
    if event_type is not None and not hasattr(event_type, "is_python_function"):
        lacks.append("_KinetoEvent.is_python_function: captures tell Python frames from operators by name")
    if not hasattr(torch._C, "_len_torch_dispatch_stack"):
        lacks.append("torch._C._len_torch_dispatch_stack: a script's own dispatch mode is found by the innermost one")
    if getattr(torch, "_foreach_norm", None) is None:
        lacks.append("torch._foreach_norm: gradient norms are taken one tensor at a time (slower on small models)")
    try:
        optimizer_hook_dicts()
    except (ImportError, AttributeError):
        lacks.append("torch.optim.optimizer's global hook dicts: optimizer steps cannot be timed")
    if pattern_matcher() is None:
        lacks.append("torch.profiler._pattern_matcher: captures list no anti-patterns")
    loader = DataLoader([0, 1])
    iterator = iter(loader)
    for owner, name, lost in ((loader, "_auto_collation", "live batch-size changes"),
                              (loader, "_iterator", "live DataLoader changes"),
                              (iterator, "_num_yielded", "exact sample counts"),
                              (iterator, "_dataset_kind", "live DataLoader changes mid-epoch"),
                              (iterator, "_sampler_iter", "live DataLoader changes mid-epoch")):
        if not hasattr(owner, name):
            lacks.append(f"{type(owner).__name__}.{name}: {lost}")
    if not hasattr(torch.nn.Module, "_call_impl"):
        lacks.append("Module._call_impl: forward timing")
    return lacks
