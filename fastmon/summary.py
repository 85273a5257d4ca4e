"""A run's summary: what ``fastmon report`` prints and what the headless mode shows at
the end. Built from the run record alone, so a replay shows the same numbers."""

from __future__ import annotations

import os
import socket
import time
from typing import NamedTuple

from fastmon.advisor.bound import COMMUNICATION, COMPUTE, GpuBusy, bound, of_even_ranks, remedies
from fastmon.advisor.types import PROBLEM
from fastmon.advisor.verdict import verdict
from fastmon.advisor.window import Window, recent, window_tokens
from fastmon.calibration import measured_tflops
from fastmon.peaks import math_dtype, peak_tflops
from fastmon.pipeline import pipeline_summary
from fastmon.permanent import line_text, permanent_changes
from fastmon.common.phases import COLUMN, PHASES
from fastmon.common.verdicts import running_at_end
from fastmon.records import RunRecord
from fastmon.step_table import StepTable
from fastmon.common.wire import SEND_EVERY

STRAGGLER_MARGIN = 0.10  # own work this much above the median rank's ...
STRAGGLER_STEP_SHARE = 0.05  # ... and worth at least this share of a step: the straggler



FIRST_STEP_NAMED_SHARE = 0.2  # the first step's phases this big are named beside it
MIN_EFFECTIVE_TIMED = 5.0  # timed steps' worth under which phase shares are said to rest on few
FEW_TIMED = "its phases rest on few timed steps (--every-step times each one)"


def rates(steps: int, samples: int, wall: float, phase_totals: dict | None = None) -> dict:
    """The run-wide figures from running totals (what the header shows), rounded as the report."""
    out = {"steps": steps, "samples": samples, "duration_s": round(wall, 4),
           "steps_per_s": round(steps / wall, 3) if wall > 0 else 0.0,
           "samples_per_s": round(samples / wall, 3) if wall > 0 else 0.0}
    if phase_totals is not None:
        total = sum(phase_totals.values())
        out["phases"] = {p: round(v / total, 5) if total > 0 else 0.0 for p, v in phase_totals.items()}
    return out


def token_rates(tokens: int | None, tokens_nonpad: int | None, wall: float) -> dict:
    """The tokens and their rate (None where the run's model is fed none), as the report rounds them."""
    per_s = lambda n: None if n is None else round(n / wall, 3) if wall > 0 else 0.0  # noqa: E731
    return {"tokens": tokens, "tokens_per_s": per_s(tokens), "tokens_nonpad": tokens_nonpad,
            "tokens_nonpad_per_s": per_s(tokens_nonpad)}


def window_summary(window: Window) -> dict:
    total = sum(window.phase_totals.values())
    return {
        **rates(window.steps, window.samples, window.wall, window.phase_totals),
        **token_rates(window.tokens, window.tokens_nonpad, window.wall),
        # collectives that ran under the phases, as a share of the same time (not in the shares' 100%)
        "comm_overlapped": round(window.comm_overlapped / total, 5) if total > 0 else 0.0,
        "timed_steps": window.timed_steps,
        "phase_ms": {p: {"median": round(window.phase_median[p] * 1e3, 4), "p90": round(window.phase_p90[p] * 1e3, 4)}
                     for p in PHASES},
        "step_ms": {"median": round(window.step_median * 1e3, 4), "p90": round(window.step_p90 * 1e3, 4)},
        "own_work_ms": round(window.own_work_median * 1e3, 4),
        # the data wait's share without its longest one: is it a habit
        "data_wait_recurring": None if (recurring := window.recurring_data_wait) is None else round(recurring, 5),
        "timed_effective": round(window.timed_effective, 1),  # how many timed steps the phases are worth
    }


NVML_PERIOD_S = 1.0  # NVML averages utilization over up to this much time before a reading
SLOWED = {"compiled": "torch.compile", "flops": "FLOP count"}  # probe events: steps that ran slower, and why


def slowed_steps(events: list[dict]) -> dict[int, dict[int, str]]:
    """Each rank's steps that ran slower than training does, and why: torch.compile
    compiled in them, or fastmon counted their FLOPs (a count refused before it began
    slowed nothing)."""
    out: dict[int, dict[int, str]] = {}
    for e in events:
        if e["kind"] == "compiled" or (e["kind"] == "flops" and "seconds" in e):
            for step in range(e["from_step"], e["to_step"] + 1):
                out.setdefault(e.get("rank", 0), {}).setdefault(step, SLOWED[e["kind"]])
    return out


def steady_summary(table: StepTable, left_out) -> dict:
    """Steps and samples of every step; rates, shares and medians of the steady run, without
    its start-up steps (``steady_left_out``; all of them in a run of start-up alone)."""
    steady = table.window(left_out=left_out)
    out = window_summary(steady if steady.steps else table.window())
    samples = table.samples.total()
    tokens, tokens_nonpad = window_tokens(list(table.timed.values()), len(table), samples)
    out.update(steps=len(table), samples=samples, duration_s=round(sum(table.walls), 4),
               steady_steps=steady.steps or len(table), tokens=tokens, tokens_nonpad=tokens_nonpad)
    return out


def steady_left_out(table: StepTable, slowed: dict[int, str]) -> dict[int, str]:
    """The start-up steps, left out of the steady run's rates, shares and medians, and why:
    the ``slowed_steps``, and the first step when more follow (CUDA's and cuDNN's start,
    the allocator's first blocks, the first batch's workers, lazy modules)."""
    out = {s: why for s, why in sorted(slowed.items()) if table.has(s)}
    if len(table) > 1 and table.steps[0] not in out:
        out[table.steps[0]] = first_step_why(table.row(0))
    return out


def first_step_why(row) -> str:
    wall = row.wall if row else 0
    if wall <= 0:
        return "first step"
    big = sorted((p for p in PHASES if (row[COLUMN[p]] or 0) >= FIRST_STEP_NAMED_SHARE * wall),
                 key=lambda p: -row[COLUMN[p]])
    return "first step" + (": " + ", ".join(f"{p} {row[COLUMN[p]] * 1e3:,.0f} ms" for p in big) if big else "")


def holds_from(result: dict) -> int:
    """The first step of the run as a kept change left it (older records: its first step)."""
    return result.get("holds_from") or result["step"]


def since_candidates(applied: list[dict]) -> list[int]:
    """Where the run as it is now begins, best first: where the last kept change holds
    from, then where it was applied (the first with timed steps is taken: on short steps
    a few hundred may hold none)."""
    kept = [a for a in applied if a.get("kept")]
    if not kept:
        return []
    last = max(kept, key=holds_from)
    return [holds_from(last), last["step"]]


def since_last_change(rows: list, applied: list[dict]) -> list:
    """The rows that describe the run as it is now: from the step at which the last
    change fastmon kept holds; all of ``rows`` when none did, or while none of the later
    rows was timed yet. Every surface's "current" figures start here, so no screen shows
    the starved run after its fix."""
    for step in since_candidates(applied):
        after = [r for r in rows if r.step >= step]
        if any(r.timed for r in after):
            return after
    return rows


def current_rows(rows: list, applied: list[dict], left_out) -> list:
    """``since_last_change`` of the steady run's rows (the status line's recent steps)."""
    return since_last_change([r for r in rows if r.step not in left_out] or rows, applied)


def current_window(table: StepTable, applied: list[dict], left_out) -> Window:
    """The steady run as it is now (an ended run's shares bar, the report's "after"): as
    ``current_rows``, over the whole table."""
    if sum(map(table.has, left_out)) >= len(table):  # a run of start-up alone: all of it
        left_out = frozenset()
    for step in since_candidates(applied):
        after = table.window(table.position(step), None, left_out)
        if after.timed_steps:
            return after
    return table.window(left_out=left_out)


def before_and_after(table: StepTable, applied: list[dict], left_out) -> dict | None:
    """The steady run before fastmon's first change and since its last one that stayed
    in effect, side by side; None when nothing stayed in effect."""
    if not any(a.get("kept") for a in applied):
        return None
    before = table.window(0, table.position(min(a["step"] for a in applied)), left_out)
    after = next((w for w in (table.window(table.position(step), None, left_out) for step in since_candidates(applied))
                  if w.timed_steps), None)
    if not before.steps or after is None:
        return None
    return {"before": {"from_step": before.first_step, "to_step": before.last_step, **window_summary(before)},
            "after": {"from_step": after.first_step, "to_step": after.last_step, **window_summary(after)}}


def straggler(ranks: list[dict]) -> int | None:
    """The rank whose own work per step (its step without the phases where DDP ranks wait
    for each other) exceeds the median rank's by the margin, or None.

    DDP ranks wait for the slowest in backward's gradient all-reduce, so their step times
    even out; the straggler is the rank that makes the others wait."""
    if len(ranks) < 2:
        return None
    ordered = sorted(ranks, key=lambda r: r["own_work_ms"])
    middle, slowest = ordered[(len(ordered) - 1) // 2], ordered[-1]
    excess = slowest["own_work_ms"] - middle["own_work_ms"]
    if excess > STRAGGLER_MARGIN * middle["own_work_ms"] and excess > STRAGGLER_STEP_SHARE * middle["step_ms"]["median"]:
        return slowest["rank"]
    return None


def lost_nodes(events, until: float | None = None) -> dict[int, float]:
    """The nodes of a multi-node job whose monitors stopped reporting to node 0's and did
    not come back (by ``until``): node -> when it was lost."""
    lost: dict[int, float | None] = {}
    for event in events:
        at = event.get("at")
        if event.get("kind") == "node_lost" and isinstance(at, (int, float)) and (until is None or at <= until):
            lost[event["node"]] = at
        elif event.get("kind") == "node_joined":
            lost[event["node"]] = None
    return {node: at for node, at in sorted(lost.items()) if at is not None}


def rank_table(rank_rows: dict, steps: int) -> tuple[list[dict], int | None]:
    """Under DDP, each rank's figures over its last ``steps`` steps, and the straggler."""
    if len(rank_rows) < 2:
        return [], None
    ranks = [{"rank": rank, **window_summary(Window.from_rows(recent(rows, steps)))}
             for rank, rows in sorted(rank_rows.items())]
    return ranks, straggler(ranks)


def ranks_since(tables: dict[int, StepTable], slowed: dict, step: int | None) -> list[dict]:
    """Each rank's steady steps from ``step`` on (all of them for None), as
    ``window_summary``s: under DDP, the steps the run's verdict reads."""
    out = []
    for rank, table in sorted(tables.items()):
        start = table.position(step) if step is not None else 0
        out.append({"rank": rank, **window_summary(table.window(start, None, set(steady_left_out(
            table, slowed.get(rank, {})))))})
    return out


def judged_steps(own: dict, ranks: list[dict], slowest: int | None) -> tuple[dict, int | None]:
    """The steps the verdict reads (a ``window_summary``), and the straggler's rank where
    they are its: DDP ranks wait for the slowest in their collectives, so a fast rank's
    "communication" is the straggler's own time (rank 0 read "communication-bound 91%"
    while rank 1 waited 77% of its step for data). Else ``own``, and None."""
    slow = next((r for r in ranks if r["rank"] == slowest), None)
    return (slow, slowest) if slow else (own, None)


class Judged(NamedTuple):
    """What the verdict reads, as every surface takes it (``judge``)."""
    bound: tuple[str, str] | None  # ``bound``'s (limit, evidence)
    steps: dict  # the window_summary judged
    rank: int | None  # the straggler's, where they are its steps
    gpu: GpuBusy | None  # its GPU over them


def judge(own: dict, ranks: list[dict], slowest: int | None, busy: dict[int, GpuBusy] | None,
          on_gpu: bool) -> Judged:
    """The verdict's steps (``judged_steps``), the GPU they ran on (``gpu_of``, from each
    GPU's ``busy``) and their ``bound``."""
    steps, rank = judged_steps(own, ranks, slowest)
    gpu = gpu_of(busy or {}, rank)
    found = bound_of(steps, gpu, on_gpu)
    if found and len(ranks) > 1 and rank is None and found[0] in (COMMUNICATION, COMPUTE):
        found = found[0], of_even_ranks(found[1], steps["phases"].get("comm", 0.0))
    return Judged(found, steps, rank, gpu)


def bound_of(steps: dict, gpu: GpuBusy | None, on_gpu: bool) -> tuple[str, str] | None:
    """``bound`` of a ``window_summary``'s steps, saying so where their phases rest on few
    timed steps."""
    found = bound(steps["phases"], gpu, on_gpu, steps.get("data_wait_recurring"))
    if found and steps.get("timed_effective", MIN_EFFECTIVE_TIMED) < MIN_EFFECTIVE_TIMED:
        return found[0], f"{found[1]}; {FEW_TIMED}"
    return found


def job_rates(ranks: list[dict]) -> dict:
    """The whole job's rates and totals: its ranks' summed."""
    counted = [r for r in ranks if r.get("tokens") is not None]
    total = lambda key: round(sum(r[key] for r in counted), 3) if counted else None  # noqa: E731
    return {"ranks": len(ranks), "samples": sum(r["samples"] for r in ranks),
            "samples_per_s": round(sum(r["samples_per_s"] for r in ranks), 3),
            "tokens": total("tokens"), "tokens_per_s": total("tokens_per_s")}


TOKENS_OPTION = "--tokens-per-sample"


def tokens_note(summary: dict, facts: dict, meta: dict) -> str | None:
    """Where the tokens come from when it is not the model's own ids, or why there are none
    although the model holds an embedding."""
    if summary.get("tokens") is not None:
        n = meta.get("tokens_per_sample")
        return f"tokens: the model's ids where fastmon found them, else {n} a sample ({TOKENS_OPTION})" if n else None
    if any(isinstance(v, dict) and v.get("embedding") for k, v in facts.items() if k.startswith("model.")):
        return (f"tokens not counted: the model holds an nn.Embedding, but its training forward took no `input_ids` "
                f"and no integer ids first; `fastmon run {TOKENS_OPTION} N` counts N a sample")
    return None


def attached_end(meta: dict) -> str | None:
    """A job that called fastmon.attach(): "finished" (every rank said goodbye), "crashed"
    (one never did: killed), "running"; None for a run fastmon started."""
    attached = meta.get("attached")
    if not attached:
        return None
    if not meta.get("ended"):
        return "running"
    return attached.get("end", "finished") if isinstance(attached, dict) else "finished"


def summarize(run_dir) -> dict:
    """The summary of one run folder, or of several (one per node of a multi-node run,
    each holding its own ranks) merged into one view."""
    dirs = list(run_dir) if isinstance(run_dir, (list, tuple)) else [run_dir]
    records = [RunRecord(d) for d in dirs]
    try:
        metas = [rec.meta() for rec in records]
        meta = metas[0]
        tables = {rank: StepTable.read(rec, rank) for rec in records for rank in rec.ranks()}
        ranks = sorted(tables)
        primary = tables[ranks[0]] if ranks else StepTable.empty()
        exit_codes = [m.get("exit_code") for m in metas]
        events = [e for rec in records for e in rec.events()]
        slowed = slowed_steps(events)
        left_out = steady_left_out(primary, slowed.get(ranks[0] if ranks else 0, {}))
        summary = {"run": ", ".join(map(str, dirs)), "folders": len(dirs), "script": meta.get("script"),
                   "cwd": meta.get("cwd"),
                   "exit_code": next((c for c in exit_codes if c), exit_codes[0]),
                   # fastmon.attach(): no exit code is seen; whether every rank said goodbye is
                   "attached": attached_end(meta),
                   **steady_summary(primary, set(left_out))}
        summary["startup_steps"] = [{"step": step, "wall_s": round(primary.walls[primary.position(step)], 4),
                                     "why": why} for step, why in sorted(left_out.items())]
        summary["ranks"] = []
        if len(ranks) > 1:
            for rank in ranks:
                rank_left_out = set(steady_left_out(tables[rank], slowed.get(rank, {})))
                summary["ranks"].append({"rank": rank, **steady_summary(tables[rank], rank_left_out)})
        summary["straggler"] = straggler(summary["ranks"])
        summary["job"] = job_rates(summary["ranks"] or [summary])
        summary["memory"] = _memory(primary, records[0])
        summary["gpu"] = _gpu(records[0], meta, steady_span(records[0], ranks[0] if ranks else 0, primary, left_out))
        summary["device"] = _device(records[0])
        # What the probes counted at the end, less what is on record: what could not be written too
        made = sum(v or 0 for m in metas for v in (m.get("steps_made") or {}).values())
        summary["dropped"] = max(sum(m.get("dropped", 0) or 0 for m in metas), made - sum(map(len, tables.values())))
        last_ends = {rank: (rec.step_span(rank, tables[rank].steps[-1], tables[rank].steps[-1]) or (0, 0))[1]
                     for rec in records for rank in rec.ranks() if len(tables[rank])}
        summary["record_lacks"] = record_lacks(metas, last_ends, summary["dropped"], made, events)
        summary["output_dropped_bytes"] = sum((m.get("output") or {}).get("dropped_bytes", 0) for m in metas)
        summary["channel_refused"] = sum((m.get("channel") or {}).get("refused", 0) for m in metas)
        summary["job_link"] = meta.get("job_link")
        summary["applied"] = [_applied_out(a) for rec in records for a in rec.applied()]
        facts = records[0].facts()
        summary["tokens_note"] = tokens_note(summary, facts, meta)
        summary["pipeline"] = pipeline_summary(dirs[0], facts)
        from fastmon.rederive import advice_now, advised_by_other_rules  # (it reads this module's windows)

        summary["advice_rederived"] = advised_by_other_rules(meta)
        if summary["advice_rederived"]:
            # the straggler's steps where one is named, as the live advisor read them
            slow = summary["straggler"] if summary["straggler"] in records[0].ranks()[1:] else None
            rank = slow if slow is not None else ranks[0] if ranks else 0
            table = tables.get(rank, primary)
            advice = advice_now(records[0], rank, table, steady_left_out(table, slowed.get(rank, {})),
                                summary["applied"], facts, meta, straggler=slow is not None)
        else:
            advice = [a for rec in records for a in rec.advice()]
        summary["advice"] = [_advice_out(a) for a in advice]
        summary["permanent"] = permanent_changes(summary["applied"], facts, summary["advice"])
        summary["permanent_changes"] = [line_text(c) for c in summary["permanent"]]
        summary["changes"] = before_and_after(primary, summary["applied"], set(left_out))
        summary["timing"] = facts.get("timing")  # the probe's measure of what a timed step costs
        summary["compile"] = facts.get("compile")
        ranks_now = ranks_since(tables, slowed, (summary["changes"] or {}).get("after", {}).get("from_step")) \
            if len(ranks) > 1 else []
        summary["compute"] = compute(summary, events, primary, facts, ranks_now)
        summary["verdict"] = run_verdict(summary, facts, ranks_now)
        summary["probe_faults"] = [e for e in events if e["kind"] == "probe_fault"]
        summary["profiles"] = [e for e in events if e["kind"] == "profile"]
        summary["spawned_training"] = [e for e in events if e["kind"] == "spawned_training"]
        summary["notices"] = [e["message"] for e in events if e["kind"] == "notice"]  # e.g. where --log-to wrote
        summary["profile_at"] = meta.get("profile_at")  # asked for with --profile-at
        summary["wall_s"] = round((meta.get("ended") or 0) - (meta.get("started") or 0), 3) if meta.get("ended") else None
        return summary
    finally:
        for rec in records:
            rec.close()


def monitor_running(meta: dict) -> bool:
    """Whether the monitor that writes this record still runs: its process, on this host."""
    pid = meta.get("monitor_pid")
    if not isinstance(pid, int) or meta.get("host") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process by that number: not ours to tell
        return False
    return True


def record_lacks(metas: list[dict], last_ends: dict, dropped: int, made: int, events: list[dict]) -> dict | None:
    """What the record does not hold of the training, as far as it can be known: steps the
    probes made and the record lacks (a full disk, a monitor behind), or, for a training
    process that ended without its probe's last send (os._exit, a signal, a crash in
    native code), how long before its end the record stops. None when it holds it all."""
    unended = [m for m in metas if "ended" not in m]
    if unended:  # the monitor did not record its end: what came after its last step is not here
        last = max(last_ends.values(), default=None)
        after = f"steps after {time.strftime('%H:%M:%S', time.localtime(last))}" if last else "its steps"
        if any(monitor_running(m) for m in unended):
            return {"steps": None, "up_to_s": None, "ranks": [], "partial": "running",
                    "why": f"the run is still going: {after} are not recorded yet"}
        return {"steps": None, "up_to_s": None, "ranks": [], "partial": "monitor_ended",
                "why": f"the monitor ended before the training did, or its end is unknown (killed, hung up, "
                       f"its machine lost): {after} are not in this record"}
    execs = [e for e in events if e["kind"] == "exec"]
    if execs:  # the training became another program: what that one did is nobody's
        first = min(execs, key=lambda e: e.get("step") or 0)
        return {"steps": None, "up_to_s": None, "ranks": sorted({e.get("rank", 0) for e in execs}),
                "partial": "exec",
                "why": f"the training process replaced itself at step {first.get('step')} (os.exec: "
                       f"{' '.join(first.get('argv') or [])}): fastmon does not follow an exec, and the "
                       "steps after it are not in this record"}
    said = {str(rank) for m in metas for rank in (m.get("steps_made") or {})}
    silent = [rank for rank in last_ends if str(rank) not in said]
    ended = max((m.get("trainer_exit") or m.get("ended") or 0) for m in metas)
    if not last_ends and not said and any(m.get("trainer_exit") for m in metas):
        # nothing reached the record, and no probe said what it made at the end
        return {"steps": None, "up_to_s": SEND_EVERY, "ranks": [],
                "why": f"no step reached the record: a probe sends every {SEND_EVERY:g} s, and the training "
                       "ended before, or without its last send (os._exit, a signal, a crash in native code)"}
    if silent and ended:
        gap = max(0.0, ended - max(last_ends[rank] for rank in silent))
        who = f" (rank {', '.join(map(str, silent))})" if len(last_ends) > 1 else ""
        return {"steps": dropped or None, "up_to_s": round(gap, 2), "ranks": silent,
                "why": f"the training process ended without its last send{who}, by os._exit, a signal or a "
                       f"crash in native code: the steps it made in its last {gap:.2f} s may be missing"}
    if dropped:
        disk = any(e["kind"] == "record_error" for e in events) or any(m.get("record_error") for m in metas)
        why = ("the run file could not be written (a full disk)" if disk
               else "they did not reach the monitor (its channel fell behind)")
        return {"steps": dropped, "up_to_s": None, "ranks": [], "why": f"{dropped:,} of {made:,} steps: {why}"}
    return None


def _memory(table: StepTable, record: RunRecord) -> dict:
    rows = table.timed.values()  # an untimed step's row holds no memory figures
    out = {"torch_peak_allocated": max((r.mem_peak or 0 for r in rows), default=0),
           "torch_peak_reserved": max((r.mem_reserved or 0 for r in rows), default=0)}
    rss = [sum(p["rss"] for p in s.get("processes", []) if p.get("role") == "trainer")
           for _, _, s in record.samples("host")]
    host = [s.get("processes", []) for _, _, s in record.samples("host")]
    workers = [[p.get("pss") or p["rss"] for p in procs if p.get("role") == "worker"] for procs in host]
    out["trainer_rss_peak"] = max(rss, default=0)
    out["workers_pss_peak"] = max(map(sum, workers), default=0)
    out["workers_seen_max"] = max(map(len, workers), default=0)
    for role in ("compile", "other"):
        seen = [[p["rss"] for p in procs if p.get("role") == role] for procs in host]
        out[f"{role}_processes_max"] = max(map(len, seen), default=0)
        out[f"{role}_rss_peak"] = max(map(sum, seen), default=0)
    return out


def steady_span(record: RunRecord, rank: int, table: StepTable, left_out) -> tuple[float, float] | None:
    """When the steady run's steps ran: from the first one's start to the last one's end."""
    reach = len(left_out) + 1  # a steady step is among this many at either end
    first = next((s for s in table.steps[:reach] if s not in left_out), None)
    last = next((s for s in reversed(table.steps[-reach:]) if s not in left_out), None)
    return None if first is None else record.step_span(rank, first, last)


def _gpu(record: RunRecord, meta: dict, steady_span: tuple[float, float] | None) -> dict:
    samples = record.samples("gpu")
    if not samples:
        return {"available": False, "note": meta.get("gpu_note") or "no GPU samples"}
    return {"available": True, "devices": gpus_over_run(samples, steady_span)}


def gpus_over_run(samples: list[tuple[float, str, list[dict]]], steady_span: tuple[float, float] | None) -> list:
    """Each GPU over the run (``gpu_figures``), with its utilization (and SM activity, where
    the GPU has GPM) during the steady run's steps."""
    devices = gpu_figures([sample for _, _, sample in samples])
    during = {d["index"]: d for d in gpu_figures(samples_during(samples, steady_span))}
    for device in devices:
        for key in ("util", "sm_active", "sm_occupancy", "tensor_active"):
            device[f"{key}_in_steps"] = during.get(device["index"], {}).get(f"{key}_mean")
    return devices


def busy_in_span(samples: list[tuple[float, str, list[dict]]], span: tuple[float, float] | None
                 ) -> dict[int, GpuBusy]:
    """How busy each GPU was over the samples (the record's, timed) taken within ``span``:
    fastmon's one figure of it, over the steps it is said of."""
    during = gpu_figures(samples_during(samples, span))
    return {d["index"]: GpuBusy(d["util_mean"], d.get("sm_active_mean")) for d in during if d["util_mean"] is not None}


def samples_during(samples: list[tuple[float, str, list[dict]]], span: tuple[float, float] | None) -> list:
    """The samples taken while ``span`` ran; for a span shorter than NVML's sampling, the
    first one after it (NVML's utilization is of the period before its reading)."""
    if span is None:
        return []
    during = [sample for t, _, sample in samples if span[0] <= t <= span[1]]
    if not during:
        during = [sample for t, _, sample in samples if span[1] < t <= span[1] + NVML_PERIOD_S][:1]
    return during


def busy_during(gpu_timed: list, rows, first_step: int | None = None) -> dict[int, GpuBusy]:
    """How busy each GPU was while ``rows`` ran (from ``first_step`` on, if given): the
    figure the report, the advisor and the verdict all use, over the steps they speak of."""
    if first_step is not None:
        rows = [r for r in rows if r.step >= first_step]
    return busy_in_span(gpu_timed, rows_span(rows))


def gpu_of(busy: dict[int, GpuBusy], rank: int | None) -> GpuBusy | None:
    """The GPU a rank's steps ran on: local rank r on the node's r-th GPU (torchrun's
    cuda:LOCAL_RANK with every GPU visible); the first one for one process (None)."""
    if not busy:
        return None
    indexes = sorted(busy)
    return busy[indexes[rank % len(indexes)] if rank is not None else indexes[0]]


def rows_span(rows) -> tuple[float, float] | None:
    """When ``rows`` (consecutive steps) ran: the first one's start to the last one's end."""
    return (rows[0].t_end - rows[0].wall, rows[-1].t_end) if rows else None


def first_count(events) -> dict | None:
    """The first rank's FLOP count: the probe's ``flops`` event, of ``events``."""
    return min((e for e in events if e["kind"] == "flops"), key=lambda e: e.get("rank", 0), default=None)


def counted_steps(count: dict) -> range:
    """The steps whose work ``count`` holds: one, or one for each optimizer that stepped in
    turn (a GAN's discriminator and generator steps)."""
    return range(count["from_step"], count["from_step"] + (count.get("steps") or 1))


def counted_samples(count: dict | None, rows) -> int:
    """The samples of the steps ``count`` ran in, where they are among ``rows``; else 0."""
    if not count:
        return 0
    steps = counted_steps(count)
    return sum(r.samples or 0 for r in rows if r.step in steps)


def compute(summary: dict, events: list[dict], table: StepTable, facts: dict, ranks_now: list[dict]) -> dict:
    """The model's FLOPs (the probe's count on one step), the rate the steady run reaches,
    its MFU against the chip's datasheet peak, and which limit the run presses on (under
    DDP, ``ranks_now``: each rank over the report's "after" steps)."""
    on_gpu = (facts.get("environment") or {}).get("accelerator") == "cuda"
    devices = summary["gpu"].get("devices") or []
    now = (summary.get("changes") or {}).get("after") or summary  # the run as it is after fastmon's changes
    busy = {d["index"]: GpuBusy(d["util_in_steps"], d.get("sm_active_in_steps"))
            for d in devices if d.get("util_in_steps") is not None}
    judged = judge(now, ranks_now, straggler(ranks_now), busy, on_gpu)
    verdict, gpu = judged.bound, judged.gpu
    out: dict = {"bound": verdict[0] if verdict else None,
                 "bound_why": verdict[1] if verdict else "no GPU utilization was sampled during the steps",
                 "bound_rank": judged.rank,  # the straggler's steps, where the verdict reads them
                 "gpu_busy_in_steps": gpu.util if gpu else None,
                 "sm_active_in_steps": gpu.sm_active if gpu else None}
    if verdict and (tries := remedies(verdict[0], compiled_model(facts))):
        out["remedies"] = tries
    count = first_count(events)
    samples = sum(table.samples[table.position(step)] for step in counted_steps(count) if table.has(step)) \
        if count else 0
    if summary["ranks"] and count and not count.get("error"):
        out.update(per_rank(count, samples, summary["ranks"], facts))
    figures = {**flops_figures(count, samples, summary["steps_per_s"], summary["samples_per_s"], facts), **out}
    figures.update(by_tokens(figures, summary, facts))
    return figures


ESTIMATE_DISAGREES = 0.25  # counted and estimated FLOPs a token this far apart: the report says why


def by_tokens(figures: dict, summary: dict, facts: dict) -> dict:
    """MFU by tokens: the 6·N + 12·L·d·T estimate of FLOPs a token (nanoGPT's estimate_mfu,
    with T the tokens a sample), its FLOP rate at the run's tokens/s, its MFU against the
    same peak, and a line where it and the counted FLOPs a token disagree."""
    lm = next((v["lm"] for k, v in sorted(facts.items()) if k.startswith("model.") and isinstance(v, dict)
               and v.get("lm")), None)
    if not lm or not summary.get("tokens") or not summary.get("samples") or not summary.get("tokens_per_s"):
        return {}
    per_sample = summary["tokens"] / summary["samples"]
    per_token = 6 * lm["params"] + 12 * lm["layers"] * lm["width"] * per_sample
    rate = per_token * summary["tokens_per_s"] / 1e12
    out = {"flops_per_token_estimate": round(per_token), "tflops_per_s_by_tokens": float(f"{rate:.4g}"),
           "mfu_by_tokens": float(f"{rate / figures['peak_tflops']:.4g}") if figures.get("peak_tflops") else None}
    if figures.get("flops_per_sample"):
        counted = figures["flops_per_sample"] / per_sample
        out["flops_per_token_counted"] = round(counted)
        out["estimate_differs"] = abs(counted - per_token) > ESTIMATE_DISAGREES * per_token
    return out


def per_rank(count: dict, samples_at_count: int, ranks: list[dict], facts: dict) -> dict:
    """Each rank's FLOP rate and MFU at its own steady rate, and their mean MFU: one count
    (the first rank's, of a model the same on every rank) times each rank's samples/s."""
    figures = []
    for r in ranks:
        rate = flops_figures(count, samples_at_count, r["steps_per_s"], r["samples_per_s"], facts)
        figures.append({"rank": r["rank"], "tflops_per_s": rate["tflops_per_s"], "mfu": rate["mfu"]})
    mfus = [r["mfu"] for r in figures if r["mfu"] is not None]
    return {"ranks": figures, "mfu_mean": float(f"{sum(mfus) / len(mfus):.4g}") if mfus else None}


def compiled_model(facts: dict) -> bool:
    """Whether the run's model is compiled (torch.compile or Module.compile)."""
    return bool(facts.get("compile")) or "model.OptimizedModule" in facts or any(
        (v or {}).get("wrapper") == "torch.compile" for k, v in facts.items() if k.startswith("model."))


def run_verdict(summary: dict, facts: dict, ranks_now: list[dict]) -> dict | None:
    """The verdict of the steady run as it is after fastmon's changes (the report's "after")."""
    c = summary["compute"]
    now = (summary.get("changes") or {}).get("after") or summary
    judged, slow = judged_steps(now, ranks_now, c.get("bound_rank"))
    util = c.get("gpu_busy_in_steps")
    busy = GpuBusy(util, c.get("sm_active_in_steps")) if util is not None else None
    found = verdict((c["bound"], c["bound_why"]) if c.get("bound") else None, judged["phases"], summary["advice"],
                    summary["applied"], busy, compiled_model(facts), slow)
    return found.as_dict() if found else None


def flops_figures(count: dict | None, samples_at_count: int, steps_per_s: float, samples_per_s: float,
                  facts: dict) -> dict:
    """The FLOP rate of steps at ``steps_per_s`` / ``samples_per_s`` from the probe's count
    (its ``flops`` event, of a step of ``samples_at_count`` samples), and the MFU where the
    chip's peak is known: the report's figures and the header's."""
    out: dict = {"flops_per_step": None, "tflops_per_s": None, "mfu": None}
    if count is None:
        out["flops_why"] = "not counted (a run recorded before fastmon counted FLOPs, or shorter than the count's step)"
        return out
    if count.get("error"):
        out["flops_why"] = f"not counted at step {count['from_step']}: {count['error']}"
        return out
    steps = count.get("steps") or 1
    flops = count["flops"] / steps  # a GAN's two kinds of step, in the mean
    per_sample = count["flops"] / samples_at_count if samples_at_count else None
    # per sample where both are known: a batch changed after the count is followed
    rate = per_sample * samples_per_s if per_sample and samples_per_s else flops * steps_per_s
    dtype = max(count["by_dtype"], key=count["by_dtype"].get) if count["by_dtype"] else None
    out.update(flops_per_step=round(flops), flops_per_sample=round(per_sample) if per_sample else None,
               counted_at_step=count["from_step"], counted_steps=steps, dtype=dtype,
               tflops_per_s=float(f"{rate / 1e12:.4g}"),
               # modules whose heavy operators torch has no formula for: the count is a floor
               uncounted=count.get("uncounted") or [])
    environment = facts.get("environment") or {}
    on_gpu = environment.get("accelerator") == "cuda"
    name = ((environment.get("devices") or [{}])[0]).get("name") if on_gpu else environment.get("cpu")
    matmul = math_dtype(dtype or "", (facts.get("settings") or {}).get("float32_matmul_precision")) if on_gpu \
        else dtype
    reached = measured_tflops(name, matmul)
    if reached:
        out.update(of_measured=float(f"{rate / 1e12 / reached:.4g}"), measured_tflops=reached)
    if not on_gpu:
        out["mfu_why"] = "a CPU has no datasheet peak to divide by"
        return out
    peak = peak_tflops(name, matmul)
    if peak is None:
        out["mfu_why"] = f"no datasheet peak for {name or 'this GPU'} in {matmul}"
        return out
    out.update(mfu=float(f"{rate / 1e12 / peak[1]:.4g}"), peak_tflops=peak[1], peak_of=f"{peak[0]} {matmul} dense")
    return out


MEANS = ("util", "power_w", "sm_active", "sm_occupancy", "tensor_active")


def gpu_figures(samples: list[list[dict]]) -> list[dict]:
    """Each GPU over the run from NVML's samples: mean utilization, power and (where the
    GPU has GPM) SM activity, peak memory (None where NVML gave nothing); ``gpm``: whether
    it has GPM (None: a record from before fastmon asked)."""
    devices: dict[int, dict] = {}
    for sample in samples:
        for d in sample:
            entry = devices.setdefault(d["index"], {"index": d["index"], "name": d.get("name"), "mem_used": [],
                                                    "mem_total": d.get("mem_total"), "gpm": d.get("gpm"),
                                                    **{key: [] for key in MEANS}})
            for key in ("mem_used", *MEANS):
                if d.get(key) is not None:
                    entry[key].append(d[key])
    return [{"index": entry["index"], "name": entry["name"],
             **{f"{key}_mean": round(sum(entry[key]) / len(entry[key]), 1) if entry[key] else None for key in MEANS},
             "mem_used_peak": max(entry["mem_used"], default=None), "mem_total": entry["mem_total"],
             "gpm": entry["gpm"]}
            for entry in devices.values()]


def _device(record: RunRecord) -> dict | None:
    rows = record.device_steps()
    if not rows:
        return None
    cols = ("device_step", "device_forward", "device_backward", "device_optimizer", "device_idle_before_forward")
    out = {"steps": len(rows)}
    for i, name in enumerate(cols, start=2):
        values = sorted(r[i] for r in rows if r[i] is not None)
        if values:
            out[f"{name}_ms_median"] = round(values[len(values) // 2] * 1e3, 4)
    return out


def _advice_out(a: dict) -> dict:
    result = a.get("result") or {}
    return {"id": a["id"], "kind": a.get("kind", PROBLEM), "title": a["title"], "evidence": a["evidence"],
            "est_gain": a.get("est_gain"), "location": a.get("location"), "action": a["action"], "fix": a.get("fix"),
            "status": a.get("status"), "confidence": a.get("confidence"),
            "measured": dict({k: result.get(k) for k in ("params", "speedup", "speedup_interval", "verdict", "kept",
                                                          "state", "error")}, running_at_end=running_at_end(result))
            if result else None}


def _applied_out(a: dict) -> dict:
    return {"id": a["id"], "step": a["step"], "params": a.get("params"), "tried": a.get("tried", []),
            "method": a.get("method"), "before": a.get("before"), "after": a.get("after"),
            "holds_from": a.get("holds_from"), "pairs": a.get("pairs"), "extensions": a.get("extensions"),
            "before_samples_per_s": a.get("before_samples_per_s"), "after_samples_per_s": a.get("after_samples_per_s"),
            "speedup": a.get("speedup"), "speedup_interval": a.get("speedup_interval"), "verdict": a.get("verdict"),
            "predicted": a.get("predicted"), "kept": bool(a.get("kept")), "state": a.get("state"),
            "error": a.get("error"), "running_at_end": running_at_end(a)}
