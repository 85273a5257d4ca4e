"""dataloader.num_workers: the training loop waits on the DataLoader.

What it detects: ``data_wait`` (time blocked in the DataLoader's ``__next__``) is a large
share of step time while the loader has few worker processes.
Why it matters: the model idles while samples are loaded and collated one after another
in the training process; workers prepare the next batches in parallel with the step.
Not while the workers restart at every epoch with a visible stall
(``dataloader.persistent_workers``): that stall is data_wait too, which more workers
lengthen rather than hide; once the workers persist, the steady wait decides, without
their one start-up.
Not where a worker cannot help: an in-memory dataset collated by torch's default
(indexing tensors costs less than taking a batch from a worker), or a wait too short to pay a worker's handover of ~1 ms a
batch (``benchmarks/results/worker_handover.md``); the estimate counts that handover.
How to fix: more workers. fastmon searches the count live (doubling, measuring each,
keeping the best) because loading is often I/O- or sleep-bound and scales past the
core count; make the winner permanent with ``DataLoader(..., num_workers=N)``.
"""

from fastmon.advisor.knobs import loader_setting
from fastmon.advisor.rules.dataloader_persistent_workers import MIN_STARTUP_S, restart_stall, startups
from fastmon.advisor.types import CODE_CHANGE, HOT_APPLY, SUGGESTION, Advice, Apply

ID = "dataloader.num_workers"
MIN_DATA_WAIT_SHARE = 0.20
MIN_STEPS = 10
MAX_WORKERS_FLOOR = 16  # search at least this far, even on a 2-core laptop
MAX_WORKERS_PER_CORE = 4
WORKER_BATCH_COST_S = 1e-3  # the training process's time to take one batch from a worker
MIN_GAIN = 1.10  # below this the estimate is within what a live measurement can tell
IN_MEMORY_DATASETS = frozenset({"TensorDataset", "StackDataset"})


def worker_candidates(current: int, cpu_count: int) -> tuple:
    cap = max(MAX_WORKERS_FLOOR, MAX_WORKERS_PER_CORE * cpu_count)
    out, n = [], max(2, current * 2)
    while n <= cap:
        out.append(n)
        n *= 2
    return tuple(out)


def startup_in_window(window, loader: dict) -> float:
    """Seconds of the window's data_wait that were worker start-ups."""
    waits = sum(wait for step, wait in startups(window, loader)
                if wait >= MIN_STARTUP_S and window.first_step <= step <= window.last_step)
    return min(waits, window.phase_totals["data_wait"])


def predicted_gain(window, total: float, startup: float, current: int, workers: int,
                   cores: dict | None = None, cpu_count: int = 1) -> float:
    """The step's speed-up with ``workers`` workers, the search's first candidate. Loading
    a batch takes the main process its whole wait without workers; with ``current``
    workers kept busy, each takes ``current`` steps to load one. With ``workers``, a step
    takes its compute plus the handover of its batches, or a batch's loading shared
    among the workers, or the CPU time of a step spread over the cores other jobs leave
    (``cores``: the trainer's, the workers' and the others' busy cores now), whichever
    is longest: workers only move CPU work to other cores, if there are free ones."""
    steps = window.steps
    wait = (window.phase_totals["data_wait"] - startup) / steps
    compute = total / steps - wait
    batches = max(window.timed_steps and window.micro_batches / window.timed_steps, 1.0)
    loading = wait if current == 0 else current * (compute + wait)
    with_workers = max(compute + WORKER_BATCH_COST_S * batches, loading / workers,
                       cpu_limited_step(compute + wait, batches, cores, cpu_count))
    return (compute + wait) / with_workers if with_workers > 0 else 1.0


def cpu_limited_step(step: float, batches: float, cores: dict | None, cpu_count: int) -> float:
    """The shortest step the cores left to the training allow: the CPU a step takes now
    (the trainer's and its workers' busy cores over a step), plus each batch's handover
    on both sides, over the cores other processes leave free."""
    if not cores:
        return 0.0
    free = max(cpu_count - cores["others"], 0.5)
    used = (cores["trainer"] + cores["workers"]) * step
    return (used + 2 * WORKER_BATCH_COST_S * batches) / free


def check(window, facts):
    loader = facts.training_loader()
    if window.steps < MIN_STEPS or loader is None or restart_stall(window, facts) is not None:
        return None
    startup = startup_in_window(window, loader)
    total = sum(window.phase_totals.values()) - startup
    share = (window.phase_totals["data_wait"] - startup) / total if total > 0 else 0.0
    in_memory = loader.get("dataset") in IN_MEMORY_DATASETS and loader.get("default_collate", True)
    if share < MIN_DATA_WAIT_SHARE or in_memory:
        return None
    current = loader.get("num_workers", 0)
    candidates = worker_candidates(current, facts.host_cpu_count)
    if not candidates:
        return None
    cores = facts.host_cpu
    estimate = predicted_gain(window, total, startup, current, candidates[0], cores, facts.host_cpu_count)
    median_ms = window.phase_median["data_wait"] * 1e3
    evidence = (f"data_wait is {share:.0%} of step time (median {median_ms:.1f} ms of a "
                f"{window.step_median * 1e3:.1f} ms step) with DataLoader(num_workers={current})")
    if startup:
        evidence += f", leaving out {startup:.1f} s of workers starting up"
    if cores:
        evidence += (f"; the training keeps {cores['trainer'] + cores['workers']:.1f} of {facts.host_cpu_count} cores "
                     f"busy" + (f", other processes {cores['others']:.1f}" if cores["others"] >= 0.1 else ""))
    if estimate < MIN_GAIN:
        if predicted_gain(window, total, startup, current, candidates[0]) < MIN_GAIN:
            return None  # the wait is too short for a worker's handover
        # Loading is CPU work, and the cores are busy: a worker would take its core from
        # the training (torch's threads wait for the slowest of them).
        return Advice(ID, "Make loading cheaper: the cores are full, workers would not help",
                      evidence, None, CODE_CHANGE, kind=SUGGESTION,
                      fix="load less work per sample (decode once and cache, lighter transforms), or run where "
                          "cores are free; more DataLoader workers would take cores from the training",
                      why="the data is loaded by CPU work on cores the training already keeps busy",
                      location=loader.get("location"))
    if loader.get("iterable"):
        return Advice(ID, "Give the DataLoader worker processes", evidence, round(estimate, 2), CODE_CHANGE,
                      fix=f"{loader_setting(facts, num_workers=candidates[0])} — an IterableDataset must shard "
                          "itself across workers (torch.utils.data.get_worker_info()), so fastmon does not "
                          "change it live",
                      location=loader.get("location"))
    return Advice(
        ID, "Load data in parallel: more DataLoader workers", evidence, round(estimate, 2), HOT_APPLY,
        fix=f"{loader_setting(facts, num_workers='N')} — fastmon tries N in {list(candidates)} and keeps the fastest",
        why="the step waits for batches that workers could prepare during the previous step",
        location=loader.get("location"),
        apply=Apply("loader", {"num_workers": candidates[0]},
                    search=tuple({"num_workers": n} for n in candidates)),
    )
