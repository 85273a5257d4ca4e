"""dataloader.prefetch_factor: the workers keep up on average, but fall behind in bursts.

What it detects: a DataLoader with workers whose long steps (``Window.long_excess``: over
3x the median) wait for data ``MIN_BURST_SHARE`` of the time, and at least ``BURST_PART``
of all the wait for data: most batches are ready in time, and now and then one is not (a
slow read: a cold file, a network disk; a sample far larger than the others). DataLoader
delivers batches in order, so one late batch stalls the step however many batches after it
are ready.
Why it matters: each worker holds at most ``prefetch_factor`` batches ahead (2 by
default): a stall longer than the batches held ahead reaches the step. More batches held
ahead absorb it, at the cost of their memory; no more processes, no more cores.
How to fix: ``DataLoader(..., prefetch_factor=N)``; fastmon tries N in ``FACTORS`` times
the current one live and keeps the fastest (``dataloader.num_workers`` waits for it: more
workers would hold more ahead too, at a process each). The change is made in the running iterator
(``probe/loader_hooks.py``'s ``prefetch_in_place``): no worker restarts, every batch goes to
the worker it went to, so no sample and no worker's random draw changes; an iterable
dataset's too.
"""

import statistics

from fastmon.advisor.knobs import loader_setting
from fastmon.advisor.rules.dataloader_persistent_workers import restart_stall, startups
from fastmon.advisor.types import HOT_APPLY, Advice, Apply

ID = "dataloader.prefetch_factor"
MIN_BURST_SHARE = 0.1  # of the time, long steps' waits for data beyond the median step
MIN_STEPS = 10  # as dataloader.num_workers': it waits for this rule, from the same step
BURST_PART = 0.5  # of all the waiting for data, at least this much in the long steps
FACTORS = (2, 4, 8)  # tried: the current prefetch_factor times each
MAX_PREFETCH = 32  # batches a worker holds ahead, at most


def keeps_up(window, facts, loader: dict, median_wait: float) -> bool:
    """Whether the workers make batches as fast as the steps take them, where the data
    pipeline's timing says how long a worker takes for a sample (else assumed)."""
    rows = (facts.values.get("pipeline_stages") or {}).get("worker_rows") or []
    if not rows or not loader.get("batch_size"):
        return True
    a_sample = statistics.median(row["ms_a_sample"] for row in rows) / 1e3
    return a_sample * loader["batch_size"] / loader["num_workers"] <= window.step_median - median_wait


def bursts(window, facts) -> tuple[float, float, tuple] | None:
    """(share of the time long steps wait for data beyond the median step, the median step's
    wait, prefetch factors to try) where the training loader keeps up but in bursts and a
    deeper prefetch is left to try; else None. Long steps are told by every step's wall; that
    they wait for data, by the long ones the probe timed (it times a step in many)."""
    loader = facts.training_loader()
    if loader is None or not loader.get("num_workers") or window.steps < MIN_STEPS or window.wall <= 0:
        return None
    if ID in facts.values.get("advice_acted_on", ()):
        return None  # tried (kept or not) or dismissed: the worker count's turn
    if restart_stall(window, facts) is not None:
        return None  # the epoch starts' wait is dataloader.persistent_workers'
    if not window.long_data_share:
        return None  # no long step timed, or none that waited for data
    # an epoch's start waits for its first batch, however short: not a burst (workers that
    # start again each epoch are dataloader.persistent_workers')
    starts = sum(max(0.0, wait) for step, wait in startups(window, loader)
                 if window.first_step <= step <= window.last_step)
    waited = window.long_excess * window.long_data_share - starts
    median_wait = window.phase_median["data_wait"]
    if not keeps_up(window, facts, loader, median_wait):
        return None
    if waited / window.wall < MIN_BURST_SHARE or waited < BURST_PART * window.phase_totals["data_wait"]:
        return None  # ordinary steps wait as much: the workers are too few or too slow, not too shallow
    current = loader.get("prefetch_factor") or 2
    candidates = tuple(current * f for f in FACTORS if current * f <= MAX_PREFETCH)
    return (waited / window.wall, median_wait, candidates) if candidates else None


def check(window, facts):
    found = bursts(window, facts)
    if found is None:
        return None
    share, median_wait, candidates = found
    loader = facts.training_loader()
    current = loader.get("prefetch_factor") or 2
    estimate = 1 / (1 - min(share, 0.9))  # every burst absorbed
    evidence = (f"steps that wait for a late batch take {share:.0%} of the time, while the median step waits "
                f"{median_wait * 1e3:.1f} ms of {window.step_median * 1e3:.1f}: the workers keep up, except in "
                f"bursts; DataLoader(num_workers={loader['num_workers']}, prefetch_factor={current}) holds "
                f"{loader['num_workers'] * current} batches ahead")
    fix = (f"{loader_setting(facts, prefetch_factor='N')} — fastmon tries N in {list(candidates)} and keeps the "
           "fastest")
    why = "batches come in order: one slow batch stalls the step unless enough batches are held ahead to cover it"
    return Advice(ID, "Hold more batches ahead: DataLoader prefetch_factor", evidence, round(estimate, 2), HOT_APPLY,
                  fix=fix, why=why, location=loader.get("location"),
                  apply=Apply("loader", {"prefetch_factor": candidates[0]},
                              search=tuple({"prefetch_factor": n} for n in candidates)))
