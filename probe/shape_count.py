"""A compiled model's FLOPs, counted on shapes alone: its eager module (``_orig_mod``)
runs forward and backward on meta tensors (shapes and dtypes, no data, no kernel) of the
training forward's inputs, parameters and buffers, under the counting mode, with
``torch.compiler.set_stance("force_eager")`` so that compiled code it reaches runs as the
eager code it came from and dynamo compiles nothing for meta tensors. It runs in the
training thread between two steps (``torch.func.functional_call`` puts the meta tensors in
the module's place for the call, and back), and leaves the random generator as it found it.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from fastmon.probe.torch_private import tree_leaves, tree_map

FORWARDS_KEPT = 16  # a counted step's training forwards (gradient accumulation's micro-batches)


def can_run_eagerly() -> bool:
    """Whether this torch can run compiled code as eager code on demand (2.6 and later)."""
    return hasattr(torch.compiler, "set_stance")


@dataclass(frozen=True)
class Forward:
    """One training forward of a compiled model: the module, and its arguments as meta tensors."""

    module: weakref.ref
    args: tuple
    kwargs: dict
    autocast: str | None  # the dtype autocast ran its matrix work in, where it was on (meta tensors know no autocast)


class Watch:
    """The training forwards of the step being counted, as the forward wrapper sees them."""

    def __init__(self) -> None:
        self.forwards: list[Forward] = []
        self.seen = 0

    def add(self, module, args, kwargs) -> None:
        self.seen += 1
        if len(self.forwards) < FORWARDS_KEPT:
            self.forwards.append(remembered(module, args, kwargs))


def remembered(module, args, kwargs) -> Forward:
    """A training forward's arguments, kept as shapes (meta tensors: no memory, no copy)."""
    args, kwargs = tree_map(lambda value: meta_like(value) if isinstance(value, torch.Tensor) else value,
                            (tuple(args), dict(kwargs or {})))
    return Forward(weakref.ref(module), args, kwargs, autocast_dtype())


def meta_like(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor of ``tensor``'s shape and dtype on the meta device (no memory), as a leaf that
    requires grad where it did."""
    return torch.empty_like(tensor, device="meta").requires_grad_(tensor.requires_grad)


def autocast_dtype() -> str | None:
    for device in ("cuda", "cpu"):
        if torch.is_autocast_enabled(device):
            getter = getattr(torch, "get_autocast_dtype", None)
            dtype = getter(device) if getter else (torch.get_autocast_gpu_dtype() if device == "cuda"
                                                    else torch.get_autocast_cpu_dtype())
            return str(dtype).removeprefix("torch.")
    return None


def count_on_shapes(forwards: list[Forward], mode, forward_part) -> None:
    """Runs each of ``forwards`` forward and backward on meta tensors under ``mode`` (the
    counting dispatch mode), with the probe's forward timing stood aside."""
    rng = torch.get_rng_state()
    depth, forward_part.depth = forward_part.depth, 1  # fastmon's own forward wrappers pass it through
    try:
        with torch.compiler.set_stance("force_eager"), mode, torch.enable_grad():
            for forward in forwards:
                module = forward.module()
                if module is not None:
                    _forward_and_backward(getattr(module, "_orig_mod", module), forward)
    finally:
        forward_part.depth = depth
        torch.set_rng_state(rng)


def _forward_and_backward(module, forward: Forward) -> None:
    # named_parameters() names a tied weight once: functional_call ties it again
    params = {name: meta_like(p) for name, p in module.named_parameters()}
    buffers = {name: torch.empty_like(b, device="meta") for name, b in module.named_buffers()}
    out = torch.func.functional_call(module, {**params, **buffers}, forward.args, forward.kwargs)
    outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    trained = [p for p in params.values() if p.requires_grad]
    if outputs and trained:
        torch.autograd.grad(outputs, trained, grad_outputs=[torch.ones_like(t) for t in outputs],
                            allow_unused=True)
