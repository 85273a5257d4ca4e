"""channels_last: a conv net on the GPU in the default NCHW layout.

What it detects: a conv model on an accelerator whose 4-d weights are not
``channels_last``, with convolutions a large share of the step.
Why it matters: tensor-core convolutions (especially under AMP) run fastest in NHWC;
NCHW inputs get transposed around each one.
How to fix: ``model = model.to(memory_format=torch.channels_last)`` and the same for the
input batch.
"""

from fastmon.advisor.bound import kernel_share
from fastmon.advisor.types import CODE_CHANGE, Advice, amdahl

ID = "channels_last"
MIN_COMPUTE_SHARE = 0.3
EXPECTED_SPEEDUP = 1.2


def check(window, facts):
    if not facts.accelerator or not facts.models_on_accelerator:
        return None
    share, evidence = kernel_share(window, facts)
    if share < MIN_COMPUTE_SHARE:
        return None
    if not any(m.get("conv") and not m.get("channels_last") for m in facts.models):
        return None
    return Advice(
        ID, "Use the channels_last memory format",
        f"conv net in NCHW on the GPU; {evidence}",
        round(amdahl(share, EXPECTED_SPEEDUP), 2), CODE_CHANGE,
        fix="model = model.to(memory_format=torch.channels_last)\nx = x.to(memory_format=torch.channels_last)",
        why="tensor-core convolutions are NHWC; NCHW is transposed around each", confidence="medium",
    )
