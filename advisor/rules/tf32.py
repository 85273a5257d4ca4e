"""tf32: float32 matmuls at "highest" precision on a GPU with TF32 tensor cores.

What it detects: Ampere or newer GPU, ``torch.get_float32_matmul_precision() ==
"highest"``, no autocast, and matmul kernels a large share of the step.
Why it matters: TF32 runs fp32 matmuls on tensor cores, several times faster, with a
10-bit mantissa that training rarely notices.
How to fix: ``torch.set_float32_matmul_precision("high")`` at start-up (and
``torch.backends.cudnn.allow_tf32 = True``, the default). Applied live on your accept.
"""

from fastmon.advisor.bound import kernel_share
from fastmon.advisor.types import AFTER_IMPORT, HOT_APPLY, Advice, Apply, Permanent, amdahl

ID = "tf32"
MIN_COMPUTE_SHARE = 0.3
EXPECTED_SPEEDUP = 1.5


def check(window, facts):
    if not facts.accelerator or facts.autocast or not facts.device.get("tf32"):
        return None
    if facts.settings.get("float32_matmul_precision") != "highest":
        return None
    share, evidence = kernel_share(window, facts)
    if share < MIN_COMPUTE_SHARE or not any(m.get("matmul") for m in facts.models):
        return None
    return Advice(
        ID, "Allow TF32 tensor cores for float32 matmuls",
        f"{evidence}; float32 matmul precision is 'highest'",
        round(amdahl(share, EXPECTED_SPEEDUP), 2), HOT_APPLY,
        fix='torch.set_float32_matmul_precision("high")',
        why="TF32 runs float32 matmuls on tensor cores; training is rarely sensitive to it",
        apply=Apply("matmul_precision", {"value": "high"}, changes_maths=True),
    )


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent")."""
    return Permanent('torch.set_float32_matmul_precision("high")', AFTER_IMPORT)
