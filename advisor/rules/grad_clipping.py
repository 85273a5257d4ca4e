"""grad_clipping: gradient-norm spikes or non-finite gradients without clipping.

What it detects: in the probe's sampled gradient norms, a norm above ``SPIKE_FACTOR``
times the running median, or a non-finite norm, while ``clip_grad_norm_`` is not used.
Why it matters: a spike takes one huge step that can undo hours of training (loss
spikes, divergence, NaNs).
How to fix: ``torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`` between
backward and step (after ``scaler.unscale_(optimizer)`` under fp16).
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "grad_clipping"


def check(window, facts):
    event = facts.event("grad_norm_spike")
    if event is None or facts.values.get("grad_clipping"):
        return None
    median = event.get("median")
    return Advice(
        ID, "Clip gradient norms",
        f"gradient norm {event.get('norm')} at step {event.get('step')}"
        + (f" vs a running median of {median:.3g}" if isinstance(median, (int, float)) else ""),
        None, CODE_CHANGE,
        fix="torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # before optimizer.step()",
        why="one outsized step can undo a lot of training", confidence="medium",
    )
