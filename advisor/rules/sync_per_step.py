"""sync.per_step: the host waits for the GPU every step.

What it detects: on an accelerator, calls that block the host until the device catches
up (``.item()``, ``.cpu()``, ``.tolist()``, ``.numpy()``, ``print(loss)``,
``torch.cuda.synchronize``, ``empty_cache``) at least once per step: a problem when its
wait is a visible share of the step, a suggestion when the GPU keeps up and the wait is short.
Why it matters: the host cannot queue the next step's kernels while it waits, so the GPU
drains and idles at every step.
How to fix: keep metrics on the device and read them every N steps
(``running += loss.detach()``; ``if step % 100 == 0: print(running.item() / 100)``).
"""

from fastmon.advisor.types import CODE_CHANGE, PROBLEM, SUGGESTION, Advice, amdahl

ID = "sync.per_step"
MIN_CALLS_PER_STEP = 1.0
MIN_SYNC_SHARE = 0.02


def check(window, facts):
    if not facts.accelerator or window.sync_calls_per_step < MIN_CALLS_PER_STEP:
        return None
    share = window.share("sync")
    sites = facts.all_events("sync_site")
    where = sites[0] if sites else {}
    names = ", ".join(sorted({f"{s.get('call')} at {s.get('location')}" for s in sites[:3]}))
    # A launch-bound GPU keeps up with the host, so the wait is short; the sync still
    # drains its queue every step, and the host can never run ahead: said, as a suggestion.
    costly = share >= MIN_SYNC_SHARE
    return Advice(
        ID, "Stop syncing with the GPU every step",
        f"{window.sync_calls_per_step:.1f} host-device syncs per step, {share:.1%} of step time"
        + (f" ({names})" if names else "")
        + ("" if costly else ": short now, as the GPU keeps up with the host, yet each empties the GPU's queue"),
        round(amdahl(share), 2), CODE_CHANGE, kind=PROBLEM if costly else SUGGESTION,
        fix="running += loss.detach()\nif step % 100 == 0:\n    print((running / 100).item()); running.zero_()",
        why="while the host waits, no kernels are queued and the GPU drains",
        location=where.get("location"),
    )
