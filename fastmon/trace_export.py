"""``fastmon export``: a run record as a Chrome trace (JSON Trace Event Format), which
Perfetto (https://ui.perfetto.dev) and chrome://tracing open.

What the record holds, and no more: each step is a slice from its start to its end (the
record keeps each step's end and wall time, exact for every step); its phase times are
the slice's arguments and a counter track per phase, for the steps the probe timed (the
record keeps their totals, not when inside the step each phase ran, so they are not
drawn as slices within it). Beside them: allocator memory and CUDA-event device times
per step, the host and GPU samples as counters, and the probe's events, the advice and
the applied changes as instant events. Times are whole µs from the run's start.

A multi-node run has a run folder per node (each node's monitor records its own ranks):
given them all, one trace holds every rank, each node's samples under a host process of
its own; the nodes' times are their own clocks' (as in-sync as NTP keeps them).
"""

from __future__ import annotations

import json
from pathlib import Path

from fastmon import __version__
from fastmon.phases import PHASES, STEP_FIELDS
from fastmon.records import DEVICE_FIELDS, RunRecord
from fastmon.verdicts import result_text

HOST_PID = 0  # the machine's counters; rank R's process is R + 1
NODE_HOST_PID = 1_000_000  # ... and with several nodes, node N's counters are here + N (past any rank)
STEPS_TID = 1
MIB = 2**20

_I = {name: i for i, name in enumerate(STEP_FIELDS)}
_D = {name: i for i, name in enumerate(DEVICE_FIELDS)}


def _load(run_dir) -> dict:
    record = RunRecord(run_dir)
    try:
        steps = record.steps()
        return {"meta": record.meta(), "steps": steps, "device": record.device_steps(), "samples": record.samples(),
                "events": record.events(), "advice": record.advice(), "applied": record.applied(),
                "advice_times": dict(record.db.execute("SELECT id, t FROM advice")),
                "applied_times": dict(record.db.execute("SELECT exp, t FROM applied")),
                "starts": [row[_I["t_end"]] - row[_I["wall"]] for row in steps]}
    finally:
        record.close()


def chrome_trace(run_dirs) -> dict:
    """``run_dirs``: a run folder, or a multi-node run's folders (one per node)."""
    dirs = list(run_dirs) if isinstance(run_dirs, (list, tuple)) else [run_dirs]
    nodes = [_load(run_dir) for run_dir in dirs]
    t0 = min((t for node in nodes for t in (node["meta"].get("started"), *node["starts"]) if t), default=0.0)

    def us(t: float) -> int:
        # Whole µs: every viewer reads an integer back exactly, where a fraction may be
        # truncated to ns on reading (older Perfetto), which can make back-to-back slices
        # overlap by 1 ns. The exact times are in each step's arguments.
        return round((t - t0) * 1e6)

    out: list[dict] = []
    several = len(dirs) > 1
    for index, (run_dir, node) in enumerate(zip(dirs, nodes)):
        host_pid = NODE_HOST_PID + index if several else HOST_PID
        host_name = f"node {index} host (fastmon samples, {Path(run_dir).name})" if several else "host (fastmon samples)"
        out += _run_events(node, us, t0, host_pid, host_name)
    meta = nodes[0]["meta"]
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"fastmon": __version__, "run": ", ".join(map(str, dirs)), "script": meta.get("script"),
                          "exit_code": next((n["meta"]["exit_code"] for n in nodes if n["meta"].get("exit_code")),
                                            meta.get("exit_code")),
                          "started_unix_s": t0}}


def _run_events(node: dict, us, t0: float, host_pid: int, host_name: str) -> list[dict]:
    """One run folder's trace events, its samples under ``host_pid``."""
    steps, device, samples, events = node["steps"], node["device"], node["samples"], node["events"]
    advice_times, applied_times, starts = node["advice_times"], node["applied_times"], node["starts"]
    out: list[dict] = [_name("process_name", host_pid, None, host_name)]
    step_start = {}
    for rank in sorted({row[_I["rank"]] for row in steps}):
        out += [_name("process_name", rank + 1, None, f"rank {rank}"),
                _name("process_sort_index", rank + 1, None, rank + 1),
                _name("thread_name", rank + 1, STEPS_TID, "steps (host)")]
    previous_end: dict[int, int] = {}  # rank -> its last slice's end
    for row, start in zip(steps, starts):
        rank, step, pid = row[_I["rank"]], row[_I["step"]], row[_I["rank"]] + 1
        step_start[rank, step] = start
        # Back-to-back steps share an instant; Unix times as doubles are exact to ~0.2 µs,
        # and a slice that starts inside the one before is read as nested in it.
        ts = max(us(start), previous_end.get(rank, 0))
        end = previous_end[rank] = max(us(row[_I["t_end"]]), ts)
        args = {"wall_ms": round(row[_I["wall"]] * 1e3, 4), "samples": row[_I["samples"]],
                "timed": bool(row[_I["timed"]])}
        if row[_I["timed"]]:
            phase_ms = {p: round((row[_I[p]] or 0.0) * 1e3, 4) for p in PHASES}
            args.update(phase_ms)
            out.append(_counter("phase ms", pid, start, us, phase_ms))
            if row[_I["mem_alloc"]] is not None and row[_I["mem_reserved"]]:
                for label, field in (("torch allocated MiB", "mem_alloc"), ("torch reserved MiB", "mem_reserved")):
                    out.append(_counter(label, pid, start, us, {"MiB": round(row[_I[field]] / MIB, 1)}))
        out.append({"name": f"step {step}", "cat": "step", "ph": "X", "pid": pid, "tid": STEPS_TID,
                    "ts": ts, "dur": end - ts, "args": args})
    for row in device:
        start = step_start.get((row[_D["rank"]], row[_D["step"]]))
        if start is not None:
            ms = {name.removeprefix("device_"): round((row[_D[name]] or 0.0) * 1e3, 4) for name in DEVICE_FIELDS[2:]}
            pid = row[_D["rank"]] + 1
            out += [_counter("device step ms (CUDA events)", pid, start, us, {"ms": ms.pop("step")}),
                    _counter("device idle before forward ms", pid, start, us, {"ms": ms.pop("idle_before_forward")}),
                    _counter("device phases ms", pid, start, us, ms)]
    roles = sorted({proc["role"] for _, source, data in samples if source == "host"
                    for proc in data.get("processes", [])})
    for t, source, data in samples:
        if source == "host":
            out += _host_counters(t, us, data, roles, host_pid)
        elif source == "gpu":
            out += _gpu_counters(t, us, data, host_pid)
    for event in events:
        name = event["kind"] + (f": {_params(event['params'])}" if event.get("params") else "")
        args = {k: v for k, v in event.items() if k not in ("t", "kind")}
        out.append(_instant(name, event["rank"] + 1, event["t"], us, args, scope="p"))
    for item in node["advice"]:
        out.append(_instant(f"advice: {item['id']}", host_pid, advice_times.get(item["id"], t0), us, item))
    for item in node["applied"]:
        # worded as the report words it
        out.append(_instant(f"experiment {item['exp']}: {item['id']}: {result_text(item)}", host_pid,
                            applied_times.get(item["exp"], t0), us, item))
    return out


def export(run_dirs, out: Path | None = None) -> tuple[Path, int]:
    """Write the trace of a run folder (or of a multi-node run's folders) to ``out``
    (default: ``trace.json`` in the (first) run folder; a ``.gz`` name is gzipped, which
    both viewers open). Returns the file and its step count."""
    trace = chrome_trace(run_dirs)
    first = run_dirs[0] if isinstance(run_dirs, (list, tuple)) else run_dirs
    out = Path(first) / "trace.json" if out is None else out
    text = json.dumps(trace, separators=(",", ":"), default=str)
    if out.suffix == ".gz":
        import gzip

        out.write_bytes(gzip.compress(text.encode()))
    else:
        out.write_text(text)
    return out, sum(1 for event in trace["traceEvents"] if event.get("cat") == "step")


def _name(kind: str, pid: int, tid: int | None, value) -> dict:
    event = {"name": kind, "ph": "M", "pid": pid, "args": {"sort_index" if kind.endswith("index") else "name": value}}
    if tid is not None:
        event["tid"] = tid
    return event


def _counter(name: str, pid: int, t: float, us, values: dict) -> dict:
    return {"name": name, "ph": "C", "pid": pid, "ts": us(t), "args": values}


def _instant(name: str, pid: int, t: float, us, args: dict, scope: str = "g") -> dict:
    return {"name": name, "ph": "i", "s": scope, "pid": pid, "tid": STEPS_TID, "ts": us(t), "args": args}


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


# A counter with several series is drawn stacked (chrome://tracing) or as a track each
# (Perfetto): several series only where their sum means something (phases, roles).
def _host_counters(t: float, us, data: dict, roles: list[str], pid: int) -> list[dict]:
    """``roles``: every role the run's samples name, so that one gone from a sample reads 0."""
    if "cpu_per_core" not in data:
        return []
    cores = data["cpu_per_core"] or [0.0]
    cpu, rss = dict.fromkeys(roles, 0.0), dict.fromkeys(roles, 0.0)
    for proc in data.get("processes", []):
        cpu[proc["role"]] += proc["cpu"]
        rss[proc["role"]] += proc["rss"] / MIB
    out = [_counter("machine CPU % (mean of cores)", pid, t, us, {"%": round(sum(cores) / len(cores), 1)}),
           _counter("machine RAM used GiB", pid, t, us, {"GiB": round(data.get("ram_used", 0) / 2**30, 2)})]
    if roles:
        out += [_counter("process CPU % (of one core)", pid, t, us, {r: round(v, 1) for r, v in cpu.items()}),
                _counter("process RSS MiB", pid, t, us, {r: round(v, 1) for r, v in rss.items()})]
    return out


GPU_SERIES = (("util", "util %", 1), ("mem_used", "memory used GiB", 2**30), ("power_w", "power W", 1),
              ("sm_clock", "SM clock MHz", 1), ("temp_c", "temperature C", 1))


def _gpu_counters(t: float, us, gpus: list[dict], pid: int) -> list[dict]:
    return [_counter(f"GPU {gpu['index']} {label}", pid, t, us, {label: round(gpu[key] / unit, 3)})
            for gpu in gpus for key, label, unit in GPU_SERIES if gpu.get(key) is not None]
