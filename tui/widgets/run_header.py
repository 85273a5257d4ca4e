"""The header: what runs, how far it is, how fast, and its state."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from fastmon.advisor.bound import COMPUTE
from fastmon.common.phases import PHASES
from fastmon.common.run_status import RunStatus
from fastmon.report import clock, si
from fastmon.tui.widgets.fit import fitted

STATUS_STYLE = {RunStatus.RUNNING: "bold green", RunStatus.STARTING: "yellow", RunStatus.FINISHED: "bold cyan",
                RunStatus.CRASHED: "bold red", RunStatus.STOPPING: "bold yellow", RunStatus.REPLAY: "bold magenta",
                RunStatus.ENDED: "bold cyan"}


def status_text(snap) -> str:
    if snap.status == RunStatus.FINISHED:
        return f"finished, exit code {snap.exit_code}"
    if snap.status == RunStatus.CRASHED:
        return f"crashed, exit code {snap.exit_code}"
    if snap.replay is not None and snap.status == RunStatus.REPLAY:
        return f"replay, {snap.replay[0]:,} of {snap.replay[1]:,} steps"
    return snap.status


def cut(text: str, width: int) -> str:
    """``text`` in ``width``, cut between words (a word cut short could read as another figure)."""
    if len(text) <= width:
        return text
    head = text[:max(width - 1, 0)]
    return (head.rsplit(" ", 1)[0] if " " in head else head) + " …"[" " not in head:]


class RunHeader(Static):
    def show(self, snap, busy_redraw: bool = False, paused: bool = False) -> None:
        state = Text(f" {status_text(snap)} ", style=STATUS_STYLE.get(snap.status, "bold"))
        if paused:
            state.append(" charts paused (p resumes) ", style="bold black on yellow")
        state.append(f"  elapsed {clock(snap.elapsed)}")
        line1 = Text()
        line1.append(" fastmon ", style="bold reverse")
        # a long command line is cut, never the state
        line1.append(f" {cut(snap.title, self.size.width - 11 - state.cell_len)} ", style="bold")
        line1.append_text(state)
        self.update(Text("\n").join([line1, fitted(line2_items(snap, busy_redraw), self.size.width)]),
                    layout=False)  # two lines, fixed in the CSS


def line2_items(snap, busy_redraw: bool) -> list[tuple[int, Text]]:
    """What the second line can say, each with its rank (0 first): where the width is
    short, the lowest ranked items go whole, never half a figure."""
    run, recent = snap.run, snap.recent
    step = Text(f"step {snap.steps:,}")
    if snap.selected is not None and snap.status == RunStatus.REPLAY:
        row = snap.selected  # named by its number, as the report and the chart's axis name it
        step = Text(f"step {row.step:,}")
        step.append(f": {row.wall * 1e3:,.1f} ms", style="bold")
        if row.timed:
            top = max(PHASES, key=lambda p: getattr(row, p) or 0)
            step.append(f" ({top} {(getattr(row, top) or 0) / row.wall if row.wall else 0:.0%})")
    items = [(0, step)]
    if snap.epoch:
        items.append((5, Text(f"epoch {snap.epoch}" + (f"/{snap.epochs_total}" if snap.epochs_total else ""))))
    if snap.status in (RunStatus.RUNNING, RunStatus.STOPPING, RunStatus.REPLAY):
        now_tokens = f", {recent.tokens_per_s:,.0f} tokens/s" if recent.tokens_per_s is not None else ""
        items.append((4, Text(f"now {recent.steps_per_s:,.1f} steps/s, {recent.samples_per_s:,.0f} samples/s"
                              f"{now_tokens}")))
    run_tokens = f", {run['tokens_per_s']:,.0f} tokens/s" if run.get("tokens_per_s") is not None else ""
    items.append((3, Text(f"run {run.get('steps_per_s', 0):,.2f} steps/s, {run.get('samples_per_s', 0):,.1f} "
                          f"samples/s{run_tokens}", style="bold")))
    if snap.eta_s is not None:
        items.append((6, Text(f"ETA {clock(snap.eta_s)}")))
    if snap.losses:
        items.append((7, Text(f"loss {snap.losses[-1]:.4g}")))
    if snap.compute.get("tflops_per_s") is not None:
        mfu = snap.compute.get("mfu")
        items.append((8, Text(si(snap.compute["tflops_per_s"] * 1e12, "FLOP/s")
                              + (f" MFU {mfu:.1%}" if mfu is not None else ""))))
    if snap.verdict:
        items.append((1, Text(snap.verdict.issue, style="bold yellow" if snap.bound[0] != COMPUTE else "")))
    if snap.capturing and snap.status == RunStatus.RUNNING:
        items.append((2, Text("torch.profiler capturing: these steps run slower", style="bold yellow")))
    if busy_redraw:
        items.append((4, Text("redrawn once a second: the cores are busy", style="dim")))
    if snap.dropped:
        items.append((2, Text(f"{snap.dropped} records dropped", style="yellow")))
    return items
