"""conv_bias_before_bn: a convolution with a bias feeds straight into BatchNorm.

What it detects: a ``Conv`` layer with ``bias=True`` whose next sibling is a BatchNorm.
Why it matters: BatchNorm subtracts the channel mean, which cancels any per-channel bias:
the bias is computed, stored and optimised for nothing.
How to fix: ``nn.Conv2d(..., bias=False)`` before BatchNorm.
"""

from fastmon.advisor.types import CODE_CHANGE, SUGGESTION, Advice

ID = "conv_bias_before_bn"


def check(window, facts):
    layers = [name for model in facts.models for name in model.get("conv_bias_before_bn") or []]
    if not layers:
        return None
    built_at = next((m["conv_bias_location"] for m in facts.models if m.get("conv_bias_location")), None)
    return Advice(
        ID, "Drop the bias of convolutions followed by BatchNorm",
        f"{len(layers)} conv layer(s) with bias directly before BatchNorm: {', '.join(layers[:4])}",
        None, CODE_CHANGE, fix="nn.Conv2d(in_ch, out_ch, kernel_size, bias=False)",
        why="BatchNorm removes the per-channel mean, so the bias has no effect", kind=SUGGESTION, location=built_at,
    )
