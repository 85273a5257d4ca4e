"""``fastmon compare``: two recorded runs side by side, whether the second is faster,
slower or no different beyond noise (by the rule that judges a live change,
``fastmon.common.verdicts``), what explains it, and the CI guard's exit code."""

from __future__ import annotations

from pathlib import Path

from fastmon.advisor.window import segments
from fastmon.common.phases import PHASES
from fastmon.records import RunRecord
from fastmon.report import mib
from fastmon.step_table import StepTable
from fastmon.summary import slowed_steps, steady_left_out, summarize
from fastmon.common.verdicts import (BETWEEN_RUNS_NOISE, NO_CHANGE, NOISE, RUNS_THAT_MEASURE_NOISE, SLOWER, change_text,
                                     is_recommended, judge, params_text, rate_error, rates_text, result_text,
                                     speed_interval)

BLOCKS = 10  # a run's steady steps in this many blocks: their spread is its noise
BUSIER_BY = 0.3  # cores more that other processes held in B than in A: the machines differed
SHARES_MOVED = 0.25  # ... and no phase's share of the step moved this much: the machine's doing, not the code's
SIBLINGS_KEPT = 6  # the latest runs of A's work whose spread is the noise between runs
WORKLOAD = ("script", "arguments", "batch", "world_size")
ENVIRONMENT = ("torch", "python", "fastmon", "gpus", "gpu_driver", "cpus", "host")


def phase_noise(table: StepTable, keep: list[int]) -> dict[str, dict]:
    """Each phase's mean ms a step over the steps ``keep`` (positions), each timed step
    standing for the untimed ones after it as in the report's shares (``Window``: a run
    timed at every step at first, sampled later, is not weighed where its timed steps
    crowd), and the standard error of that mean from the spread of BLOCKS runs of them."""
    walls = [table.walls[p] for p in keep]
    timed = [i for i, p in enumerate(keep) if p in table.timed and table.timed[p].wall > 0]
    stands_for = segments(walls, timed)  # position in keep -> (the time, the steps) it stands for
    out = {}
    for phase in PHASES:
        pairs = [((getattr(table.timed[keep[i]], phase) or 0.0) / table.timed[keep[i]].wall
                  * stands_for[i][0] / stands_for[i][1] * 1e3, stands_for[i][1]) for i in timed]
        if not pairs:
            out[phase] = {"ms": 0.0, "error_ms": 0.0}
            continue
        size = max(1, len(pairs) // BLOCKS)
        means = [weighted_mean(pairs[i:i + size]) for i in range(0, len(pairs) - size + 1, size)]
        mean = weighted_mean(pairs)
        spread = (sum((m - mean) ** 2 for m in means) / (len(means) - 1)) ** 0.5 if len(means) > 1 else mean
        out[phase] = {"ms": round(mean, 4), "error_ms": round(spread / len(means) ** 0.5, 4)}
    return out


def weighted_mean(pairs: list[tuple[float, int]]) -> float:
    return sum(value * weight for value, weight in pairs) / sum(weight for _, weight in pairs)


def steady_speeds(record: RunRecord, since: int | None) -> dict[int, dict]:
    """Each rank's steady samples/s, its relative error and its usual batch, without the
    start-up steps the report leaves out, and from step ``since`` on where it is given;
    and each phase's ms a step with its error."""
    slowed = slowed_steps(record.events())
    out = {}
    for rank in record.ranks():
        table = StepTable.read(record, rank)
        left_out = {table.position(s) for s in steady_left_out(table, slowed.get(rank, {}))}
        if len(left_out) >= len(table):  # a run of start-up alone: all of it
            left_out = set()
        first = table.position(since) if since is not None else 0
        keep = [p for p in range(first, len(table)) if p not in left_out]
        walls = [table.walls[p] for p in keep]
        samples = [table.samples[p] for p in keep] if table.samples.positions else [table.samples.usual] * len(keep)
        wall = sum(walls)
        samples_per_s = sum(samples) / wall if wall > 0 else 0.0
        counted = [table.timed[p] for p in keep if p in table.timed and table.timed[p].tokens is not None]
        by_samples = sum(r.samples or 0 for r in counted)
        out[rank] = {"steps": len(walls), "batch": table.samples.usual, "samples_per_s": samples_per_s,
                     # at the timed steps' tokens per sample: the same error as the samples'
                     "tokens_per_s": samples_per_s * sum(r.tokens for r in counted) / by_samples if by_samples
                     else None,
                     "error": rate_error(walls, samples, BLOCKS), "phase_noise": phase_noise(table, keep)}
    return out


def workload(meta: dict, speeds: dict[int, dict]) -> dict:
    """What a run trained: a change here makes two runs different work, not faster or
    slower work. The script is named without its folder: a baseline recorded in another
    checkout is the same script."""
    target = meta.get("target") or []
    if target[:1] == ["-m"]:
        script, arguments = " ".join(target[:2]), target[2:]
    else:
        script, arguments = (Path(target[0]).name if target else ""), target[1:]
    first = speeds[min(speeds)] if speeds else {}
    return {"script": script, "arguments": " ".join(arguments), "batch": first.get("batch"),
            "world_size": len(speeds)}


def machine(record: RunRecord, cores: int | None) -> dict:
    """The machine a run ran on, as its host samples saw it while its steps ran: the cores
    other processes held (every core's use less the training's processes'; fastmon's own
    monitor among the others, in either run alike)."""
    span = record.db.execute("SELECT MIN(t_end - wall), MAX(t_end) FROM steps WHERE rank=?",
                             (min(record.ranks(), default=0),)).fetchone()
    others = []
    for t, _, sample in record.samples("host"):
        if span[0] is None or not span[0] <= t <= span[1] or not sample.get("cpu_per_core"):
            continue
        training = sum(p.get("cpu") or 0 for p in sample.get("processes") or ()) / 100
        others.append(max(sum(sample["cpu_per_core"]) / 100 - training, 0.0))
    return {"cores": cores, "others_cores": round(sum(others) / len(others), 2) if others else None,
            "samples": len(others)}


def busier_machine(a: dict, b: dict) -> dict | None:
    """Where one run's machine was busier than the other's: how much, and whether B's step
    moved as a whole (each phase's share within ``SHARES_MOVED`` of A's) or in one phase.
    A core another job takes slows every phase of the training alike, and far more than
    its share of the cores (torch's threads wait for the slowest: ×5.2 measured with one of
    2 cores taken), so the whole step's time cannot tell the machine from the code; where
    the phases' mix moved, the code did. None where the machines were alike, or unknown."""
    cores, busy_a, busy_b = a["machine"]["cores"], a["machine"]["others_cores"], b["machine"]["others_cores"]
    if not cores or busy_a is None or busy_b is None or abs(busy_b - busy_a) < BUSIER_BY:
        return None
    moved = max((abs(b["phases"][p] - a["phases"][p]) for p in PHASES), default=0.0)
    return {"busier": "B" if busy_b > busy_a else "A", "others_a": busy_a, "others_b": busy_b, "cores": cores,
            "shares_moved": round(moved, 4), "within": moved < SHARES_MOVED}


def environment(meta: dict, facts: dict) -> dict:
    env = facts.get("environment") or {}
    gpus = [d.get("name") for d in env.get("devices") or []]
    return {"torch": env.get("torch"), "python": meta.get("python"), "fastmon": meta.get("fastmon"),
            "gpus": ", ".join(gpus) if gpus else "none", "gpu_driver": meta.get("gpu_driver"),
            "cpus": env.get("cpu_count"), "host": meta.get("host")}


def side(run_dir) -> dict:
    """One run's figures, as compared."""
    summary = summarize(run_dir)
    # A run that fastmon changed live is compared as it ran after the change, as the next
    # run will, once the change is made permanent.
    figures = summary["changes"]["after"] if summary["changes"] else summary
    since = figures.get("from_step")
    record = RunRecord(run_dir)
    try:
        meta, facts, speeds = record.meta(), record.facts(), steady_speeds(record, since)
        host = machine(record, (facts.get("environment") or {}).get("cpu_count"))
    finally:
        record.close()
    mean_ms = 1e3 / figures["steps_per_s"] if figures["steps_per_s"] else 0.0
    compute = summary.get("compute") or {}
    # Busy during the steady steps: the mean over the process's life counts its start-up too.
    devices = summary["gpu"].get("devices") or []
    utils = [d["util_in_steps"] for d in devices if d.get("util_in_steps") is not None]
    sms = [d["sm_active_in_steps"] for d in devices if d.get("sm_active_in_steps") is not None]
    return {
        "run": str(run_dir), "workload": workload(meta, speeds), "environment": environment(meta, facts),
        "machine": host,
        "steps": summary["steps"], "steady_steps": speeds[min(speeds)]["steps"] if speeds else 0, "since_step": since,
        "samples_per_s": figures["samples_per_s"], "tokens_per_s": figures.get("tokens_per_s"),
        "step_ms_mean": round(mean_ms, 4),
        "step_ms": figures["step_ms"],
        "phase_ms": {p: round(figures["phases"][p] * mean_ms, 4) for p in PHASES},
        "phases": figures["phases"],
        "trainer_rss_peak": summary["memory"]["trainer_rss_peak"],
        "torch_peak_allocated": summary["memory"]["torch_peak_allocated"],
        "gpu_util_in_steps": round(sum(utils) / len(utils), 1) if utils else None,
        "sm_active_in_steps": round(sum(sms) / len(sms), 1) if sms else None,  # where the GPUs have GPM
        "mfu": compute.get("mfu"), "tflops_per_s": compute.get("tflops_per_s"), "bound": compute.get("bound"),
        "advice": [a["id"] for a in summary["advice"] if is_recommended(a)],
        "applied": summary["applied"],
        "ranks": speeds, "exit_code": summary["exit_code"],
    }


def differences(a: dict, b: dict, keys) -> list[dict]:
    """The keys whose values differ where both runs know them."""
    return [{"what": k, "a": a.get(k), "b": b.get(k)} for k in keys
            if a.get(k) is not None and b.get(k) is not None and a.get(k) != b.get(k)]


def between_runs_noise(run_a, run_b) -> dict:
    """How far runs of A's work (the same script text, arguments and host; exit 0, nothing
    changed live) have differed in samples/s in A's runs folder, B aside: of the latest
    SIBLINGS_KEPT, A among them. Where RUNS_THAT_MEASURE_NOISE or more, their spread (at
    least NOISE) is the least interval between two runs; else BETWEEN_RUNS_NOISE."""
    a, b = Path(run_a).resolve(), Path(run_b).resolve()
    key = work_key(a)
    siblings = [run for run in sorted(a.parent.iterdir()) if run != b and (run / "run.sqlite").is_file()
                and (run == a or work_key(run) == key)] if key else [a]
    rates = []
    for run in reversed(siblings):  # the latest first: folders are named by their start
        try:
            summary = summarize(run)
        except Exception:
            continue  # (a damaged sibling measures nothing)
        if summary["exit_code"] == 0 and not summary["applied"] and summary["samples_per_s"]:
            rates.append(summary["samples_per_s"])
        if len(rates) == SIBLINGS_KEPT:
            break
    if len(rates) < RUNS_THAT_MEASURE_NOISE:
        return {"floor": BETWEEN_RUNS_NOISE, "runs": len(rates), "measured": False}
    return {"floor": round(max(NOISE, max(rates) / min(rates) - 1), 4), "runs": len(rates), "measured": True}


def work_key(run) -> tuple | None:
    """What makes two runs the same work, for ``between_runs_noise``; None where unknown."""
    try:
        record = RunRecord(run)
        try:
            meta = record.meta()
        finally:
            record.close()
    except Exception:
        return None  # a damaged or foreign folder is no sibling
    digest = meta.get("script_digest")
    return (digest, tuple(meta.get("target") or ()), meta.get("host")) if digest else None


def judged(a: dict, b: dict, floor: float = BETWEEN_RUNS_NOISE) -> dict:
    """B's speed against A's: the ratio, its interval (never narrower than ``floor`` either
    way) and the verdict, under the names a change applied live has (``Experiment.result``)."""
    rates = {"before_samples_per_s": round(a["samples_per_s"], 3), "after_samples_per_s": round(b["samples_per_s"], 3)}
    unit = "samples_per_s"
    if a.get("tokens_per_s") and b.get("tokens_per_s"):  # a language model's speed is its tokens'
        unit = "tokens_per_s"
        rates.update(before_tokens_per_s=round(a[unit], 3), after_tokens_per_s=round(b[unit], 3))
    if not a[unit] or not b[unit]:
        return {**rates, "speedup": None, "speedup_interval": None, "verdict": judge(None)}
    interval = speed_interval(b[unit] / a[unit], (a["error"], b["error"]), floor)
    return {**rates, "speedup": round(interval[0], 4),
            "speedup_interval": [round(interval[1], 4), round(interval[2], 4)], "verdict": judge(interval)}


def phase_changes(a: dict, b: dict, floor: float = BETWEEN_RUNS_NOISE) -> list[dict]:
    """Each phase whose ms a step moved beyond its own noise (twice the two runs' errors
    of its mean, and ``floor`` of A's figure: two processes differ that much with nothing
    changed), with how far, in A's step time and in its own noise: most first."""
    noise_a = (a["ranks"].get(min(a["ranks"])) or {}).get("phase_noise") if a["ranks"] else None
    noise_b = (b["ranks"].get(min(b["ranks"])) or {}).get("phase_noise") if b["ranks"] else None
    if not noise_a or not noise_b:
        return []
    out = []
    for phase in PHASES:
        ms_a, ms_b = noise_a[phase]["ms"], noise_b[phase]["ms"]
        error = (noise_a[phase]["error_ms"] ** 2 + noise_b[phase]["error_ms"] ** 2) ** 0.5
        moved = ms_b - ms_a
        beyond = max(2 * error, floor * ms_a)
        if abs(moved) > beyond and moved:
            out.append({"phase": phase, "ms_per_step": round(moved, 4), "a_ms": ms_a, "b_ms": ms_b,
                        "of_a_step": round(moved / a["step_ms_mean"], 4) if a["step_ms_mean"] else None,
                        "noise_ms": round(beyond, 4), "times_noise": round(abs(moved) / beyond, 2)})
    return sorted(out, key=lambda c: -c["times_noise"])


def explained_by(a: dict, b: dict, moved_phases: list[dict]) -> dict | None:
    """What explains the step's change: of the phases that moved beyond their noise in the
    direction the step time moved, the one furthest beyond it; else the phase whose time
    moved most that way."""
    change = b["step_ms_mean"] - a["step_ms_mean"]
    if not change:
        return None
    beyond = [c for c in moved_phases if c["ms_per_step"] * change > 0]
    if beyond:
        phase, moved = beyond[0]["phase"], beyond[0]["ms_per_step"]
    else:
        phase = max(PHASES, key=lambda p: (b["phase_ms"][p] - a["phase_ms"][p]) * (1 if change > 0 else -1))
        moved = b["phase_ms"][phase] - a["phase_ms"][phase]
        if moved * change <= 0:
            return None
    return explanation(a, b, phase, moved, round(moved / change, 3), bool(beyond))


def explanation(a: dict, b: dict, phase: str, moved: float, share_of_change: float | None, beyond: bool) -> dict:
    return {"phase": phase, "ms_per_step": round(moved, 4), "share_of_change": share_of_change,
            "a_share": a["phases"][phase], "b_share": b["phases"][phase], "beyond_noise": beyond}


def what_explains(a: dict, b: dict, moved: list[dict], verdict: str) -> dict | None:
    """The step's change explained; where the whole step cannot tell, the phase that grew
    furthest beyond its noise (on a busy machine B's mean step can come out shorter with
    its data wait 5x longer: "backward", which shrank within its noise, was named)."""
    if verdict != NO_CHANGE:
        return explained_by(a, b, moved)
    grew = [c for c in moved if c["ms_per_step"] > 0]
    return explanation(a, b, grew[0]["phase"], grew[0]["ms_per_step"], None, True) if grew else None


def compare(run_a, run_b) -> dict:
    a, b = side(run_a), side(run_b)
    noise = between_runs_noise(run_a, run_b)
    speeds_a, speeds_b = a["ranks"], b["ranks"]
    nothing = {"samples_per_s": 0}
    primary = judged(speeds_a[min(speeds_a)] if speeds_a else nothing, speeds_b[min(speeds_b)] if speeds_b else nothing,
                     noise["floor"])
    shared = sorted(set(speeds_a) & set(speeds_b)) if len(speeds_a) > 1 else []
    ranks = [{"rank": r, **judged(speeds_a[r], speeds_b[r], noise["floor"])} for r in shared]
    moved = phase_changes(a, b, noise["floor"])
    ratio = round(1 / primary["speedup"], 4) if primary["speedup"] else None
    return {"a": a, "b": b, **primary,
            "step_time_ratio": ratio,
            "machine_differs": busier_machine(a, b),
            "explained_by": what_explains(a, b, moved, primary["verdict"]),
            "phases_moved": moved,
            "workload_differs": differences(a["workload"], b["workload"], WORKLOAD),
            "environment_differs": differences(a["environment"], b["environment"], ENVIRONMENT),
            "ranks": ranks, "between_runs_noise": noise}


def slowdown_pct(result: dict) -> float | None:
    """How much longer B's step takes than A's, in percent."""
    ratio = result.get("step_time_ratio")
    return None if ratio is None else (ratio - 1) * 100


def phase_regressions(result: dict, pct: float) -> list[dict]:
    """The phases that grew beyond their noise by more than ``pct`` percent of A's step."""
    return [c for c in result.get("phases_moved") or () if c["ms_per_step"] > 0
            and c["of_a_step"] is not None and c["of_a_step"] * 100 > pct]


def guard_failed(result: dict, pct: float) -> bool:
    """Slower beyond noise (the interval lies below 1) and by more than ``pct`` percent,
    or a phase that grew beyond its own noise by more than ``pct`` percent of A's step:
    a regression the whole step's noise hides is still one."""
    slower = slowdown_pct(result)
    if result["verdict"] == SLOWER and slower is not None and slower > pct:
        return True
    return bool(phase_regressions(result, pct))


def difference_text(d: dict) -> str:
    """``arguments '--compile=False' vs '--compile=True'``: of a command line, the words that differ."""
    a, b = d["a"], d["b"]
    if d["what"] == "arguments":
        words_a, words_b = a.split(), b.split()
        a = " ".join(w for w in words_a if w not in words_b) or "(none)"
        b = " ".join(w for w in words_b if w not in words_a) or "(none)"
    return f"{d['what'].replace('_', ' ')} {a!r} vs {b!r}"


def machine_text(m: dict) -> str:
    busier, quieter = (m["others_b"], m["others_a"]) if m["busier"] == "B" else (m["others_a"], m["others_b"])
    return f"{m['busier']} ran on a busier machine (other processes held {busier:.1f} of {m['cores']} cores vs {quieter:.1f})"


def not_judged_for_the_machine(result: dict) -> bool:
    """B's speed differs from A's, on machines that differed, with the step moved as a whole."""
    m = result.get("machine_differs")
    return bool(m and m["within"] and result["verdict"] != NO_CHANGE and not result["workload_differs"])


def verdict_line(result: dict) -> str:
    if result["workload_differs"]:
        return "not judged: the runs trained different work (" + "; ".join(
            map(difference_text, result["workload_differs"])) + ")"
    if result["speedup"] is None:
        return "not judged: a run has no steady steps"
    m = result.get("machine_differs")
    if not_judged_for_the_machine(result):
        return (f"not judged as a code change: {machine_text(m)}: step time ×{result['step_time_ratio']:.2f} with "
                f"every phase's share within {m['shares_moved']:.0%} of A's, as a busier machine slows them all "
                f"({rates_text(result)})")
    line = (f"{rates_text(result)} — {result['verdict']}: {change_text(result)}, "
            f"step time ×{result['step_time_ratio']:.2f}")
    if m:  # beyond what the load explains: the code's, said beside the machine
        line += f" — {machine_text(m)}, but the phases' mix moved ({m['shares_moved']:.0%}): the code's doing"
    why = result.get("explained_by")
    if why:
        line += (f" — {why['phase']} {why['ms_per_step']:+.2f} ms a step ({why['a_share']:.0%} → "
                 f"{why['b_share']:.0%} of the step" + (", beyond its noise)" if why.get("beyond_noise") else ")"))
    return line


def phase_lines(result: dict) -> list[str]:
    """The phases that moved beyond their own noise."""
    return [f"  {c['phase']} {c['ms_per_step']:+.2f} ms a step ({c['a_ms']:.2f} → {c['b_ms']:.2f} ms; "
            f"{abs(c['of_a_step'] or 0):.0%} of A's step, {c['times_noise']:.1f}x its noise of "
            f"±{c['noise_ms']:.2f} ms)" for c in result.get("phases_moved") or ()]


def format_text(result: dict) -> str:
    a, b = result["a"], result["b"]
    work = a["workload"]
    lines = [f"fastmon compare — {work['script']} {work['arguments']}".rstrip(),
             f"  A {a['run']}", f"  B {b['run']}", "",
             f"  {'':<18} {'A':>14} {'B':>14}"]

    def row(label: str, x: str, y: str) -> None:
        lines.append(f"  {label:<18} {x:>14} {y:>14}" if len(x) < 14 else f"  {label:<18} {x} | {y}")

    row("steps compared", f"{a['steady_steps']:,}", f"{b['steady_steps']:,}")
    row("samples/s", f"{a['samples_per_s']:,.1f}", f"{b['samples_per_s']:,.1f}")
    if a.get("tokens_per_s") is not None or b.get("tokens_per_s") is not None:
        row("tokens/s", *(f"{s['tokens_per_s']:,.0f}" if s.get("tokens_per_s") is not None else "n/a" for s in (a, b)))
    row("step ms mean", f"{a['step_ms_mean']:.2f}", f"{b['step_ms_mean']:.2f}")
    row("step ms median", f"{a['step_ms']['median']:.2f}", f"{b['step_ms']['median']:.2f}")
    row("step ms p90", f"{a['step_ms']['p90']:.2f}", f"{b['step_ms']['p90']:.2f}")
    for phase in PHASES:
        if a["phases"][phase] >= 0.005 or b["phases"][phase] >= 0.005:
            row(f"{phase} ms", f"{a['phase_ms'][phase]:.2f} {a['phases'][phase]:>4.0%}",
                f"{b['phase_ms'][phase]:.2f} {b['phases'][phase]:>4.0%}")
    row("trainer RSS peak", mib(a["trainer_rss_peak"]), mib(b["trainer_rss_peak"]))
    if a["torch_peak_allocated"] or b["torch_peak_allocated"]:
        row("CUDA allocated peak", mib(a["torch_peak_allocated"]), mib(b["torch_peak_allocated"]))
    for key, label in (("gpu_util_in_steps", "GPU busy in steps"), ("sm_active_in_steps", "SM active in steps")):
        if a.get(key) is not None or b.get(key) is not None:
            row(label, *(f"{s[key]:.0f}%" if s.get(key) is not None else "n/a" for s in (a, b)))
    if a["mfu"] is not None or b["mfu"] is not None:
        row("MFU", *(f"{s['mfu']:.1%}" if s["mfu"] is not None else "n/a" for s in (a, b)))
    if a["bound"] or b["bound"]:
        row("bound", a["bound"] or "-", b["bound"] or "-")
    lines += ["", f"  verdict: {verdict_line(result)}"]
    noise = result["between_runs_noise"]
    lines.append(f"  noise between runs: ±{noise['floor']:.0%} " + (
        f"(measured: {noise['runs']} runs of this script here, B aside, differ by that much)" if noise["measured"]
        else f"(assumed: {noise['runs']} of the {RUNS_THAT_MEASURE_NOISE} runs of this script that would measure it "
             "are here: the same work, exit 0, nothing changed live)"))
    moved = phase_lines(result) if not result["workload_differs"] else []  # of different work: not judged
    if moved:
        lines += ["  phases that moved beyond their noise:", *("  " + line for line in moved)]
    for r in result["ranks"]:
        lines.append(f"    rank {r['rank']}: {rates_text(r)} — {r['verdict']}: {change_text(r)}")
    for d in result["environment_differs"]:
        lines.append(f"  environment: {d['what']} {d['a']} → {d['b']}")
    for name, s in (("A", a), ("B", b)):
        if s["advice"]:
            lines.append(f"  advice for {name}: {', '.join(s['advice'])}")
        for change in s["applied"]:
            lines.append(f"  applied live in {name}: {change['id']} {params_text(change.get('params') or {})} "
                         f"tried from step {change['step']}: {rates_text(change)} — {result_text(change)}")
        if s["since_step"] is not None:
            lines.append(f"  {name} is compared from step {s['since_step']} on, as it ran after fastmon's last change")
    return "\n".join(lines)
