"""tensor_copy: ``torch.tensor(ndarray)`` copies arrays in the training loop.

What it detects: ``torch.tensor()`` called on a NumPy array during training steps.
Why it matters: ``torch.tensor`` always copies; ``torch.from_numpy`` / ``torch.as_tensor``
share the array's memory for free.
How to fix: ``torch.from_numpy(array)`` (or ``torch.as_tensor(array)``).
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "tensor_copy"


def check(window, facts):
    event = facts.event("tensor_from_ndarray")
    if event is None:
        return None
    return Advice(
        ID, "Wrap NumPy arrays instead of copying them",
        f"torch.tensor(ndarray) called at {event.get('location')} "
        f"({event.get('count', 'several')} times in the first steps)",
        None, CODE_CHANGE, fix="torch.from_numpy(array)  # shares memory; or torch.as_tensor(array)",
        why="torch.tensor always copies the array", location=event.get("location"),
    )
