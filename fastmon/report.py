"""``fastmon report``: a run summary as a table for people or one JSON object."""

from __future__ import annotations

import signal
import time

from fastmon.advisor.types import PROBLEM, SUGGESTION, gain_text
from fastmon.common.phases import PHASE_LABELS, PHASES
from fastmon.common.verdicts import (ExperimentState, is_recommended, measured_text, params_text, rates_text,
                                     result_text, search_text)
from fastmon.pipeline import pipeline_lines


def mib(n) -> str:
    return f"{(n or 0) / 2**20:,.0f} MiB"


def gib(n) -> str:
    """A byte count in GiB, without the unit; n/a where it was not read."""
    return "n/a" if n is None else f"{n / 2**30:.1f}"


def clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def link_lines(link: dict | None) -> list[str]:
    """What the link between a multi-node job's monitors did (fastmon.job_link)."""
    if not link:
        return []
    if link.get("node"):
        to = link.get("to")
        state = ("node 0's monitor refused this node's proof of the job's secret" if link.get("refused") else
                 f"never reached node 0's monitor at {to}" if link.get("reached") is False else
                 f"streamed {link.get('rows_sent', 0):,} step rows to node 0's monitor at {to}")
        unsent = link.get("unsent_rows")
        return [f"  nodes: this is node {link['node']}; {state}"
                + (f"; {unsent:,} step rows not sent (node 0 unreachable too long)" if unsent else "")]
    nodes = []
    for node, info in sorted(link.get("nodes", {}).items(), key=lambda item: int(item[0])):
        ranks = ", ".join(map(str, info.get("ranks") or ())) or "none"
        end = (f"lost at {time.strftime('%H:%M:%S', time.localtime(info['lost']))}" if info.get("lost") else
               f"ended with exit code {info.get('exit_code')}" if info.get("ended") else "linked")
        nodes.append(f"node {node} (ranks {ranks}): {end}")
    lines = ["  nodes, gathered live on node 0: " + ("; ".join(nodes) if nodes else "no other node linked")]
    for key, what in (("refused", "connections to the job's link refused: {} (no proof of the job's secret); "
                                  "nothing they sent was recorded"),
                      ("rejected_rows", "step rows refused from linked nodes: {} (damaged, or for another node's rank)")):
        if link.get(key):
            lines.append("  " + what.format(link[key]))
    return lines


def node_lost_line(node: int, when: float, last_steps: dict) -> str:
    """A node whose monitor stopped reporting to node 0's (fastmon.job_link)."""
    last = ", ".join(f"rank {rank} at step {step}" for rank, step in sorted((int(r), s) for r, s in last_steps.items()))
    return (f"node {node} lost at {time.strftime('%H:%M:%S', time.localtime(when))}: its monitor stopped reporting"
            + (f" ({last})" if last else "") + "; that node's own record has what its monitor saw")


def profile_lines(capture: dict) -> list[str]:
    """One torch.profiler capture (the probe's ``profile`` event), for people."""
    steps = f"steps {capture['first']}-{capture['last']}" if capture["last"] > capture["first"] else \
        f"step {capture['first']}"
    lines = [f"torch.profiler, {steps}, rank {capture.get('rank', 0)}"]
    if capture.get("error"):
        return lines + [f"  not captured: {capture['error']}"]
    lines.append(f"  trace: {capture['file']} (ui.perfetto.dev or chrome://tracing)")
    for key, what in (("top_cpu", "self CPU"), ("top_device", "self CUDA")):
        if capture.get(key):
            lines.append(f"  top operators by {what} time: " + " · ".join(
                f"{op['name']} {op['share']:.0%} ({op['calls']} calls)" for op in capture[key][:5]))
    for found in capture.get("patterns") or []:
        lines.append(f"  torch's anti-pattern check: {found['message']} ({found['name']}, {found['count']}x at "
                     f"{found['where']})")
    return lines


def spawned_line(event: dict, script: str = "SCRIPT") -> str:
    """Training handed to processes fastmon does not follow, and what to run instead."""
    n = event.get("nprocs", 1)
    return (f"the training runs in {n} process{'es' if n != 1 else ''} started by torch.multiprocessing at "
            f"{event.get('location') or '?'}, which fastmon does not follow (it measures the processes it "
            f"starts): launch them with torchrun instead, `fastmon run --nproc-per-node {n} {script}`, each "
            f"process reading its rank from RANK / LOCAL_RANK / WORLD_SIZE")


def startup_lines(s: dict) -> list[str]:
    """The steps left out of rates and shares, and what dynamo reported."""
    lines = []
    startup = s.get("startup_steps") or []
    if startup:
        shown = ", ".join(f"step {u['step']}: {u['wall_s']:.2f} s ({u['why']})" for u in startup[:4])
        more = f" and {len(startup) - 4} more" if len(startup) > 4 else ""
        lines.append(f"  start-up, left out of the rates, shares and medians: {shown}{more}")
    compiled = s.get("compile")
    if compiled:
        seconds = compiled.get("compile_seconds")
        lines.append(f"  torch.compile: {compiled['graphs']} graph{'s' if compiled['graphs'] != 1 else ''}, "
                     f"{compiled['graph_breaks']} graph breaks, {compiled['recompiles']} recompilations"
                     + (f", {seconds:.1f} s compiling" if seconds is not None else ""))
        for reason in (compiled.get("graph_break_reasons") or [])[:3]:
            lines.append(f"    graph break: {reason}")
        for reason in (compiled.get("recompile_reasons") or [])[:3]:
            lines.append(f"    recompiled: {reason}")
    return lines


def ending(exit_code: int | None, attached: str | None = None) -> str:
    """How the run ended, in words where a number does not say it."""
    if attached in ("finished", "crashed"):
        return (("ended" if attached == "finished" else "crashed: a rank ended without saying goodbye (killed?)")
                + "; exit code not seen (fastmon.attach: fastmon did not start the process)")
    if exit_code is None:
        return "end unknown: the run is still going, or its monitor was killed"
    if exit_code > 128 and exit_code - 128 in signal.Signals._value2member_map_:
        return f"exit code {exit_code} (killed by {signal.Signals(exit_code - 128).name})"
    return f"exit code {exit_code}"


def known(value, unit: str, spec: str = "") -> str:
    """What NVML gave, or n/a (as nvitop says N/A): never None, never a 0 it did not read."""
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def gpu_run_line(d: dict) -> str:
    """One GPU over the run (``summary.gpus_over_run``): the report's line, and the ended
    dashboard's. Its utilization is the one during the steady run's steps (start-up and
    the exit's idle seconds left out), as the verdict and the advice read it; the mean
    over the process's life only where no sample fell in the steps. What NVML did not give
    reads n/a."""
    peak, total, power = d["mem_used_peak"], d["mem_total"], d["power_w_mean"]
    busy = (f"busy {d['util_in_steps']:.0f}% of the steps' time" if d.get("util_in_steps") is not None
            else f"util {known(d['util_mean'], '% mean over the run')}")
    return (f"GPU {d['index']} {d['name']}: {busy}{sm_activity(d)}, "
            f"memory peak {'n/a' if peak is None else mib(peak)} of {'n/a' if total is None else mib(total)}, "
            f"power {known(power, ' W mean')}")


def sm_activity(d: dict) -> str:
    """What the SMs did, where NVML's GPM reads it: ", SM active 41% (occupancy 22%, tensor
    pipes 30%)" over the steady run's steps, as the utilization beside it ("41% mean" over the
    run where no sample fell in the steps); n/a on a GPU without GPM; nothing for a record
    from before fastmon asked."""
    if d.get("gpm") is False:
        return ", SM active n/a (this GPU has no GPM)"
    steps = "_in_steps" if d.get("sm_active_in_steps") is not None else "_mean"  # the utilization's span
    if d.get("sm_active" + steps) is None:
        return ""
    return (f", SM active {d['sm_active' + steps]:.0f}%{' mean' if steps == '_mean' else ''} (occupancy "
            f"{known(d.get('sm_occupancy' + steps), '%', '.0f')}, tensor pipes "
            f"{known(d.get('tensor_active' + steps), '%', '.0f')})")


def si(value: float, unit: str) -> str:
    """1.36e8 FLOP -> "136.2 MFLOP"."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:,.1f} {prefix}{unit}"
    return f"{value:,.0f} {unit}"


def estimate_differs_text(c: dict) -> str:
    """Why the counted FLOPs a token and the 6N + attention estimate differ by more than 25%."""
    counted, estimate = c["flops_per_token_counted"], c["flops_per_token_estimate"]
    missed = ", ".join(u["module"] for u in c.get("uncounted") or ())
    return (f"the counted {si(counted, 'FLOP')} a token differs by {counted / estimate - 1:+.0%}: "
            + (f"the counter has no formula for {missed}" if missed else
               "the model's work is not all matrix products on its parameters and attention"))


def compute_lines(c: dict | None) -> list[str]:
    """The FLOPs, the rate and MFU, and which limit the run presses on."""
    if not c:
        return []
    if c.get("flops_per_step") is None:
        lines = [f"  compute: FLOPs {c.get('flops_why')}"]
    else:
        mfu = f"MFU {c['mfu']:.1%} of {c['peak_of']} ({c['peak_tflops']:,g} TFLOP/s)" if c.get("mfu") is not None \
            else f"MFU n/a ({c.get('mfu_why')})"
        reached = f"; {c['of_measured']:.0%} of the {si(c['measured_tflops'] * 1e12, 'FLOP/s')} this chip reaches " \
            "(fastmon doctor --calibrate)" if c.get("of_measured") is not None else \
            "; `fastmon doctor --calibrate` measures what this chip reaches"
        at_least = "at least " if c.get("uncounted") else ""
        counted = f"step {c['counted_at_step']}" if (c.get("counted_steps") or 1) == 1 else \
            f"steps {c['counted_at_step']}-{c['counted_at_step'] + c['counted_steps'] - 1}, one for each optimizer"
        if at_least and c.get("mfu") is not None:
            mfu = f"MFU at least {mfu.removeprefix('MFU ')}"
        lines = [f"  compute: {at_least}{si(c['flops_per_step'], 'FLOP')} a step (counted at {counted}, "
                 f"{c['dtype']}), {at_least}{si(c['tflops_per_s'] * 1e12, 'FLOP/s')} achieved; {mfu}{reached}"]
        if c.get("flops_per_token_estimate"):
            mfu_tokens = f", MFU {c['mfu_by_tokens']:.1%}" if c.get("mfu_by_tokens") is not None else ""
            lines.append(f"    by tokens (6N + attention, as nanoGPT's estimate_mfu): "
                         f"{si(c['flops_per_token_estimate'], 'FLOP')} a token, "
                         f"{si(c['tflops_per_s_by_tokens'] * 1e12, 'FLOP/s')}{mfu_tokens}"
                         + (f"; {estimate_differs_text(c)}" if c.get("estimate_differs") else ""))
        if c.get("uncounted"):
            lines.append("    not counted (torch has no FLOP formula for their operators): " + ", ".join(
                f"{u['module']} ({u['operator']}) {u['forward_share']:.0%} of the forward's operator time"
                for u in c["uncounted"]))
        if c.get("ranks"):
            lines.append("    per rank: " + ", ".join(
                f"rank {r['rank']} {si(r['tflops_per_s'] * 1e12, 'FLOP/s')}"
                + (f" MFU {r['mfu']:.1%}" if r["mfu"] is not None else "") for r in c["ranks"])
                + f"; mean {si(sum(r['tflops_per_s'] for r in c['ranks']) / len(c['ranks']) * 1e12, 'FLOP/s')}"
                + (f", MFU {c['mfu_mean']:.1%}" if c.get("mfu_mean") is not None else ""))
    return lines


def verdict_lines(s: dict) -> list[str]:
    """The run's verdict (``advisor.verdict``), and for a launch-bound or under-filled run
    what else to try."""
    v = s.get("verdict")
    if not v:
        return []
    after = (s.get("changes") or {}).get("after")
    # the table below is the whole steady run: say which steps the verdict is of
    scope = f" (steps {after['from_step']}-{after['to_step']}, after fastmon's changes)" if after else ""
    lines = [f"  verdict{scope}: {v['issue']} — {v['why']} — next: {v['next']}"]
    remedies = (s.get("compute") or {}).get("remedies")
    if remedies and len(remedies) > 1:
        lines.append("    also to try: " + "; ".join(remedies[1:]))
    return lines


def change_lines(changes: dict | None) -> list[str]:
    """The run before fastmon's first change and as it ran after its last kept one."""
    if not changes:
        return []
    before, after = changes["before"], changes["after"]
    lines = ["", f"  before and after the changes fastmon made: steps {before['from_step']}-{before['to_step']} "
                 f"vs {after['from_step']}-{after['to_step']}",
             f"  {'':<10} {'before':>16} {'after':>16}",
             f"  {'samples/s':<10} {before['samples_per_s']:>16,.1f} {after['samples_per_s']:>16,.1f}",
             f"  {'step ms':<10} {before['step_ms']['median']:>16.3f} {after['step_ms']['median']:>16.3f}  (median)"]
    for phase in PHASES:
        was, now = before["phases"][phase], after["phases"][phase]
        if was >= 0.005 or now >= 0.005:
            lines.append(f"  {phase:<10} {was:>16.1%} {now:>16.1%}")
    return lines


def tokens_text(s: dict) -> str:
    """`` · N tokens/s`` beside the samples (the job's too, over several ranks), or nothing
    where the model is fed no token ids (docs/sharded.md)."""
    if s.get("tokens_per_s") is None:
        return ""
    text = f" · {s['tokens_per_s']:,.0f} tokens/s"
    if s.get("tokens_nonpad_per_s") is not None:
        text += f" ({s['tokens_nonpad_per_s']:,.0f} not padding)"
    ranks = [r for r in s.get("ranks") or [] if r.get("tokens_per_s") is not None]
    if len(ranks) > 1:
        job = s.get("job") or {}
        return text + f" (the job's {job.get('tokens_per_s') or 0:,.0f}), {job.get('tokens') or 0:,} tokens in all"
    return text + f", {s['tokens']:,} tokens in all"


def comm_lines(s: dict) -> list[str]:
    """What the collectives took: the share the step waited (the comm row), and the share
    that ran under the other phases."""
    exposed, overlapped = s["phases"].get("comm", 0.0), s.get("comm_overlapped") or 0.0
    if not exposed and not overlapped:
        return []
    waited = f"  comm: the step waited {exposed:.1%} of its time in collectives (exposed)"
    if not overlapped:  # DDP's bucketed all-reduce under backward shows only as the wait it leaves
        return [f"{waited}; no collective issued without waiting was seen running under the other phases"]
    return [f"{waited}; collectives it did not wait for ran {overlapped:.1%} of it under the other phases "
            f"(overlapped)"]


def format_text(s: dict) -> str:
    lines = []
    exit_code = s.get("exit_code")
    lines.append(f"fastmon report — {s.get('script') or '?'}  ({s['run']})")
    steady = "steady run " if s.get("steady_steps", s["steps"]) < s["steps"] else ""
    samples = (f"{s['samples_per_s']:,.1f} samples/s" if s.get("samples") else
               "samples unknown (no DataLoader batch and no model input seen)")
    ranks = s.get("ranks") or []
    if len(ranks) > 1:  # the headline is the first rank's: said, with the job's rate beside it
        samples += (f" (rank {ranks[0]['rank']}'s; the job's {sum(r['samples_per_s'] for r in ranks):,.1f} over "
                    f"{len(ranks)} ranks)")
    lines.append(
        f"  {s['steps']} steps in {s['duration_s']:.2f} s of steps · {steady}{s['steps_per_s']:.2f} steps/s · "
        f"{samples}{tokens_text(s)} · {ending(exit_code, s.get('attached'))}")
    lines.append(f"  step time median {s['step_ms']['median']:.2f} ms, p90 {s['step_ms']['p90']:.2f} ms")
    lines += verdict_lines(s)
    lines += startup_lines(s)
    for event in s.get("spawned_training") or []:
        lines.append(f"  note: {spawned_line(event, s.get('script') or 'SCRIPT')}")
    if not s["steps"]:  # two lines: a table of zeros would say nothing more
        lacks = s.get("record_lacks")
        if lacks and lacks.get("steps"):
            why = f"none recorded: {lacks['why']}"
        elif s.get("spawned_training"):
            why = spawned_line(s["spawned_training"][0], s.get("script") or "SCRIPT")
        else:
            why = ("no training step seen: a step ends at optimizer.step() (or at a backward, with no optimizer) "
                   "in the process fastmon started")
        return "\n".join([f"fastmon report — {s.get('script') or '?'}  ({s['run']}) · {ending(exit_code, s.get('attached'))}",
                          f"  {why}; the script's output: fastmon replay {s['run']}"])
    lines.append("")
    timed, steady = s.get("timed_steps", s["steps"]), s.get("steady_steps", s["steps"])
    if timed < steady:
        line = (f"  phases timed in {timed} of the {steady} steps{' of the steady run' if steady < s['steps'] else ''}, "
                f"a random sample, each standing for the steps up to the next")
        price = s.get("timing")
        if price:
            line += (f" (a timed step costs ~{price['timed_step_us'] / 1e3:.2f} ms here, measured on "
                     f"{price['measured']}: one in ~{price['one_in']:.0f} is timed)")
        lines.append(line)
    lines.append(f"  {'phase':<10} {'share':>7} {'median ms':>10} {'p90 ms':>9}"
                 + (f"  (rank {ranks[0]['rank']}; each rank's below)" if len(ranks) > 1 else ""))
    for phase in PHASES:
        share = s["phases"][phase]
        bar = "█" * round(share * 30)
        lines.append(f"  {phase:<10} {share:>7.1%} {s['phase_ms'][phase]['median']:>10.3f} "
                     f"{s['phase_ms'][phase]['p90']:>9.3f}  {bar}")
    lines += comm_lines(s)
    if s.get("tokens_note"):
        lines.append(f"  {s['tokens_note']}")
    lines += change_lines(s.get("changes"))
    if s.get("device"):
        d = s["device"]
        # a span between CUDA events, not the GPU's busy time: a launch-bound step spans
        # as long on the device as on the host while its kernels run a quarter of it
        lines.append(f"  on the GPU (CUDA events, {d['steps']} steps): a step spans {d.get('device_step_ms_median', 0):.2f} "
                     f"ms from its first to its last event (forward {d.get('device_forward_ms_median', 0):.2f}, "
                     f"backward {d.get('device_backward_ms_median', 0):.2f}, "
                     f"optimizer {d.get('device_optimizer_ms_median', 0):.2f}): a span, not busy time")
    lines.append("")
    mem = s["memory"]
    # Workers are looked for every 2 s: a short epoch's may come and go unseen.
    workers = (f"{mem['workers_seen_max']} DataLoader workers {mib(mem['workers_pss_peak'])} PSS"
               if mem["workers_seen_max"] else "no DataLoader workers seen")
    others = "".join(f", {mem[f'{role}_processes_max']} {what} {mib(mem[f'{role}_rss_peak'])}"
                     for role, what in (("compile", "compile workers"), ("other", "other child processes"))
                     if mem.get(f"{role}_processes_max"))
    allocator = (f"torch allocated peak {mib(mem['torch_peak_allocated'])}, reserved {mib(mem['torch_peak_reserved'])}"
                 if mem["torch_peak_reserved"] else "torch's CUDA allocator n/a (no CUDA memory used)")
    lines.append(f"  memory: trainer RSS peak {mib(mem['trainer_rss_peak'])}, {workers}{others}, {allocator}")
    gpu = s["gpu"]
    if gpu.get("available"):
        lines += [f"  {gpu_run_line(d)}" for d in gpu["devices"]]
    else:
        lines.append(f"  GPU: {gpu.get('note')}")
    lines += compute_lines(s.get("compute"))
    lines += pipeline_lines(s.get("pipeline"))
    if s.get("ranks"):
        lines.append("")
        lines.append(f"  {'rank':<5} {'steps':>6} {'steps/s':>8} {'step ms':>8} "
                     + " ".join(f"{PHASE_LABELS[p]:>8}" for p in PHASES))
        for r in s["ranks"]:
            lines.append(f"  {r['rank']:<5} {r['steps']:>6} {r['steps_per_s']:>8.2f} {r['step_ms']['median']:>8.2f} "
                         + " ".join(f"{r['phases'][p]:>8.1%}" for p in PHASES))
        lines.append(f"  straggler: {'rank ' + str(s['straggler']) if s['straggler'] is not None else 'none (ranks within noise)'}")
    lines += link_lines(s.get("job_link"))
    lacks = s.get("record_lacks")
    lines.append(f"  the record lacks: {lacks['why']}" if lacks else
                 f"  the record holds every step the probe made ({s['steps']:,})")
    lines += [f"  note: {notice}" for notice in s.get("notices") or []]
    if s.get("output_dropped_bytes"):
        lines.append(f"  output past the first 256 MiB not recorded: {mib(s['output_dropped_bytes'])} (it was "
                     "passed through)")
    if s.get("channel_refused"):
        lines.append(f"  connections refused: {s['channel_refused']} (without the run's secret, unreadable, or claiming "
                     "a rank already connected)")
    if s["probe_faults"]:
        for fault in s["probe_faults"]:
            lines.append(f"  probe fault: {fault.get('part')} hooks switched off: {fault.get('error')}")
    for capture in s.get("profiles") or []:
        lines.append("")
        lines += ["  " + line for line in profile_lines(capture)]
    if s.get("profile_at") is not None and not any(c["first"] >= s["profile_at"] for c in s.get("profiles") or []):
        lines += ["", f"  torch.profiler: no capture; --profile-at {s['profile_at']}, and the run ended after "
                      f"{s['steps']} steps"]
    # Refuted advice is not repeated: its experiment, with the figure, is under "applied live".
    recommended = [a for a in s["advice"] if is_recommended(a)]
    for kind, heading in ((PROBLEM, "advice"), (SUGGESTION, "suggestions (good habits; nothing measured)")):
        listed = [a for a in recommended if a.get("kind", PROBLEM) == kind]
        if listed:
            lines += ["", f"  {heading}" + (" (derived again with today's rules: this record's came from an older "
                                             "fastmon)" if s.get("advice_rederived") and kind == PROBLEM else "") + ":"]
        elif kind == PROBLEM and not s["applied"]:
            lines += ["", "  advice: nothing to change — no problem fastmon knows was measured in this run"]
        for a in listed:
            gain = f" ({gain_text(a['est_gain'])})" if a.get("est_gain") and not a.get("measured") else ""
            status = f" [{result_text(a['measured'])}]" if a.get("measured") else ""
            lines.append(f"   • {a['id']}: {a['title']}{gain}{status}")
            lines.append(f"       {a['evidence']}")
            if a.get("location") and a["location"] not in a["evidence"]:  # said once is enough
                lines.append(f"       at {a['location']}")
    if s["applied"]:
        lines.append("")
        lines.append("  applied live:")
        for a in s["applied"]:
            told = (ExperimentState.FAILED, ExperimentState.INCOMPLETE, ExperimentState.NOT_JUDGED)
            lines.append(f"   • {a['id']} {params_text(a.get('params') or {})} tried from step {a['step']}: {rates_text(a)} — "
                         f"{result_text(a)}" + (f" ({a['error']})" if a.get("error") and a.get("state") not in told
                                                else ""))
            for how in (search_text(a), measured_text(a)):
                if how:
                    lines.append(f"       {how}")
    if s["permanent_changes"]:
        lines.append("")
        lines.append("  make it permanent (so the next run starts fast without fastmon;"
                     " `fastmon report --patch | git apply` writes it in):")
        for change in s["permanent_changes"]:
            lines.append(f"    {change}")
    lines.append("")
    if s.get("folders", 1) == 1:
        lines.append(f"  step by step: fastmon replay {s['run']} · as a Perfetto trace: fastmon export {s['run']}")
    else:  # replay shows one node's folder; export takes them all
        lines.append(f"  step by step: fastmon replay NODE_RUN · as a Perfetto trace: fastmon export "
                     f"{s['run'].replace(', ', ' ')} -o run.json")
    return "\n".join(lines)


def summary_text(run_dir) -> str:
    """The summary printed at a run's end, or the one line that says why there is none
    (the run folder deleted during the run, a record that cannot be read): the script's
    exit code stands either way."""
    import sqlite3
    from pathlib import Path

    from fastmon.records import RECORD_FILE
    from fastmon.summary import summarize

    if not (Path(run_dir) / RECORD_FILE).exists():
        return f"[fastmon] no summary: {run_dir} was deleted during the run"
    try:
        return format_text(summarize(run_dir))
    except (sqlite3.Error, OSError) as exc:
        return f"[fastmon] no summary: {Path(run_dir) / RECORD_FILE} cannot be read ({exc})"

