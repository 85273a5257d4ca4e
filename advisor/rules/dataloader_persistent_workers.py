"""dataloader.persistent_workers: worker processes are restarted every epoch.

What it detects: a multi-worker DataLoader without ``persistent_workers`` whose worker
start-up at each ``iter()`` takes a visible part of an epoch.
Why it matters: every epoch forks the workers again and re-runs dataset set-up in them,
while the model waits.
How to fix: ``DataLoader(..., persistent_workers=True)``; fastmon applies it for the next
epoch.
"""

from fastmon.advisor.types import HOT_APPLY, Advice, Apply, amdahl

ID = "dataloader.persistent_workers"
MIN_STARTUP_S = 0.2
MIN_EPOCH_FRACTION = 0.02


def check(window, facts):
    loader = facts.training_loader()
    if loader is None or loader.get("num_workers", 0) == 0 or loader.get("persistent_workers"):
        return None
    startup = loader.get("iter_seconds") or 0.0
    if loader.get("epochs", 0) < 2 or startup < MIN_STARTUP_S or not loader.get("len") or not window.step_median:
        return None
    epoch_s = loader["len"] * window.step_median
    fraction = startup / (epoch_s + startup)
    if fraction < MIN_EPOCH_FRACTION:
        return None
    return Advice(
        ID, "Keep DataLoader workers alive between epochs",
        f"starting {loader['num_workers']} workers took {startup:.2f} s at the last epoch start "
        f"({fraction:.0%} of an epoch)",
        round(amdahl(fraction), 2), HOT_APPLY,
        fix="DataLoader(..., persistent_workers=True)",
        why="workers are forked and the dataset re-initialised in them at every epoch",
        location=loader.get("location"), apply=Apply("loader", {"persistent_workers": True}),
    )
