"""optimizer.fused: Adam/AdamW/SGD on the GPU runs its per-parameter (single-tensor) loop.

What it detects: an Adam, AdamW or SGD optimizer on an accelerator with ``foreach=False``
and no ``fused``, and the optimizer step a visible share of step time.
Why it matters: the single-tensor path launches several kernels per parameter; the
foreach path batches them, the fused path does the whole update in one kernel.
How to fix: ``torch.optim.AdamW(params, lr=..., fused=True)`` (or drop ``foreach=False``).
fastmon switches the running optimizer to the foreach path live (the same update, batched
kernels); fused needs the optimizer rebuilt, so it stays a code change.
"""

from fastmon.advisor.types import HOT_APPLY, KEYWORDS, Advice, Apply, Permanent, amdahl

ID = "optimizer.fused"
FUSABLE = ("Adam", "AdamW", "SGD")
MIN_OPTIMIZER_SHARE = 0.1
EXPECTED_SPEEDUP = 3.0


def check(window, facts):
    if not facts.accelerator:
        return None
    share = window.share("optimizer")
    for opt in facts.optimizers:
        defaults = opt.get("defaults", {})
        on_device = any(d.startswith("cuda") for d in opt.get("devices", []))
        if (opt.get("class") in FUSABLE and on_device and defaults.get("foreach") is False
                and not defaults.get("fused") and share >= MIN_OPTIMIZER_SHARE):
            return Advice(
                ID, f"Use the fused {opt['class']} update",
                f"{opt['class']}(foreach=False) on the GPU; the optimizer is {share:.0%} of the step",
                round(amdahl(share, EXPECTED_SPEEDUP), 2), HOT_APPLY,
                fix=f"torch.optim.{opt['class']}(params, ..., fused=True)",
                why="the single-tensor path launches kernels per parameter; fused does one",
                location=opt.get("location"),
                apply=Apply("optimizer_foreach", {"value": True}),
            )
    return None


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent"):
    the multi-tensor update fastmon measured, on the optimizer's construction."""
    name = next((o["class"] for o in facts.optimizers if o.get("class") in FUSABLE), "AdamW")
    return Permanent(f"torch.optim.{name}(..., foreach=True)", KEYWORDS, {"foreach": True}, (name,))
