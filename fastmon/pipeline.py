"""Where producing a sample takes its time, from what the probe timed inside the data
pipeline (``fastmon.probe.pipeline_stages``): the training process's totals (the
``pipeline`` fact) and each DataLoader worker's (``RUN/pipeline/*.json``), summed into one
table of stages, CPU and wall ms a sample each, the slowest first; the per-batch stages of
the training process (taking a batch from a worker, the pin-memory thread); and the
workers themselves: how many ran at once, how busy each kept its core, the slowest.

A transform's time is part of ``__getitem__``'s: the table shows ``__getitem__`` less its
transforms and reads, as "the rest of __getitem__" (likewise "the rest of items and
collate" for an iterable dataset or one with ``__getitems__``). A stage's ms a sample is its time over
the samples fetched in the timed batches (a sample that decodes two images pays both)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from fastmon.advisor.facts import Facts
from fastmon.common.pipeline_names import FOLDER, HANDOFF

WAITING_RATIO = 2.0  # a stage whose wall is this many times its CPU waits (a read, a sleep) ...
WAITING_MIN_MS = 0.2  # ... by this much a sample at least
SLOWER = 1.5  # a worker this many times the others' median ms a sample is slower than they are
GETITEM = "__getitem__"
BATCH_LEVEL = ("collate_fn",)  # a stage outside the items
FETCHED = (GETITEM, "items and collate")  # the stages that count the samples fetched


def _sources(run_dir: Path, fact: dict | None) -> tuple[list[dict], list[dict]]:
    """The training process's totals (if any) and each worker's file."""
    workers = []
    for path in sorted((Path(run_dir) / FOLDER).glob("*.json")):
        try:
            workers.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a worker killed while it wrote: its last whole file is gone with it
    return ([fact] if fact else []), workers


def _datasets(source: dict) -> dict:
    """A source's stage times by dataset (a record of the first version: one, unnamed)."""
    return source.get("datasets") or ({"": source["stages"]} if source.get("stages") else {})


def _chosen(sources: list[dict], facts: dict) -> str | None:
    """The training loader's dataset, where its fact names it and something was timed of
    it; else the dataset with the most samples timed."""
    timed: dict[str, int] = {}
    for source in sources:
        for key, stages in _datasets(source).items():
            timed[key] = timed.get(key, 0) + sum(stages[n].get("samples") or 0 for n in FETCHED if n in stages)
    loader = Facts(values=facts).training_loader() or {}
    if loader.get("pipeline_key") in timed:
        return loader["pipeline_key"]
    return max(timed, key=timed.get) if timed else None


def _sum(sources: list[dict], key: str, dataset: str | None = None) -> dict[str, list]:
    """stage -> [count, cpu_ns, wall_ns, where], summed over the sources (of ``dataset``'s
    stages, for the per-sample ones)."""
    summed: dict[str, list] = {}
    for source in sources:
        table = (_datasets(source).get(dataset) or {}) if key == "stages" else (source.get(key) or {})
        for name, stage in table.items():
            entry = summed.setdefault(name, [0, 0, 0, stage.get("where")])
            entry[0] += stage.get("samples") or stage.get("batches") or 0
            entry[1] += stage.get("cpu_ns") or 0
            entry[2] += stage.get("wall_ns") or 0
    return summed


def pipeline_summary(run_dir, facts: dict | None) -> dict | None:
    """Of the training loader's dataset (``facts``: the run's, its ``pipeline`` fact and
    the loaders'): {"dataset", "stages": [{name, where, samples, cpu_ms, wall_ms, waiting}]
    ms a sample, the slowest (wall) first; "batch_stages": [{name, batches, cpu_ms,
    wall_ms}] ms a batch; "workers": how many ran at once (0: the training thread made the
    batches); "worker_rows"; "others": the other datasets timed}; None where nothing was."""
    facts = facts or {}
    main, every_worker = _sources(run_dir, facts.get("pipeline"))
    dataset = _chosen(main + every_worker, facts)
    workers = [w for w in every_worker if dataset in _datasets(w)]  # the other loaders' workers apart
    summed = _sum(main + workers, "stages", dataset)
    batch = _sum(main + workers, "batch_stages")
    if not summed and not batch:
        return None
    fetched = sum(summed[name][0] for name in FETCHED if name in summed)
    for_a_core = _core_wait_share(main + workers)
    stages, inside = [], [0.0, 0.0]  # inside: the transforms' and reads' share of __getitem__
    for name, (count, cpu_ns, wall_ns, where) in summed.items():
        if not count or name in FETCHED:
            continue
        samples = count if name in BATCH_LEVEL or not fetched else fetched
        cpu_ms, wall_ms = cpu_ns / samples / 1e6, wall_ns / samples / 1e6
        if name not in BATCH_LEVEL:
            inside[0] += cpu_ms
            inside[1] += wall_ms
        stages.append(_stage(name, where, count, cpu_ms, wall_ms, for_a_core))
    for name in FETCHED:  # less the stages inside it: what the dataset's own code takes
        if (whole := summed.get(name)) and whole[0]:
            cpu_ms = max(0.0, whole[1] / whole[0] / 1e6 - inside[0])
            wall_ms = max(0.0, whole[2] / whole[0] / 1e6 - inside[1])
            stages.append(_stage(f"the rest of {name}" if inside[1] else name, whole[3], whole[0], cpu_ms, wall_ms,
                                 for_a_core))
    stages.sort(key=lambda s: -s["wall_ms"])
    batch_stages = [{"name": name, "batches": count, "cpu_ms": round(cpu_ns / count / 1e6, 4),
                     "wall_ms": round(wall_ns / count / 1e6, 4)}
                    for name, (count, cpu_ns, wall_ns, _) in batch.items() if count]
    rows = [row for row in (_worker_row(w, dataset) for w in workers) if row]
    others = sorted({key for source in main + every_worker for key in _datasets(source)} - {dataset})
    return {"dataset": dataset, "others": others, "stages": stages, "batch_stages": batch_stages,
            "workers": _at_once(workers), "processes": len(workers), "core_wait": for_a_core,
            "worker_rows": _flag_slower(rows)}


def _stage(name: str, where, samples: int, cpu_ms: float, wall_ms: float, for_a_core: float | None) -> dict:
    """A stage's row; it waits (a read, a sleep) where its wall is well above its CPU, less
    the share of time off the CPU that was a wait for a core (where the kernel told it)."""
    waits_ms = (wall_ms - cpu_ms) * (1 - (for_a_core or 0.0))
    return {"name": name, "where": where, "samples": samples, "cpu_ms": round(cpu_ms, 4),
            "wall_ms": round(wall_ms, 4),
            "waiting": waits_ms > (WAITING_RATIO - 1) * cpu_ms and waits_ms > WAITING_MIN_MS}


def _core_wait_share(sources: list[dict]) -> float | None:
    """Of the timed batches' time off the CPU, the share runnable but waiting for a core;
    None where any process's kernel did not keep it."""
    off = [(s.get("off_cpu_ns"), s.get("run_delay_ns")) for s in sources if _datasets(s)]  # those that fetched
    if not off or any(o is None or d is None for o, d in off):
        return None
    total = sum(o for o, _ in off)
    return round(min(1.0, sum(d for _, d in off) / total), 3) if total else 0.0


def _at_once(workers: list[dict]) -> int:
    """The most workers that ran at the same time (workers that start again each epoch
    leave a file each)."""
    spans = sorted((w["began"], w["began"] + (w.get("wall_s") or 0)) for w in workers if w.get("began"))
    if len(spans) < len(workers):
        return len(workers)  # written by a fastmon that did not say when
    return max((sum(1 for start, end in spans if start <= began < end) for began, _ in spans), default=0)


def _worker_row(worker: dict, dataset: str | None) -> dict | None:
    """One worker: ms a sample it took to fetch, the CPU share of that time (computes or
    waits), and how busy it kept its core over its life."""
    stages = _datasets(worker).get(dataset) or {}
    top = [stages[name] for name in (*FETCHED, *BATCH_LEVEL) if name in stages]
    samples = sum(stages[name].get("samples") or 0 for name in FETCHED if name in stages)
    wall_ns = sum(stage.get("wall_ns") or 0 for stage in top)
    if not samples or not wall_ns:
        return None
    cpu_ns = sum(stage.get("cpu_ns") or 0 for stage in top)
    life = worker.get("wall_s")
    return {"pid": worker.get("pid"), "ms_a_sample": round(wall_ns / samples / 1e6, 4),
            "fetch_cpu_share": round(cpu_ns / wall_ns, 3),
            "busy": round(worker["cpu_s"] / life, 3) if life and worker.get("cpu_s") is not None else None}


def _flag_slower(rows: list[dict]) -> list[dict]:
    """The slowest first; it alone is "slower" where it takes ``SLOWER`` times the others'
    median (samples that vary, a slow read now and then, spread the others evenly)."""
    rows.sort(key=lambda row: -row["ms_a_sample"])
    for i, row in enumerate(rows):
        others = [r["ms_a_sample"] for r in rows[1:]]
        row["slower"] = i == 0 and bool(others) and row["ms_a_sample"] >= SLOWER * statistics.median(others)
    return rows


def pipeline_lines(pipeline: dict | None) -> list[str]:
    """The report's lines: where a sample's time goes, stage by stage; then per batch; then
    the workers."""
    if not pipeline:
        return []
    at_once = pipeline["workers"]
    where = "in the training thread" if not at_once else (
        f"in {at_once} DataLoader worker process{'es' if at_once > 1 else ''}")
    lines = []
    of = (pipeline.get("dataset") or "").split("/")[0]
    of = f" of {of}" + (" (the training loader's)" if pipeline.get("others") else "") if of else ""
    if pipeline["stages"]:
        lines.append(f"  data pipeline{of}, ms a sample (CPU / wall, {where}, the slowest first):")
    for stage in pipeline["stages"]:
        at = f" ({stage['where']})" if stage["where"] else ""
        waits = (" — waits (a read, a sleep), not CPU" if pipeline.get("core_wait") is not None else
                 " — waits (a read, a sleep; or for a core: this kernel does not tell)") if stage["waiting"] else ""
        lines.append(f"    {stage['name']}{at}: {stage['cpu_ms']:.3f} / {stage['wall_ms']:.3f}{waits}")
    for stage in pipeline.get("batch_stages") or ():
        # taking a batch: its wall is the wait for it (data_wait); its CPU is the unpickling
        wall = f" / {stage['wall_ms']:.3f}" if stage["name"] != HANDOFF else " CPU"
        lines.append(f"    {stage['name']}, a batch on the training process: {stage['cpu_ms']:.3f}{wall}")
    rows = pipeline.get("worker_rows") or []
    if rows:
        processes = pipeline.get("processes") or len(rows)
        over = f" ({processes} processes over the run)" if processes > at_once else ""
        busy = [row["busy"] for row in rows if row.get("busy") is not None]
        computes = statistics.median(row["fetch_cpu_share"] for row in rows)
        line = (f"    workers: {at_once} at once{over}; fetching, they compute {computes:.0%} of the time"
                + (f", each kept {statistics.median(busy):.2f} of a core busy" if busy else ""))
        lines.append(line)
        for row in rows:
            if row["slower"]:
                lines.append(f"    worker pid {row['pid']}: {row['ms_a_sample']:.3f} ms a sample, slower than the "
                             f"others' median")
    return lines
