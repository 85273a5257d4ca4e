"""optimizer.adamw: Adam with ``weight_decay`` > 0.

What it detects: ``torch.optim.Adam`` with a non-zero ``weight_decay``.
Why it matters: Adam adds the decay to the gradient (L2), where the adaptive scaling
weakens it for parameters with large gradients; AdamW decouples it, which is what
"weight decay" is meant to be and usually generalises better.
How to fix: ``torch.optim.AdamW(params, lr=..., weight_decay=...)`` (retune the decay).
"""

from fastmon.advisor.types import CODE_CHANGE, SUGGESTION, Advice

ID = "optimizer.adamw"


def check(window, facts):
    for opt in facts.optimizers:
        decay = opt.get("defaults", {}).get("weight_decay") or 0
        if opt.get("class") == "Adam" and decay > 0 and not opt.get("defaults", {}).get("decoupled_weight_decay"):
            return Advice(
                ID, "Use AdamW for weight decay",
                f"Adam(weight_decay={decay}) applies L2 through the adaptive scaling", None, CODE_CHANGE,
                fix=f"torch.optim.AdamW(params, lr=..., weight_decay={decay})",
                why="AdamW decouples the decay from the gradient statistics", confidence="medium", kind=SUGGESTION,
                location=opt.get("location"),
            )
    return None
