"""What the screen shows at one moment, from a live session or a recorded run."""

from __future__ import annotations

import bisect
import functools
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

from fastmon.advisor.bound import GpuBusy
from fastmon.advisor.verdict import Verdict, verdict
from fastmon.advisor.facts import Facts
from fastmon.advisor.window import Window, recent
from fastmon.common.run_status import ENDED_STATUSES, RunStatus
from fastmon.live_state import LOSS_HISTORY, RSS_HISTORY, training_rss
from fastmon.permanent import line_text, permanent_changes
from fastmon.pipeline import pipeline_summary
from fastmon.printed_loss import printed_losses
from fastmon.rederive import advice_now, advised_by_other_rules
from fastmon.common.phases import COLUMN, PHASES, StepRow
from fastmon.progress import progress, script_args
from fastmon.common.verdicts import params_text
from fastmon.step_table import StepTable
from fastmon.watch_link import WatchLink
from fastmon.summary import (before_and_after, busy_during, compiled_model, counted_samples, current_window, first_count, flops_figures,
                             gpus_over_run, rates, since_last_change, slowed_steps, steady_left_out,
                             judge, lost_nodes, rank_table, rows_span, steady_span,
                             busy_in_span, monitor_running, window_summary)

CHART_BUCKETS = 150
CHART_STEPS = 1200  # the chart shows the last this many steps, at most CHART_BUCKETS columns
RECENT_STEPS = 100
OUTPUT_AGAIN = 2000  # after a move back in replay, the pane is drawn again from this many chunks back


@dataclass
class Snapshot:
    title: str = ""
    status: RunStatus = RunStatus.STARTING
    exit_code: int | None = None
    elapsed: float = 0.0
    steps: int = 0
    run: dict = field(default_factory=dict)  # the steady run's rates so far (summary.rates)
    recent: Window = field(default_factory=Window)  # the steps that show the run as it is now
    buckets: list = field(default_factory=list)  # [{phase: ms}] oldest first
    bucket_steps: int = 1
    bucket_first: list = field(default_factory=list)  # each bucket's first step
    last_step: int = 0  # the chart's last step
    marks: list = field(default_factory=list)  # [(step, what)]: where a change landed
    windows: list = field(default_factory=list)  # [(first, last)]: the steps experiments measured
    memory: dict = field(default_factory=dict)  # "rss", "allocated": bytes over the last minute / chart
    losses: list = field(default_factory=list)  # the training losses the script printed, oldest first
    epoch: int | None = None
    epochs_total: int | None = None
    eta_s: float | None = None
    host: dict = field(default_factory=dict)
    gpu: list = field(default_factory=list)  # latest sample per device
    gpu_history: dict = field(default_factory=dict)  # index -> {"util": [...], "mem": [...]}
    gpu_note: str = ""
    gpu_run: list = field(default_factory=list)  # summary.gpus_over_run, once the run has ended
    torch_memory: dict = field(default_factory=dict)
    advice: list = field(default_factory=list)
    applied: list = field(default_factory=list)
    ranks: list = field(default_factory=list)
    straggler: int | None = None
    nodes_lost: dict = field(default_factory=dict)  # a multi-node job's nodes that stopped reporting: node -> when
    replay: tuple | None = None  # (position, last) in replay mode
    dropped: int = 0
    capturing: bool = False  # a torch.profiler capture asked for or under way
    compute: dict = field(default_factory=dict)  # summary.flops_figures at the run's rates
    bound: tuple | None = None  # advisor.bound's (verdict, why) of the recent steps
    judged_rank: int | None = None  # the straggler whose steps the verdict reads, under DDP
    judged_data_wait: float = 0.0  # the data wait's share of the steps the verdict reads
    verdict: Verdict | None = None  # issue, why, next: of the same steps (advisor.verdict)
    experiment: dict | None = None  # the live change being measured (ExperimentRunner.progress)
    outcome: dict | None = None  # once the run has ended: ``before_after`` and ``permanent`` (the report's)
    selected: StepRow | None = None  # in replay: the step at the scrubber
    pipeline: dict | None = None  # the data pipeline's stages, the slowest first (fastmon.pipeline); None: none timed


def chart_buckets(rows: list) -> tuple[list[dict], int, list[int]]:
    """Mean ms per step of each phase, per bucket of steps, and each bucket's first step. A
    bucket's time is all its steps'; its split is that of its timed steps, or of the last
    bucket that had some."""
    rows = rows[-CHART_STEPS:]
    if not rows:
        return [], 1, []
    per = max(1, -(-len(rows) // CHART_BUCKETS))
    out = []
    split = {p: 1.0 if p == "other" else 0.0 for p in PHASES}
    for start in range(0, len(rows), per):
        chunk = rows[start:start + per]
        timed = [r for r in chunk if r.timed]
        timed_wall = sum(r.wall for r in timed)
        if timed_wall > 0:
            split = {p: sum(r[COLUMN[p]] for r in timed) / timed_wall for p in PHASES}
        mean_ms = sum(r.wall for r in chunk) / len(chunk) * 1e3
        out.append({p: mean_ms * split[p] for p in PHASES})
    return out, per, [rows[start].step for start in range(0, len(rows), per)]


def fill_progress(snap: Snapshot, facts: dict, argv: list[str]) -> None:
    snap.epoch, snap.epochs_total, snap.eta_s = progress(facts, argv, snap.steps, snap.recent.steps_per_s,
                                                         snap.status == RunStatus.RUNNING)


def build(*, title, status, exit_code, elapsed, steps, run, rows, rank_rows, facts, argv, host, gpu_samples, gpu_note,
          advice, applied, dropped, replay=None, capturing=False, current: Window | None = None,
          flops_count: dict | None = None, gpu_busy: dict | None = None, experiment: dict | None = None,
          outcome: dict | None = None, selected: StepRow | None = None, rss: list = (),
          losses: list = (), gpu_run: list = (), nodes_lost: dict | None = None,
          pipeline: dict | None = None) -> Snapshot:
    """``run``: the steady run's rates; ``rows``: the latest steps, enough for the chart;
    ``current``: the steady run since the last change, for a run that has ended (the
    report's figures); else the shares are of the latest steps; ``flops_count``: the
    probe's ``flops`` event; ``gpu_busy``: how busy each GPU was while the shown steps ran,
    for the verdict; ``gpu_run``: each GPU over the ended run, as the report has it."""
    snap = Snapshot(title=title, status=status, exit_code=exit_code, elapsed=elapsed, steps=steps,
                    gpu_note=gpu_note, advice=advice, applied=applied, dropped=dropped, replay=replay, host=host,
                    run=run, capturing=capturing, experiment=experiment, outcome=outcome, selected=selected,
                    pipeline=pipeline)
    snap.recent = current or Window.from_rows(recent(since_last_change(rows, applied), RECENT_STEPS))
    snap.buckets, snap.bucket_steps, snap.bucket_first = chart_buckets(rows)
    snap.last_step = rows[-1].step if rows else 0
    # where each change's trial began: the chart marks it
    snap.marks = [(r["step"], params_text(r.get("params") or {})) for r in applied if r.get("step") is not None]
    snap.windows = [tuple(w) for r in applied for w in r.get("windows") or ()]
    if experiment:
        snap.marks.append((experiment["from_step"], "trying " + params_text(experiment["params"])))
        snap.windows += [tuple(w) for w in experiment["windows"]]
    snap.losses = list(losses)[-LOSS_HISTORY:]
    snap.memory = {"rss": list(rss)[-RSS_HISTORY:],
                   "allocated": [r.mem_alloc for r in rows if r.timed and r.mem_alloc is not None]}
    timed = [r for r in rows[-RECENT_STEPS:] if r.timed]
    if timed:
        last = timed[-1]
        snap.torch_memory = {"allocated": last.mem_alloc, "reserved": last.mem_reserved,
                             "peak": max(r.mem_peak or 0 for r in timed)}
    if gpu_samples:
        snap.gpu = gpu_samples[-1]
        snap.gpu_run = list(gpu_run)
        for sample in gpu_samples[-120:]:
            for d in sample:
                hist = snap.gpu_history.setdefault(d["index"], {"util": [], "mem": []})
                hist["util"].append(d.get("util") or 0)
                total = d.get("mem_total") or 1
                hist["mem"].append(100.0 * (d.get("mem_used") or 0) / total)
    fill_progress(snap, facts, argv)
    snap.ranks, snap.straggler = rank_table(rank_rows, RECENT_STEPS)
    snap.nodes_lost = dict(nodes_lost or {})
    snap.compute = flops_figures(flops_count, counted_samples(flops_count, rows), run.get("steps_per_s", 0.0),
                                 run.get("samples_per_s", 0.0), facts)
    on_gpu = (facts.get("environment") or {}).get("accelerator") == "cuda"
    ranks, slowest = snap.ranks, snap.straggler
    if current is not None and len(rank_rows) > 1:  # ended: each rank over the report's "after" steps, as it reads them
        ranks, slowest = rank_table({rank: [r for r in rows_of if r.step >= current.first_step]
                                     for rank, rows_of in rank_rows.items()}, len(rows))
    judged = judge(window_summary(snap.recent), ranks, slowest, gpu_busy, on_gpu)
    snap.judged_rank, snap.judged_data_wait = judged.rank, judged.steps["phases"]["data_wait"]
    snap.bound = judged.bound if snap.recent.steps else None
    snap.verdict = verdict(snap.bound, judged.steps["phases"], advice, applied, judged.gpu, compiled_model(facts),
                           judged.rank)
    return snap


def outcome(table: StepTable, applied: list[dict], left_out, facts: dict, advice) -> dict:
    """What the changes made of the run, as the report says it: the steady run before the
    first and since the last kept, and the code that keeps what was measured faster."""
    return {"before_after": before_and_after(table, applied, left_out),
            "permanent": [line_text(c) for c in permanent_changes(applied, facts, [dict(a) for a in advice])]}


class LiveSource:
    """Snapshots of a running :class:`fastmon.session.Session`."""

    replay = False

    def __init__(self, session) -> None:
        self.session = session
        self.title = " ".join(session.options.target)
        self._output_seen = 0
        self._current: tuple | None = None  # (steps, window, outcome) once the run has ended

    def _ended(self, view) -> tuple[Window, dict]:
        """The report's figures of the steady run since the last change, and the outcome of
        the changes, computed once per step count: the session keeps its last ``HISTORY`` rows."""
        steps = view.rank(0).steps
        if self._current is None or self._current[0] != steps:
            table, applied, left_out = StepTable.from_rows(view.rank(0).rows), list(view.applied), view.rank(0).left_out
            self._current = (steps, current_window(table, applied, left_out),
                             outcome(table, applied, left_out, dict(view.facts), view.advice))
        return self._current[1], self._current[2]

    def snapshot(self) -> Snapshot:
        session, view = self.session, self.session.view
        rank_rows = {rank: list(rs.rows[-CHART_STEPS:]) for rank, rs in view.ranks.items()}
        first = view.first_rank
        rows = rank_rows.get(min(rank_rows), []) if rank_rows else []
        argv = script_args(session.options.target)
        current, ended = self._ended(view) if view.status in ENDED_STATUSES and rows else (None, None)
        gpu_timed = list(view.gpu)
        shown = recent(since_last_change(rows, view.applied), RECENT_STEPS)
        return build(title=self.title, status=view.status, exit_code=view.exit_code, elapsed=view.elapsed(),
                     steps=first.steps, run=first.steady_rates(), rows=rows, rank_rows=rank_rows,
                     facts=dict(view.facts), argv=argv, host=dict(view.host), gpu_samples=[s for _, _, s in gpu_timed],
                     gpu_note=session.gpu.note, advice=[dict(a) for a in view.advice], applied=list(view.applied),
                     dropped=view.dropped, capturing=view.capturing, current=current,
                     flops_count=first_count(view.events_of("flops")),
                     gpu_busy=busy_during(gpu_timed, rows, current.first_step) if current is not None
                     else busy_during(gpu_timed, shown),
                     gpu_run=gpus_over_run(gpu_timed, rows_span([r for r in rows if r.step >= current.first_step]))
                     if current is not None else (),
                     experiment=view.experiment, outcome=ended, rss=view.rss, losses=view.losses,
                     nodes_lost=lost_nodes(view.events), pipeline=view.facts.get("pipeline_stages"))

    @property
    def run_dir(self):
        return self.session.run_dir

    def events(self, kind: str) -> list[dict]:
        return self.session.view.events_of(kind)

    def new_output(self) -> tuple[bool, list[tuple[str, str]]]:
        """(whether the pane starts over, the (stream, text) chunks to add): a live run's
        chunks printed since the last call."""
        view = self.session.view
        fresh = min(view.output_seq - self._output_seen, len(view.output))
        self._output_seen = view.output_seq
        return False, list(view.output[-fresh:]) if fresh > 0 else []


def epoch_at(epochs: list[tuple[int, int]], step: int) -> int:
    """The epoch ``step`` is in, from ``epochs_by_step``: the latest epoch begun by then, and
    between the facts recorded (a short epoch's may never be sent) as many more as the
    steps an epoch takes (the last fact's: its epoch began after so many)."""
    began, last = epochs[-1]
    per_epoch = began / (last - 1) if last > 1 else None
    known = bisect.bisect_right(epochs, (step, float("inf")))
    since, epoch = epochs[known - 1] if known else (0, 1)
    if per_epoch:
        epoch += int((step - since) // per_epoch)
    return min(epoch, last)


def epochs_by_step(facts: dict, history: list) -> list[tuple[int, int]]:
    """(the step an epoch began at, that epoch), for the training loader, from each value
    its fact took (each says the step its latest epoch began at); empty for a record
    older than that."""
    loader = Facts(values=facts).training_loader()
    key = f"loader.{loader.get('id')}" if loader else None
    return sorted({(value["epoch_began"], value["epochs"]) for _, _, name, value in history
                   if name == key and isinstance(value, dict) and value.get("epoch_began") is not None
                   and value.get("epochs")})


class ReplaySource:
    """Snapshots of a recorded run, at a scrubbable step position. The first rank's wall
    times and samples are read as columns; the rows the screen shows are read as it moves,
    so a million-step run opens as fast as a short one."""

    replay = True

    def __init__(self, run_dir) -> None:
        self.run_dir = Path(run_dir)
        self._log_shown = 0  # chunks of the log in the output pane
        self._load()

    def _load(self) -> None:
        """Read the record, the scrubber at its end."""
        from fastmon.records import RunRecord

        run_dir = self.run_dir
        self.record = record = RunRecord(run_dir)
        self.meta = record.meta()
        self.facts = record.facts()
        # the report's table: the training thread's fact and the workers' files, as last written
        self.pipeline = pipeline_summary(run_dir, self.facts)
        self._epochs = epochs_by_step(self.facts, record.fact_history())
        self.host = record.samples("host")
        self._host_times = [ts for ts, _, _ in self.host]
        self.gpu = record.samples("gpu")
        self.applied = record.applied()
        self.log = record.log()
        self.recorded_events = record.events()
        self.ranks = record.ranks()
        first_rank = self.ranks[0] if self.ranks else 0
        self.table = StepTable.read(record, first_rank) if self.ranks else StepTable.empty()
        self.left_out = steady_left_out(self.table, slowed_steps(self.recorded_events).get(first_rank, {}))
        self.advice = (advice_now(record, first_rank, self.table, self.left_out, self.applied, self.facts, self.meta)
                       if advised_by_other_rules(self.meta) else record.advice())
        self._walls_upto = list(itertools.accumulate(self.table.walls, initial=0.0))
        self._left_out_at = sorted(p for p in map(self.table.position, self.left_out) if p < len(self.table))
        self._current: Window | None = None
        self.position = len(self.table)  # steps shown: the first this many
        self.title = " ".join(self.meta.get("target") or []) or str(run_dir)
        self._log_times = [t for t, _, _ in self.log]
        per_chunk = [printed_losses(text) for _, _, text in self.log]
        self._losses = [loss for losses in per_chunk for loss in losses]
        self._losses_by = list(itertools.accumulate(map(len, per_chunk), initial=0))  # by the nth chunk

    @property
    def length(self) -> int:
        return len(self.table)

    def _run_upto(self) -> dict:
        """The steady run's rates up to the scrubber (all its steps while it holds only start-up)."""
        p, table = self.position, self.table
        steps, samples, wall = p, table.samples.total(0, p), self._walls_upto[p]
        left_out = [q for q in self._left_out_at if q < p]
        if len(left_out) < p:
            steps -= len(left_out)
            samples -= sum(table.samples[q] for q in left_out)
            wall -= sum(table.walls[q] for q in left_out)
        return rates(steps, samples, wall)

    def _current_window(self) -> Window:
        if self._current is None:
            self._current = current_window(self.table, self.applied, self.left_out)
        return self._current

    @functools.cached_property
    def _outcome(self) -> dict:
        return outcome(self.table, self.applied, self.left_out, self.facts, self.advice)

    @functools.cached_property
    def _steady_span(self) -> tuple[float, float] | None:
        return steady_span(self.record, self.ranks[0], self.table, self.left_out) if self.ranks else None

    @functools.cached_property
    def _steady_busy(self) -> dict[int, GpuBusy]:
        """How busy the report says each GPU was in the steady run's steps."""
        return busy_in_span(self.gpu, self._steady_span)

    def _losses_upto(self, chunks: int) -> list[float]:
        """The last losses printed in the log's first ``chunks`` chunks."""
        end = self._losses_by[chunks]
        return self._losses[max(end - LOSS_HISTORY, 0):end]

    def _log_upto(self, t: float) -> int:
        """How many chunks of the log were printed by time ``t``."""
        return bisect.bisect_right(self._log_times, t)

    def _host_upto(self, t: float) -> int:
        """How many host samples were taken by time ``t``."""
        return bisect.bisect_right(self._host_times, t)

    def move(self, delta: int) -> None:
        self.position = min(max(self.position + delta, 1 if self.length else 0), self.length)

    def jump(self, position: int) -> None:
        self.move(position - self.position)

    def snapshot(self) -> Snapshot:
        at_step = self.table.steps[self.position - 1] if self.position else -1
        rank_rows = {rank: self.record.steps_upto(rank, at_step, CHART_STEPS) for rank in self.ranks}
        rows = rank_rows.get(self.ranks[0], []) if self.ranks else []
        t = rows[-1].t_end if rows else 0.0
        at_end = self.position == self.length
        upto = self._host_upto(t)
        host = self.host[upto - 1][2] if upto else (self.host[-1][2] if self.host else {})
        # as they were when this step ended: at the end, the last sample of the training, not the
        # GPU idle after the script exited (the whole run's figures are in gpu_run)
        gpu = [s for ts, _, s in self.gpu if ts <= t]
        exit_code = self.meta.get("exit_code")
        status = ((RunStatus.FINISHED if exit_code == 0 else RunStatus.CRASHED if exit_code is not None else RunStatus.ENDED)
                  if at_end else RunStatus.REPLAY)
        argv = script_args(self.meta.get("target") or [])
        started = self.meta.get("started") or (rows[0].t_end if rows else 0)
        snap = build(title=self.title, status=status, exit_code=exit_code if at_end else None,
                     elapsed=max(t - started, 0.0), steps=self.position, run=self._run_upto(), rows=rows,
                     rank_rows=rank_rows, facts=self.facts, argv=argv, host=host, gpu_samples=gpu,
                     gpu_note=self.meta.get("gpu_note") or "", advice=self.advice, applied=self.applied,
                     dropped=self.meta.get("dropped", 0), replay=(self.position, self.length),
                     current=self._current_window() if at_end and rows else None,
                     flops_count=first_count(e for e in self.events("flops") if e["from_step"] < self.position),
                     gpu_run=gpus_over_run(self.gpu, self._steady_span) if at_end else (),
                     gpu_busy=self._steady_busy if at_end
                     else busy_during(self.gpu, recent(since_last_change(rows, self.applied), RECENT_STEPS)),
                     outcome=self._outcome if at_end else None, selected=rows[-1] if rows else None,
                     rss=[r for ts, _, s in self.host[:self._host_upto(t)][-RSS_HISTORY:]
                          if (r := training_rss(s)) is not None],
                     losses=self._losses_upto(len(self.log) if at_end else self._log_upto(t)),
                     nodes_lost=lost_nodes(self.recorded_events, None if at_end else t), pipeline=self.pipeline)
        if not at_end and self._epochs:  # the record's last facts say the last epoch
            snap.epoch = epoch_at(self._epochs, at_step)
        return snap

    def events(self, kind: str) -> list[dict]:
        return [e for e in self.recorded_events if e["kind"] == kind]

    def new_output(self) -> tuple[bool, list[tuple[str, str]]]:
        """What the script had printed by the selected step (all of it at the end): the
        chunks since the last call, or, after a move back, the pane anew."""
        upto = len(self.log)
        if self.position < self.length:
            at_step = self.table.steps[self.position - 1] if self.position else -1
            row = self.record.steps_upto(self.ranks[0], at_step, 1) if self.ranks else []
            upto = self._log_upto(row[0].t_end) if row else 0
        shown, self._log_shown = self._log_shown, upto
        if upto >= shown:
            return False, [(stream, text) for _, stream, text in self.log[shown:upto]]
        return True, [(stream, text) for _, stream, text in self.log[max(upto - OUTPUT_AGAIN, 0):upto]]


class FollowSource(ReplaySource):
    """A run another monitor is recording (``fastmon watch``): read again at most once every
    ``REREAD_EVERY`` s while that monitor runs, the scrubber kept at the end unless moved
    back; shown as running. Its changes are that monitor's: ``commands`` asks it for one."""

    REREAD_EVERY = 1.0

    def __init__(self, run_dir) -> None:
        super().__init__(run_dir)
        self._read_at = time.monotonic()
        self.commands = WatchLink.of(self.meta) if self.following else None

    @property
    def following(self) -> bool:
        return "ended" not in self.meta and monitor_running(self.meta)

    def snapshot(self) -> Snapshot:
        following = self.following
        if following and time.monotonic() - self._read_at >= self.REREAD_EVERY:
            self._read_at = time.monotonic()
            fresh = ReplaySource.__new__(ReplaySource)
            fresh.run_dir, fresh._log_shown = self.run_dir, self._log_shown
            try:
                fresh._load()
            except Exception:  # caught mid-write: the next look reads it whole
                return super().snapshot()
            position, at_end, old = self.position, self.position == self.length, self.record
            for cached in ("_outcome", "_steady_span", "_steady_busy"):
                self.__dict__.pop(cached, None)
            self.__dict__.update(fresh.__dict__)
            old.close()
            if not at_end:
                self.position = min(position, self.length)
        snap = super().snapshot()
        if following and self.position == self.length:
            snap.status = RunStatus.RUNNING
        return snap
