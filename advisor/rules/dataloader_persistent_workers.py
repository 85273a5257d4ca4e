"""dataloader.persistent_workers: worker processes are restarted every epoch.

What it detects: a multi-worker DataLoader without ``persistent_workers`` whose epoch
start (the wait in ``iter()`` and for the first batch, less what any batch waits) takes
a visible part of an epoch. Workers started with ``spawn`` (the default on macOS and
Windows) each import torch and unpickle the dataset before their first batch: seconds,
at every epoch.
Why it matters: every epoch starts the workers again and re-runs dataset set-up in them,
while the model waits.
How to fix: ``DataLoader(..., persistent_workers=True)``; fastmon applies it for the next
epoch.
"""

from fastmon.advisor.knobs import loader_setting
from fastmon.advisor.types import HOT_APPLY, PROBLEM, SUGGESTION, Advice, Apply, amdahl

ID = "dataloader.persistent_workers"
MIN_STARTUP_S = 0.2
MIN_EPOCH_FRACTION = 0.02


def startups(window, loader: dict) -> list[tuple[int, float]]:
    """The loader's last worker start-ups as (step, seconds the training waited for them):
    the wait in ``iter()`` and for the first batch, less what any batch waits (that part
    persistent workers keep)."""
    return [(step, seconds - window.phase_median.get("data_wait", 0.0))
            for step, seconds, *_ in loader.get("startups") or ()]


def startup_in_window(window, loader: dict) -> float:
    """Seconds of the window's data_wait that were worker start-ups."""
    waits = sum(wait for step, wait in startups(window, loader)
                if wait >= MIN_STARTUP_S and window.first_step <= step <= window.last_step)
    return min(waits, window.phase_totals["data_wait"])


def restart_stall(window, facts) -> tuple[float, float] | None:
    """(seconds, fraction of an epoch) that restarting the training loader's workers costs
    each epoch, where that is worth a change; else None."""
    loader = facts.training_loader()
    if loader is None or loader.get("num_workers", 0) == 0 or loader.get("persistent_workers"):
        return None
    found = startups(window, loader)  # from the first epoch on: the next one starts them again
    if not found or not loader.get("len") or not window.step_median:
        return None
    startup = found[-1][1]
    if startup < MIN_STARTUP_S:
        return None
    # an epoch's steps at their mean, the start-ups in the window left out: on a shared
    # machine the mean step is well above the median one, and the epoch takes the mean
    inside = sum(seconds for step, seconds in found if window.first_step <= step <= window.last_step)
    step = max(window.step_median, (window.wall - inside) / window.steps)
    fraction = startup / (loader["len"] * step + startup)
    # Fresh workers also run their first batches cold (new processes: page faults, first
    # calls): where the window holds epoch starts, the training's wait for data beyond its
    # median step's is what the restarts cost, when that is more. The wait alone: on a
    # shared machine the other phases' spread is the neighbour's (16 workers, a core
    # spinning: all of the window's excess made 2.12x of a measured 1.63x).
    if window.wall > 0 and any(window.first_step <= s[0] <= window.last_step for s in found):
        waited = window.phase_totals.get("data_wait", 0.0) - window.steps * window.phase_median.get("data_wait", 0.0)
        fraction = max(fraction, waited / window.wall)
    return (startup, fraction) if fraction >= MIN_EPOCH_FRACTION else None


def check(window, facts):
    stall = restart_stall(window, facts)
    if stall is None:
        return None
    startup, fraction = stall
    loader = facts.training_loader()
    # a cost paid at each epoch start: a problem where a second epoch begins (or is asked for)
    more_epochs = (loader.get("epochs") or 0) >= 2 or (facts.epochs_asked or 0) > 1
    return Advice(
        ID, "Keep DataLoader workers alive between epochs",
        f"each epoch waits {startup:.2f} s in iter() and for its first batch while "
        f"{loader['num_workers']} workers start again ({fraction:.0%} of an epoch)"
        + ("" if more_epochs else "; one epoch so far, and no --epochs seen: a cost only if more follow"),
        round(amdahl(fraction), 2), HOT_APPLY, kind=PROBLEM if more_epochs else SUGGESTION,
        fix=loader_setting(facts, persistent_workers=True),
        why="workers are started and the dataset re-initialised in them at every epoch",
        location=loader.get("location"), apply=Apply("loader", {"persistent_workers": True}),
    )
