"""amp: fp32 matmuls and convolutions on a GPU with fast bf16/fp16, no autocast.

What it detects: a model with matmul/conv layers in float32 on a tensor-core GPU, no
autocast active, and its kernels a large share of the step (``bound.kernel_share``).
Why it matters: bf16/fp16 tensor cores run several times faster than fp32 and halve
activation memory.
How to fix: ``with torch.autocast("cuda", dtype=torch.bfloat16):`` around the forward and
loss (bf16 needs no GradScaler; fp16 does). fastmon can wrap the model's forward live,
as an experiment, on your accept: it changes numerics.
"""

from fastmon.advisor.bound import kernel_share
from fastmon.advisor.types import HOT_APPLY, Advice, Apply, Permanent, amdahl

ID = "amp"
MIN_COMPUTE_SHARE = 0.3
EXPECTED_SPEEDUP = 2.0


def check(window, facts):
    if not facts.accelerator or facts.autocast or not facts.models_on_accelerator:
        return None
    models = [m for m in facts.models if m.get("matmul") and m.get("dtypes") == ["float32"]]
    share, evidence = kernel_share(window, facts)
    if not models or share < MIN_COMPUTE_SHARE:
        return None
    bf16 = bool(facts.device.get("bf16"))
    dtype = "bfloat16" if bf16 else "float16"
    return Advice(
        ID, f"Train in mixed precision ({dtype} autocast)",
        f"{evidence}, in float32, on {facts.device.get('name', 'the GPU')}",
        round(amdahl(share, EXPECTED_SPEEDUP), 2), HOT_APPLY,
        fix=f'with torch.autocast("cuda", dtype=torch.{dtype}):  # around forward and loss'
            + ("" if bf16 else "\n# fp16 also needs torch.amp.GradScaler() around backward/step"),
        why="tensor cores run bf16/fp16 matmuls several times faster than fp32",
        apply=Apply("autocast", {"dtype": dtype}, changes_maths=True) if bf16 else None,
    )


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent")."""
    return Permanent(f'with torch.autocast("cuda", dtype=torch.{params.get("dtype", "bfloat16")}):',
                     note="around the forward and the loss, not the backward")
