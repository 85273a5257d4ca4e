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

import gzip
import itertools
import json
import os
from pathlib import Path

from fastmon import __version__
from fastmon.common.phases import COLUMN, PHASES
from fastmon.records import DEVICE_FIELDS, RunRecord
from fastmon.common.verdicts import result_text

HOST_PID = 0  # the machine's counters; rank R's process is R + 1
NODE_HOST_PID = 1_000_000  # ... and with several nodes, node N's counters are here + N (past any rank)
STEPS_TID = 1
MIB = 2**20
WRITE_BATCH = 4096  # events encoded and written at a time

_D = {name: i for i, name in enumerate(DEVICE_FIELDS)}


def _first_start(record: RunRecord, meta: dict) -> float | None:
    (first,) = record.db.execute("SELECT MIN(t_end - wall) FROM steps").fetchone()
    return min((t for t in (meta.get("started"), first) if t), default=None)


def export(run_dirs, out: Path | None = None) -> tuple[Path, int]:
    """Write the trace of a run folder (or of a multi-node run's folders) to ``out``
    (default: ``trace.json`` in the (first) run folder; a ``.gz`` name is gzipped, which
    both viewers open). Returns the file and its step count. The events are written as
    they are made, so a run of any length takes the same memory; the file appears whole
    or not at all."""
    dirs = list(run_dirs) if isinstance(run_dirs, (list, tuple)) else [run_dirs]
    out = Path(dirs[0]) / "trace.json" if out is None else out
    records = [RunRecord(d) for d in dirs]
    part = out.with_name(out.name + ".part")
    try:
        metas = [record.meta() for record in records]
        for record in records:  # what report refuses, refused before a line is written
            record.facts()  # (a trace holds no facts; a damaged one is still the record's damage)
            record.check_steps()
        t0 = min((t for t in map(_first_start, records, metas) if t), default=0.0)

        def us(t: float) -> int:
            # Whole µs: every viewer reads an integer back exactly, where a fraction may be
            # truncated to ns on reading (older Perfetto), which can make back-to-back slices
            # overlap by 1 ns. The exact times are in each step's arguments.
            return round((t - t0) * 1e6)

        several = len(dirs) > 1
        encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
        steps = 0
        with (gzip.open(part, "wt", compresslevel=6) if out.suffix == ".gz" else open(part, "w")) as file:
            file.write('{"traceEvents":[')
            first = True
            for index, (run_dir, record) in enumerate(zip(dirs, records)):
                host_pid = NODE_HOST_PID + index if several else HOST_PID
                host_name = f"node {index} host (fastmon samples, {Path(run_dir).name})" if several \
                    else "host (fastmon samples)"
                events = _run_events(record, us, t0, host_pid, host_name)
                while batch := list(itertools.islice(events, WRITE_BATCH)):
                    steps += sum(1 for event in batch if event.get("cat") == "step")
                    file.write(("" if first else ",") + ",".join(map(encode, batch)))
                    first = False
            exit_code = next((m["exit_code"] for m in metas if m.get("exit_code")), metas[0].get("exit_code"))
            file.write('],"displayTimeUnit":"ms","otherData":' + encode(
                {"fastmon": __version__, "run": ", ".join(map(str, dirs)), "script": metas[0].get("script"),
                 "exit_code": exit_code, "started_unix_s": t0}) + "}")
        os.replace(part, out)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    finally:
        for record in records:
            record.close()
    return out, steps


def _run_events(record: RunRecord, us, t0: float, host_pid: int, host_name: str):
    """One run folder's trace events, its samples under ``host_pid``."""
    yield _name("process_name", host_pid, None, host_name)
    for rank in record.ranks():
        yield from (_name("process_name", rank + 1, None, f"rank {rank}"),
                    _name("process_sort_index", rank + 1, None, rank + 1),
                    _name("thread_name", rank + 1, STEPS_TID, "steps (host)"))
    events = record.events()
    # each rank's FLOPs a sample (the probe's count), for a FLOP/s counter at its timed steps
    per_sample = {}
    for e in events:
        counted = record.steps_upto(e["rank"], e["from_step"], 1) if e["kind"] == "flops" and e.get("flops") else []
        if counted and counted[0].step == e["from_step"] and counted[0].samples:
            per_sample[e["rank"]] = e["flops"] / counted[0].samples
    previous_end: dict[int, int] = {}  # rank -> its last slice's end
    for row in record.iter_steps():
        rank, step, pid = row.rank, row.step, row.rank + 1
        start = row.t_end - row.wall
        # Back-to-back steps share an instant; Unix times as doubles are exact to ~0.2 µs,
        # and a slice that starts inside the one before is read as nested in it.
        ts = max(us(start), previous_end.get(rank, 0))
        end = previous_end[rank] = max(us(row.t_end), ts)
        args = {"wall_ms": round(row.wall * 1e3, 4), "samples": row.samples,
                "timed": bool(row.timed)}
        if row.timed:
            phase_ms = {p: round((row[COLUMN[p]] or 0.0) * 1e3, 4) for p in PHASES}
            args.update(phase_ms)
            yield _counter("phase ms", pid, start, us, phase_ms)
            if rank in per_sample and row.samples and row.wall > 0:
                rate = per_sample[rank] * row.samples / row.wall
                yield _counter("achieved TFLOP/s", pid, start, us, {"TFLOP/s": float(f"{rate / 1e12:.4g}")})
            if row.mem_alloc is not None and row.mem_reserved:
                for label, field in (("torch allocated MiB", "mem_alloc"), ("torch reserved MiB", "mem_reserved")):
                    yield _counter(label, pid, start, us, {"MiB": round(row[COLUMN[field]] / MIB, 1)})
        yield {"name": f"step {step}", "cat": "step", "ph": "X", "pid": pid, "tid": STEPS_TID,
               "ts": ts, "dur": end - ts, "args": args}
    for row, start in record.device_steps_with_start():
        ms = {name.removeprefix("device_"): round((row[_D[name]] or 0.0) * 1e3, 4) for name in DEVICE_FIELDS[2:]}
        pid = row[_D["rank"]] + 1
        yield from (_counter("device step ms (CUDA events)", pid, start, us, {"ms": ms.pop("step")}),
                    _counter("device idle before forward ms", pid, start, us, {"ms": ms.pop("idle_before_forward")}),
                    _counter("device phases ms", pid, start, us, ms))
    samples = record.samples()
    roles = sorted({proc["role"] for _, source, data in samples if source == "host"
                    for proc in data.get("processes", [])})
    for t, source, data in samples:
        if source == "host":
            yield from _host_counters(t, us, data, roles, host_pid)
        elif source == "gpu":
            yield from _gpu_counters(t, us, data, host_pid)
    for event in events:
        name = event["kind"] + (f": {_params(event['params'])}" if event.get("params") else "")
        args = {k: v for k, v in event.items() if k not in ("t", "kind")}
        yield _instant(name, event["rank"] + 1, event["t"], us, args, scope="p")
    advice_times = dict(record.db.execute("SELECT id, t FROM advice"))
    for item in record.advice():
        yield _instant(f"advice: {item['id']}", host_pid, advice_times.get(item["id"], t0), us, item)
    applied_times = dict(record.db.execute("SELECT exp, t FROM applied"))
    for item in record.applied():
        # worded as the report words it
        yield _instant(f"experiment {item['exp']}: {item['id']}: {result_text(item)}", host_pid,
                       applied_times.get(item["exp"], t0), us, item)


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
