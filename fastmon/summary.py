"""A run's summary: what ``fastmon report`` prints and what the headless mode shows at
the end. Built from the run record alone, so a replay shows the same numbers."""

from __future__ import annotations

from fastmon.advisor.window import Window
from fastmon.phases import PHASES, STEP_FIELDS
from fastmon.records import RunRecord

STRAGGLER_MARGIN = 0.05  # a rank this much slower than the median rank is the straggler

_I = {name: i for i, name in enumerate(STEP_FIELDS)}


def window_summary(window: Window) -> dict:
    return {
        "steps": window.steps,
        "samples": window.samples,
        "duration_s": round(window.wall, 4),
        "steps_per_s": round(window.steps_per_s, 3),
        "samples_per_s": round(window.samples_per_s, 3),
        "phases": {p: round(s, 5) for p, s in window.shares.items()},
        "phase_ms": {p: {"median": round(window.phase_median[p] * 1e3, 4), "p90": round(window.phase_p90[p] * 1e3, 4)}
                     for p in PHASES},
        "step_ms": {"median": round(window.step_median * 1e3, 4), "p90": round(window.step_p90 * 1e3, 4)},
    }


def own_work_ms(rank: dict) -> float:
    """A rank's median step without the phases where it waits for the others: DDP ranks
    wait for the slowest in backward's gradient all-reduce (and in syncs), so their step
    times even out; the straggler is the rank with the most work of its own."""
    phase_ms = rank["phase_ms"]
    return rank["step_ms"]["median"] - phase_ms["backward"]["median"] - phase_ms["sync"]["median"]


def straggler(ranks: list[dict]) -> int | None:
    """The rank slower than the median rank by more than the margin, or None."""
    if len(ranks) < 2:
        return None
    ordered = sorted(ranks, key=own_work_ms)
    middle = own_work_ms(ordered[(len(ordered) - 1) // 2])
    slowest = ordered[-1]
    return slowest["rank"] if middle > 0 and own_work_ms(slowest) > middle * (1 + STRAGGLER_MARGIN) else None


def summarize(run_dir) -> dict:
    record = RunRecord(run_dir)
    try:
        meta = record.meta()
        all_rows = record.steps()
        ranks = sorted({r[_I["rank"]] for r in all_rows})
        primary = [r for r in all_rows if r[_I["rank"]] == (ranks[0] if ranks else 0)]
        summary = {"run": str(run_dir), "script": meta.get("script"), "exit_code": meta.get("exit_code"),
                   **window_summary(Window.from_rows(primary))}
        summary["ranks"] = []
        if len(ranks) > 1:
            for rank in ranks:
                rows = [r for r in all_rows if r[_I["rank"]] == rank]
                summary["ranks"].append({"rank": rank, **window_summary(Window.from_rows(rows))})
        summary["straggler"] = straggler(summary["ranks"])
        summary["memory"] = _memory(primary, record)
        summary["gpu"] = _gpu(record, meta)
        summary["device"] = _device(record)
        summary["dropped"] = meta.get("dropped", 0)
        summary["advice"] = [_advice_out(a) for a in record.advice()]
        summary["applied"] = [_applied_out(a) for a in record.applied()]
        summary["permanent_changes"] = permanent_changes(summary["applied"], record.facts())
        summary["probe_faults"] = [e for e in record.events() if e["kind"] == "probe_fault"]
        summary["wall_s"] = round((meta.get("ended") or 0) - (meta.get("started") or 0), 3) if meta.get("ended") else None
        return summary
    finally:
        record.close()


def _memory(rows, record: RunRecord) -> dict:
    out = {"torch_peak_allocated": max((r[_I["mem_peak"]] or 0 for r in rows), default=0),
           "torch_peak_reserved": max((r[_I["mem_reserved"]] or 0 for r in rows), default=0)}
    rss = [sum(p["rss"] for p in s.get("processes", []) if p.get("role") == "trainer")
           for _, _, s in record.samples("host")]
    workers = [sum(p["rss"] for p in s.get("processes", []) if p.get("role") == "worker")
               for _, _, s in record.samples("host")]
    out["trainer_rss_peak"] = max(rss, default=0)
    out["workers_rss_peak"] = max(workers, default=0)
    return out


def _gpu(record: RunRecord, meta: dict) -> dict:
    samples = record.samples("gpu")
    if not samples:
        return {"available": False, "note": meta.get("gpu_note") or "no GPU samples"}
    devices: dict[int, dict] = {}
    for _, _, sample in samples:
        for d in sample:
            entry = devices.setdefault(d["index"], {"index": d["index"], "name": d.get("name"), "util": [],
                                                    "mem_used": [], "power_w": [], "mem_total": d.get("mem_total")})
            for key in ("util", "mem_used", "power_w"):
                if d.get(key) is not None:
                    entry[key].append(d[key])
    out = []
    for entry in devices.values():
        out.append({"index": entry["index"], "name": entry["name"],
                    "util_mean": round(sum(entry["util"]) / len(entry["util"]), 1) if entry["util"] else None,
                    "mem_used_peak": max(entry["mem_used"], default=None), "mem_total": entry["mem_total"],
                    "power_w_mean": round(sum(entry["power_w"]) / len(entry["power_w"]), 1) if entry["power_w"] else None})
    return {"available": True, "devices": out}


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
    return {"id": a["id"], "title": a["title"], "evidence": a["evidence"], "est_gain": a.get("est_gain"),
            "location": a.get("location"), "action": a["action"], "fix": a.get("fix"),
            "status": a.get("status"), "confidence": a.get("confidence")}


def _applied_out(a: dict) -> dict:
    return {"id": a["id"], "step": a["step"], "params": a.get("params"), "tried": a.get("tried", []),
            "before_samples_per_s": a.get("before_samples_per_s"), "after_samples_per_s": a.get("after_samples_per_s"),
            "speedup": a.get("speedup"), "kept": bool(a.get("kept")), "state": a.get("state"), "error": a.get("error")}


def permanent_changes(applied: list[dict], facts: dict) -> list[str]:
    """The code that makes each kept hot-apply permanent, so the next run starts fast."""
    lines = []
    loader_params: dict = {}
    for a in applied:
        if not a["kept"]:
            continue
        if a["id"].startswith("dataloader."):
            loader_params.update(a.get("params") or {})
        elif a["id"] == "cudnn.benchmark":
            lines.append("torch.backends.cudnn.benchmark = True")
        elif a["id"] == "autograd.detect_anomaly":
            lines.append("remove torch.autograd.set_detect_anomaly(True) / detect_anomaly()")
        elif a["id"] == "zero_grad.set_to_none":
            lines.append("optimizer.zero_grad()  # set_to_none=True")
        elif a["id"] == "tf32":
            lines.append('torch.set_float32_matmul_precision("high")')
        elif a["id"] == "amp":
            lines.append(f'with torch.autocast("cuda", dtype=torch.{(a.get("params") or {}).get("dtype", "bfloat16")}):')
    if loader_params:
        loader = next((v for k, v in facts.items() if k.startswith("loader.")), {}) or {}
        args = ", ".join(f"{k}={v}" for k, v in loader_params.items())
        where = f"  # {loader['location']}" if loader.get("location") else ""
        lines.insert(0, f"DataLoader(..., {args}){where}")
    return lines
