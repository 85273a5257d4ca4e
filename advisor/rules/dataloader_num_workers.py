"""dataloader.num_workers: the training loop waits on the DataLoader.

What it detects: ``data_wait`` (time blocked in the DataLoader's ``__next__``) is a large
share of step time while the loader has few worker processes.
Why it matters: the model idles while samples are loaded and collated one after another
in the training process; workers prepare the next batches in parallel with the step.
Not while the workers restart at every epoch with a visible stall
(``dataloader.persistent_workers``): that stall is data_wait too, which more workers
lengthen rather than hide; once the workers persist, the steady wait decides, without
their one start-up.
Not where the workers already compute on every core (their CPU use, sampled, proves it):
then the cores are the limit, and it says so.
Not while the workers keep up but for bursts (``dataloader.prefetch_factor``: more batches
held ahead cost no process).
Not where a worker cannot help: an in-memory dataset collated by torch's default
(indexing tensors costs less than taking a batch from a worker), or a wait too short to pay a worker's handover of ~1 ms a
batch (``benchmarks/results/worker_handover.md``); the estimate counts that handover.
How to fix: more workers. fastmon searches the count live (doubling, measuring each,
keeping the best) because loading is often I/O- or sleep-bound and scales past the
core count; make the winner permanent with ``DataLoader(..., num_workers=N)``.
"""

import statistics

from fastmon.advisor.knobs import loader_setting
from fastmon.advisor.rules.dataloader_persistent_workers import restart_stall, startup_in_window
from fastmon.advisor.rules.dataloader_prefetch_factor import bursts
from fastmon.advisor.types import CODE_CHANGE, HOT_APPLY, SUGGESTION, Advice, Apply

ID = "dataloader.num_workers"
MIN_DATA_WAIT_SHARE = 0.20
MIN_STEPS = 10
MAX_WORKERS_FLOOR = 16  # search at least this far, even on a 2-core laptop
MAX_WORKERS_PER_CORE = 4
WORKER_BATCH_COST_S = 1e-3  # the training process's time to take one batch from a worker
MIN_GAIN = 1.10  # below this the estimate is within what a live measurement can tell
CPU_BOUND = 0.5  # loading that keeps the training thread busy this share of its wait is CPU work
NO_SPARE_CORES = 0.1  # cores spare at most this: none (a fraction more is a worker's share of a core)
FULL_IDLE = 0.25  # the machine idle at most this many cores while workers compute: it is full (sampling noise)
IN_MEMORY_DATASETS = frozenset({"TensorDataset", "StackDataset"})


def worker_candidates(current: int, cpu_count: int) -> tuple:
    cap = max(MAX_WORKERS_FLOOR, MAX_WORKERS_PER_CORE * cpu_count)
    out, n = [], max(2, current * 2)
    while n <= cap:
        out.append(n)
        n *= 2
    return tuple(out)


def spare_cores(facts) -> float:
    """The cores neither torch's threads (its compute keeps that many busy) nor other
    processes use: where workers' CPU work can run without slowing the training; or, more,
    those the machine left idle while the steps ran (torch's threads idle while the training
    thread loads: a 72% wait beside one idle core of 2 ran 1.8x faster with 2 workers)."""
    free = facts.host_cpu_count - torch_threads(facts) - (facts.host_cpu or {}).get("others", 0.0)
    return max(free, idle_cores(facts) or free)


def idle_cores(facts) -> float | None:
    """The cores the machine left idle while the window's steps ran (None: not sampled)."""
    cores = facts.host_cpu
    if not cores:
        return None
    return (facts.host_cpu_count - cores["trainer"] - cores.get("workers", 0.0) - cores.get("children", 0.0)
            - cores["others"])  # children: compile workers, workers starting, a launcher


def torch_threads(facts) -> int:
    return min(facts.settings.get("threads") or facts.host_cpu_count, facts.host_cpu_count)


def predicted_gain(window, total: float, startup: float, current: int, workers: int,
                   cpu_share: float = 0.0, facts=None) -> float:
    """The step's speed-up with ``workers`` workers, the search's first candidate. Loading
    a batch takes the main process its whole wait without workers; with ``current``
    workers kept busy, each takes ``current`` steps to load one. With ``workers``, a step
    takes its compute plus the handover of its batches, or a batch's loading shared
    among the workers, or (``facts`` given: the machine) the loading's CPU work
    (``cpu_share`` of its wait) on the cores spare beside torch's threads and other
    processes, whichever is longest: a fraction of a core spare runs that fraction of the
    loading beside the step (timm ``-j 1`` with 0.8 of 2 cores spare: 1.12-1.34x measured).
    Loading that is CPU work gains nothing without a spare core: a worker there slows every
    parallel op of torch's, which waits for its slowest thread. (Not counted: torch's compute as CPU to share. Its time under a busy
    core is mostly its threads waiting to be scheduled, not work: see docs/limits.md.)"""
    steps = window.steps
    wait = (window.phase_totals["data_wait"] - startup) / steps
    compute = total / steps - wait
    batches = max(window.timed_steps and window.micro_batches / window.timed_steps, 1.0)
    loading = wait if current == 0 else current * (compute + wait)
    with_workers = max(compute + WORKER_BATCH_COST_S * batches, loading / workers)
    if facts is not None:
        spare = spare_cores(facts)
        if cpu_share >= CPU_BOUND and spare <= NO_SPARE_CORES:
            return 1.0
        on_spare = loading * cpu_share / spare if cpu_share >= CPU_BOUND and spare < workers else 0.0
        with_workers = max(with_workers, on_spare)
    return (compute + wait) / with_workers if with_workers > 0 else 1.0


def cores_full(facts, current: int) -> str | None:
    """The workers compute (their fetches are CPU at least ``CPU_BOUND`` of their time, as
    the data pipeline's timing shows; else each busy that share of a core, as sampled) and
    the machine has no core idle: why more workers would not help, in numbers; else None."""
    cores = facts.host_cpu
    if not current or not cores:
        return None
    each = cores["workers"] / current
    rows = (facts.values.get("pipeline_stages") or {}).get("worker_rows") or []
    computes = statistics.median(row["fetch_cpu_share"] for row in rows) if rows else None
    idle = idle_cores(facts)
    if cores["workers"] < 0.1 * current:
        return None  # the workers not told apart from other processes yet (their pids come later)
    if (each if computes is None else computes) < CPU_BOUND or idle > FULL_IDLE:
        return None
    how = f"fetching, they compute {computes:.0%} of the time" if computes is not None else \
        f"{each:.2f} each: they compute, not wait"
    return (f"the {current} worker{'s' if current > 1 else ''} keep {cores['workers']:.1f} of "
            f"{facts.host_cpu_count} cores busy ({how}), the training process {cores['trainer']:.1f}"
            + (f", other processes {cores['others']:.1f}" if cores["others"] >= 0.1 else "")
            + f"; {max(idle, 0.0):.1f} idle")


def check(window, facts):
    loader = facts.training_loader()
    if window.steps < MIN_STEPS or loader is None or restart_stall(window, facts) is not None:
        return None
    if bursts(window, facts) is not None:
        return None  # the workers keep up but in bursts: dataloader.prefetch_factor holds more ahead
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
    cpu_share = loader.get("wait_cpu_share") if current == 0 else None  # the loading's CPU, in this process
    spare = spare_cores(facts)
    estimate = predicted_gain(window, total, startup, current, candidates[0], cpu_share or 0.0, facts)
    median_ms = window.phase_median["data_wait"] * 1e3
    evidence = (f"data_wait is {share:.0%} of step time (median {median_ms:.1f} ms of a "
                f"{window.step_median * 1e3:.1f} ms step) with DataLoader(num_workers={current})")
    if startup:
        evidence += f", leaving out {startup:.1f} s of workers starting up"
    full = cores_full(facts, current)
    if full:
        return Advice(ID, "Make loading cheaper: the workers fill the cores, more would not help",
                      f"{evidence}; {full}", None, CODE_CHANGE, kind=SUGGESTION,
                      fix="load less work per sample (decode once and cache, lighter transforms, the heavy ones "
                          "on the GPU after the copy), or run where more cores are free",
                      why="each worker computes its batches; with no core idle, another worker only shares the same "
                          "cores",
                      location=loader.get("location"))
    if cpu_share is not None and cpu_share >= CPU_BOUND:
        idle = idle_cores(facts)
        beside = (f"idle while the steps ran (the training process used {cores['trainer']:.1f})"
                  if idle is not None and spare == idle and spare > 0 else
                  f"beside torch's {facts.settings.get('threads') or '?'} threads")
        evidence += (f"; the loading is CPU work ({cpu_share:.0%} of the wait), {max(spare, 0.0):.1f} of "
                     f"{facts.host_cpu_count} cores spare {beside}"
                     + (f" and other processes' {cores['others']:.1f}" if cores and cores["others"] >= 0.1 else ""))
    if estimate < MIN_GAIN:
        if predicted_gain(window, total, startup, current, candidates[0]) < MIN_GAIN:
            return None  # the wait is too short for a worker's handover
        # Loading is CPU work, and the cores are busy: a worker would take its core from
        # the training (torch's threads wait for the slowest of them).
        title = "the cores are full" if spare <= NO_SPARE_CORES else f"{spare:.1f} spare cores are too few"
        return Advice(ID, f"Make loading cheaper: {title}, workers would not help",
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
