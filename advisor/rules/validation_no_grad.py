"""validation.no_grad: evaluation forwards build autograd graphs.

What it detects: forwards of a model in ``eval()`` mode while grad mode is enabled.
Why it matters: autograd records the graph and keeps activations for a backward that
never comes: evaluation is slower and uses far more memory.
How to fix: wrap evaluation in ``with torch.no_grad():`` (or ``torch.inference_mode()``).
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "validation.no_grad"


def check(window, facts):
    event = facts.event("eval_forward_with_grad")
    if event is None and window.eval_grad_forwards == 0:
        return None
    location = event.get("location") if event else None
    return Advice(
        ID, "Evaluate without autograd",
        f"{window.eval_grad_forwards or 'some'} eval-mode forwards ran with grad enabled"
        + (f" (first at {location})" if location else ""),
        None, CODE_CHANGE, fix="with torch.no_grad():  # or torch.inference_mode()\n    output = model(x)",
        why="autograd records a graph and keeps activations for a backward that never comes",
        location=location,
    )
