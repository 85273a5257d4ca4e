"""Tokens: the integer ids a language model's training forward is fed, read from the call's
arguments (``input_ids`` by name, in a dict or ``BatchEncoding``, or the first argument),
and the non-padding ones where an ``attention_mask`` in host memory says which. A mask on
the device is not read: summing it there would make the host wait for the device."""

from __future__ import annotations

from collections.abc import Mapping

import torch

NOT_READ = -1  # the non-padding count, where no mask in host memory tells it


def token_counts(args: tuple, kwargs: dict | None) -> tuple[int, int] | None:
    """(tokens, non-padding tokens or ``NOT_READ``) of one forward's inputs, or None where
    they hold no batch of integer ids (a vision model's images, a call without a batch)."""
    ids = mask = None
    if kwargs:
        ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    if ids is None and args:
        first = args[0]
        if isinstance(first, Mapping):
            ids, mask = first.get("input_ids"), first.get("attention_mask", mask)
        else:
            ids = first
    if type(ids) is not torch.Tensor or ids.dim() < 2 or ids.is_floating_point() or ids.is_complex() \
            or ids.dtype == torch.bool:
        return None
    nonpad = NOT_READ
    if type(mask) is torch.Tensor and mask.device.type == "cpu" and mask.shape == ids.shape:
        nonpad = int(mask.count_nonzero())
    return ids.numel(), nonpad
