"""Hot-apply of a larger (or, on revert, the original) batch size.

Before a larger batch is used, it is tried between steps on a copy of the last batch (or,
once the loop has let it go, zeros of its shape and dtype: only memory is measured), on the
accelerator: a forward and a gradient computation of the training root at the new
size, with ``torch.autograd.grad`` (the parameters' ``.grad`` are not touched), buffers
(BatchNorm statistics) restored and the RNG state forked, so the trial changes nothing.
An out-of-memory error there refuses the change: it never reaches the user's loop.

Then every parameter group's learning rate (and a scheduler's ``base_lrs``, OneCycle's
``initial_lr``/``max_lr``/``min_lr``) is scaled by the rule the advice named, and the
DataLoader is rebuilt with the new batch size over exactly the remaining samples.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import torch
from torch.utils.data import BatchSampler

LR_KEYS = ("lr", "initial_lr", "max_lr", "min_lr")


class RememberedTensor(NamedTuple):
    """A forward's input, held weakly: holding the batch would keep its memory from the loop."""
    ref: weakref.ref
    shape: torch.Size
    dtype: torch.dtype
    device: torch.device


def remember_inputs(args) -> list:
    """A training forward's tensor arguments, remembered (kept only on CUDA)."""
    return [RememberedTensor(weakref.ref(a), a.shape, a.dtype, a.device) if isinstance(a, torch.Tensor) else a
            for a in args]


def grown(remembered: list, factor: int) -> list:
    """The remembered forward's arguments with ``factor`` times the batch, for a trial."""
    return [_grow(value, factor) for value in remembered]


def _grow(value, factor: int):
    if isinstance(value, RememberedTensor):
        # a loop like `model(x.cuda())` frees its batch after backward: the trial measures
        # memory, so zeros of the same shape stand in (zero is a valid token id and class)
        tensor = value.ref()
        value = tensor if tensor is not None else torch.zeros(value.shape, dtype=value.dtype, device=value.device)
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return torch.cat([value] * factor)
    return value


def _tensors(output):
    if isinstance(output, torch.Tensor):
        yield output
    elif isinstance(output, (list, tuple)):
        for item in output:
            yield from _tensors(item)
    elif isinstance(output, dict):
        for item in output.values():
            yield from _tensors(item)


def check_fits(probe, factor: int) -> None:
    """Raise RuntimeError when the training root does not fit ``factor`` times the batch."""
    if not (probe.cuda and torch.cuda.is_initialized()):
        return  # host memory is not probed: CPU training grows into RAM, not into an OOM here
    last = probe.forward_part.last_inputs
    if last is None:
        raise RuntimeError("no training forward seen yet")
    module_ref, args = last
    module = module_ref()
    if module is None:
        raise RuntimeError("the model is gone")
    inner = getattr(module, "module", module)  # DDP/DataParallel: their reducers must not see this trial
    saved = {name: buf.detach().clone() for name, buf in inner.named_buffers()}
    forward_part = probe.forward_part
    was_on, forward_part.on = forward_part.on, False  # the trial is not a training step
    try:
        with torch.random.fork_rng(devices=[torch.cuda.current_device()]), torch.enable_grad():
            bigger = grown(args, factor)
            outputs = [t for t in _tensors(inner(*bigger)) if t.requires_grad and t.is_floating_point()]
            params = [p for p in inner.parameters() if p.requires_grad]
            if outputs and params:
                torch.autograd.grad(sum(t.float().mean() for t in outputs), params, allow_unused=True)
    except torch.cuda.OutOfMemoryError as exc:
        raise RuntimeError(f"out of memory at {factor}x the batch: {str(exc).splitlines()[0]}") from None
    finally:
        forward_part.on = was_on
        with torch.no_grad():
            for name, buf in inner.named_buffers():
                if name in saved:
                    buf.copy_(saved[name])
        del saved
        torch.cuda.empty_cache()


def scale_learning_rates(probe, scale: float) -> None:
    for optimizer in probe.optimizer_part.optimizers():
        for group in optimizer.param_groups:
            for key in LR_KEYS:
                if isinstance(group.get(key), (int, float)):
                    group[key] = group[key] * scale
    for scheduler in probe.checks_part.schedulers():
        if hasattr(scheduler, "base_lrs"):
            scheduler.base_lrs = [lr * scale for lr in scheduler.base_lrs]


def new_batch_sampler(loader, batch_size: int) -> BatchSampler:
    if type(loader.batch_sampler) is not BatchSampler:
        raise RuntimeError("this DataLoader has its own batch_sampler: change its batch size in code")
    return BatchSampler(loader.sampler, batch_size, loader.drop_last)


def regroup(remaining: list, batch_size: int) -> list:
    """The remaining index batches in batches of ``batch_size``; a short last one is kept
    even with drop_last, so that no sample of this epoch is skipped."""
    flat = [index for batch in remaining for index in batch]
    return [flat[i:i + batch_size] for i in range(0, len(flat), batch_size)]
