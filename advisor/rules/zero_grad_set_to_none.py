"""zero_grad.set_to_none: gradients are zeroed in place every step.

What it detects: ``zero_grad(set_to_none=False)`` on an optimizer or module.
Why it matters: zeroing writes every gradient tensor each step (a memset per
parameter) and keeps the memory; ``None`` gradients cost nothing and let backward
write fresh ones.
How to fix: ``optimizer.zero_grad()`` (``set_to_none=True`` is the default since
PyTorch 2.0). Applied live: the result of training is the same.
"""

from fastmon.advisor.types import HOT_APPLY, KEYWORDS, Advice, Apply, Permanent

ID = "zero_grad.set_to_none"


def check(window, facts):
    event = facts.event("zero_grad_set_to_none_false")
    if event is None:
        return None
    return Advice(
        ID, "Set gradients to None instead of zeroing them",
        f"zero_grad(set_to_none=False) called at {event.get('location') or 'an unknown place'}",
        None, HOT_APPLY, fix="optimizer.zero_grad()  # set_to_none=True is the default",
        why="a memset of every gradient per step, and memory held between steps",
        location=event.get("location"), apply=Apply("set_to_none", {"value": True}),
    )


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent")."""
    return Permanent("zero_grad(set_to_none=True)", KEYWORDS, {"set_to_none": True}, ("zero_grad",))
