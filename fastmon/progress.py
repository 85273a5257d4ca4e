"""How far a training is: its epoch, the epochs its command line asks for, and the time
left at the current rate. Shared by the dashboard's header and the headless line."""

from __future__ import annotations

from fastmon.advisor.facts import Facts, epochs_from_argv

def script_args(target: list[str]) -> list[str]:
    """The script's own arguments in ``[script, *args]`` or ``["-m", module, *args]``."""
    return list(target[2:] if target[:1] == ["-m"] else target[1:])


def progress(facts: dict, argv: list[str], steps: int, steps_per_s: float, running: bool):
    """(epoch, epochs asked for, seconds left): each None where unknown."""
    loader = Facts(values=facts).training_loader()
    total = epochs_from_argv(argv)
    if loader is None:
        return None, total, None
    per_epoch = loader.get("len")
    eta = None
    if total and per_epoch and steps_per_s > 0 and running:
        eta = max(total * per_epoch - steps, 0) / steps_per_s
    return loader.get("epochs"), total, eta
