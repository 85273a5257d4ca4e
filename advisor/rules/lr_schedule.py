"""lr_schedule: a long run at a constant learning rate.

What it detects: no LR scheduler created and the run past ``MIN_STEPS`` steps.
Why it matters: warm-up and decay (OneCycle, cosine) usually reach a given loss in fewer
steps than a constant LR. A suggestion, with low confidence: some recipes are constant.
How to fix: ``torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=..., total_steps=...)``
stepped once per optimizer step.
"""

from fastmon.advisor.types import CODE_CHANGE, SUGGESTION, Advice

ID = "lr_schedule"
MIN_STEPS = 2000


def check(window, facts):
    if window.last_step < MIN_STEPS or facts.values.get("lr_scheduler") or not facts.optimizers:
        return None
    return Advice(
        ID, "Consider a learning-rate schedule",
        f"{window.last_step} steps so far at a constant learning rate (no LR scheduler created)",
        None, CODE_CHANGE,
        fix="scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=steps)\n"
            "# ... scheduler.step() after optimizer.step()",
        why="warm-up and decay usually reach the same loss in fewer steps", confidence="low", kind=SUGGESTION,
    )
