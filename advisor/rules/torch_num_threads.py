"""torch.num_threads: torch runs more threads than the cores other processes leave it.

What it detects: other processes (another job, a build, a second training) keep cores
busy, and torch's intra-op threads (``torch.get_num_threads()``, by default one per core)
are more than the cores left, while forward, backward and the optimizer are a large share
of the step.
Why it matters: a parallel op splits its work over every thread and waits for the last
one; a thread whose core another process holds waits for the scheduler, so each op takes
many times its work. Measured on the planted MLP (2 cores, one spinning): 60 s with 2
threads, 25 s with 1, as on the quiet machine (benchmarks/results/advice_quality.md).
How to fix: ``torch.set_num_threads(N)`` (or ``OMP_NUM_THREADS=N``) with N the cores left.
fastmon switches it live, interleaved with the original; the thread count can change the
last bits of a parallel reduction, so it needs your accept (``--allow torch.num_threads``).
"""

from fastmon.advisor.types import AFTER_IMPORT, HOT_APPLY, Advice, Apply, Permanent

ID = "torch.num_threads"
MIN_OTHERS = 0.5  # cores other processes keep busy on average, at least
MIN_COMPUTE_SHARE = 0.2  # forward + backward + optimizer, of the step
MIN_SAMPLES = 3  # host samples over the window: one is a moment, not a neighbour
# Tried before other advice: with torch's threads waiting for cores, every phase of compute
# is inflated, and the other rules' estimates (shares of such a step) come out low: with a
# core spinning, 4.47x measured for more workers estimated at 1.52x. Withheld until it is fixed.
FIRST = True
WHY_NOT_ESTIMATED = "torch's threads wait for cores other processes hold, which inflates the step's shares"


def threads_left(facts) -> int | None:
    """The torch threads the cores other processes leave would hold, where fewer than
    torch runs now; else None."""
    threads, busy = facts.settings.get("threads"), facts.host_cpu
    if not threads or threads < 2 or not busy or busy.get("samples", 0) < MIN_SAMPLES:
        return None
    if busy["others"] < MIN_OTHERS:
        return None
    left = max(1, int(facts.host_cpu_count - busy["others"] + 0.25))
    return left if left < threads else None


def workers_starting(window, facts) -> bool:
    """Whether the training loader's workers started again inside the window: a new
    process's first CPU reading is 0 and the sampler finds children every 2 s, so their
    start-up reads as other processes' load (spawned workers, each epoch: a quiet machine
    read as busy)."""
    loader = facts.training_loader()
    return bool(loader) and any(window.first_step <= s[0] <= window.last_step for s in loader.get("startups") or ())


def check(window, facts):
    left = threads_left(facts)
    compute = window.share("forward") + window.share("backward") + window.share("optimizer")
    if left is None or compute < MIN_COMPUTE_SHARE or workers_starting(window, facts):
        return None
    threads, others = facts.settings["threads"], facts.host_cpu["others"]
    return Advice(
        ID, f"Run torch on {left} thread{'s' if left > 1 else ''}: other processes hold the other cores",
        f"torch runs {threads} threads on {facts.host_cpu_count} cores and other processes keep "
        f"{others:.1f} of them busy; forward+backward+optimizer are {compute:.0%} of the step, mostly "
        "threads waiting for a core (a trial measures what fewer threads give)",
        None, HOT_APPLY,
        fix=f"torch.set_num_threads({left})",
        why="a parallel op waits for its slowest thread, and a thread without a core waits for the scheduler",
        apply=Apply("num_threads", {"value": left}, changes_maths=True),
    )


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent")."""
    return Permanent(f"torch.set_num_threads({params.get('value', 1)})", AFTER_IMPORT,
                     note="or OMP_NUM_THREADS in the job's environment; as many as the cores other jobs leave")
