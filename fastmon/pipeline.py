"""Where producing a sample takes its time, from what the probe timed inside the data
pipeline (``fastmon.probe.pipeline_stages``): the training thread's totals (the
``pipeline`` fact) and each forked worker's (``RUN/pipeline/*.json``), summed into one table
of stages, CPU and wall ms a sample each, the slowest first. A transform's time is part of
``__getitem__``'s: the table shows ``__getitem__`` less its transforms, as "the rest of
__getitem__"."""

from __future__ import annotations

import json
from pathlib import Path

FOLDER = "pipeline"
WAITING_RATIO = 2.0  # a stage whose wall is this many times its CPU waits (a read, a sleep) ...
WAITING_MIN_MS = 0.2  # ... by this much a sample at least
GETITEM = "__getitem__"


def _totals(run_dir: Path, fact: dict | None) -> tuple[dict, int]:
    """stage -> [samples, cpu_ns, wall_ns, where], summed; and how many workers wrote."""
    summed: dict[str, list] = {}
    sources = [fact] if fact else []
    files = sorted((Path(run_dir) / FOLDER).glob("*.json"))
    for path in files:
        try:
            sources.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # a worker killed while it wrote: its last whole file is gone with it
    for source in sources:
        for name, stage in (source.get("stages") or {}).items():
            entry = summed.setdefault(name, [0, 0, 0, stage.get("where")])
            entry[0] += stage.get("samples") or 0
            entry[1] += stage.get("cpu_ns") or 0
            entry[2] += stage.get("wall_ns") or 0
    return summed, len(files)


def pipeline_summary(run_dir, fact: dict | None) -> dict | None:
    """{"stages": [{name, where, samples, cpu_ms, wall_ms, waiting}], "workers": N} per
    sample, the slowest (wall) first; None where nothing was timed."""
    summed, workers = _totals(run_dir, fact)
    if not summed:
        return None
    stages = []
    getitem = summed.get(GETITEM)
    inside = [0.0, 0.0]  # the transforms' share of __getitem__, ms a sample
    for name, (samples, cpu_ns, wall_ns, where) in summed.items():
        if not samples or name == GETITEM:
            continue
        cpu_ms, wall_ms = cpu_ns / samples / 1e6, wall_ns / samples / 1e6
        if name not in ("collate_fn", "items and collate"):
            inside[0] += cpu_ms
            inside[1] += wall_ms
        stages.append(_stage(name, where, samples, cpu_ms, wall_ms))
    if getitem and getitem[0]:
        cpu_ms = max(0.0, getitem[1] / getitem[0] / 1e6 - inside[0])
        wall_ms = max(0.0, getitem[2] / getitem[0] / 1e6 - inside[1])
        stages.append(_stage(f"the rest of {GETITEM}" if inside[1] else GETITEM, getitem[3], getitem[0], cpu_ms,
                             wall_ms))
    stages.sort(key=lambda s: -s["wall_ms"])
    return {"stages": stages, "workers": workers}


def _stage(name: str, where, samples: int, cpu_ms: float, wall_ms: float) -> dict:
    return {"name": name, "where": where, "samples": samples, "cpu_ms": round(cpu_ms, 4),
            "wall_ms": round(wall_ms, 4),
            "waiting": wall_ms > WAITING_RATIO * cpu_ms and wall_ms - cpu_ms > WAITING_MIN_MS}


def pipeline_lines(pipeline: dict | None) -> list[str]:
    """The report's lines: where a sample's time goes, stage by stage."""
    if not pipeline:
        return []
    where = "in the training thread" if not pipeline["workers"] else (
        f"in {pipeline['workers']} DataLoader worker process{'es' if pipeline['workers'] > 1 else ''}")
    lines = [f"  data pipeline, ms a sample (CPU / wall, {where}, the slowest first):"]
    for stage in pipeline["stages"]:
        at = f" ({stage['where']})" if stage["where"] else ""
        waits = " — waits (a read, a sleep), not CPU" if stage["waiting"] else ""
        lines.append(f"    {stage['name']}{at}: {stage['cpu_ms']:.3f} / {stage['wall_ms']:.3f}{waits}")
    return lines
