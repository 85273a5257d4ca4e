"""cudnn.benchmark: a conv net on the GPU with cuDNN autotuning off.

What it detects: convolution layers on an accelerator, ``torch.backends.cudnn.benchmark``
off, its kernels a large share of the step.
Why it matters: with fixed input shapes, benchmark mode picks the fastest convolution
algorithm once per shape; off, cuDNN uses heuristics that are often slower.
How to fix: ``torch.backends.cudnn.benchmark = True`` (leave it off if shapes change every
step). fastmon applies it live and reverts it if throughput drops.
"""

from fastmon.advisor.bound import kernel_share
from fastmon.advisor.types import AFTER_IMPORT, HOT_APPLY, Advice, Apply, Permanent, amdahl

ID = "cudnn.benchmark"
MIN_COMPUTE_SHARE = 0.3
EXPECTED_SPEEDUP = 1.2


def check(window, facts):
    if not facts.accelerator or facts.settings.get("cudnn_benchmark", True):
        return None
    share, evidence = kernel_share(window, facts)
    if share < MIN_COMPUTE_SHARE or not any(m.get("conv") for m in facts.models):
        return None
    return Advice(
        ID, "Let cuDNN pick the fastest convolution algorithms",
        f"conv net on {facts.device.get('name', 'the GPU')}, {evidence}, cudnn.benchmark off",
        round(amdahl(share, EXPECTED_SPEEDUP), 2), HOT_APPLY,
        fix="torch.backends.cudnn.benchmark = True",
        why="autotuning picks the fastest algorithm per input shape once",
        apply=Apply("cudnn_benchmark", {"value": True}),
    )


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent")."""
    return Permanent("torch.backends.cudnn.benchmark = True", AFTER_IMPORT)
