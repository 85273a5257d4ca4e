"""The data pipeline: where making a sample takes its time, a row per stage (its name,
file:line, CPU / wall ms a sample, a bar as long as its wall time), the slowest first; in
the GPU and host panels' place while ``l`` shows it."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from fastmon.common.run_status import RunStatus
from fastmon.tui.colors import PHASE_COLORS
from fastmon.tui.widgets.fit import fitted, wrapped_lines
from fastmon.tui.widgets.panel import Panel

# The bar's solid part is the stage's CPU, its shaded rest what it waited (a read, a sleep):
# in the data phase's colour, as making samples is what the chart's data wait waits for.
CPU, WAIT = "█", "░"
BAR_STYLE = PHASE_COLORS["data_wait"]
WAITS = " waits"  # a stage the pipeline summary found waiting (wall far above CPU)
GAP = "  "
NAME_MAX = 32  # a longer name is cut with "…": its file:line says which it is
NAME_MIN = 8
BAR_MIN = 6
# A record without a pipeline: said in the panel's place, the layout as with one.
NOT_YET = ("no data pipeline timed yet: it shows once the DataLoader has made batches (its transforms, "
           "__getitem__ and collate_fn, ms a sample)")
NONE_IN_RUN = ("no data pipeline timed in this run: no DataLoader made batches where the probe could time "
               "them, or the record is older than the pipeline's timing")


def ms(value: float) -> str:
    """A few significant digits at any size: a 0.03 ms stage and a 40 ms one both read."""
    return f"{value:.3f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def figures(row: dict) -> str:
    return f"{ms(row.get('cpu_ms') or 0.0):>7} / {ms(row.get('wall_ms') or 0.0):>7}"


def bar(cpu: float, wall: float, top: float, width: int) -> Text:
    """``wall`` of ``top`` in ``width`` cells (one at least for a stage that took any time),
    its CPU's share of them solid."""
    cells = max(round(wall / top * width), 1 if wall > 0 else 0) if top > 0 else 0
    solid = round(cells * min(cpu / wall, 1.0)) if wall > 0 else 0
    return Text.assemble((CPU * solid, BAR_STYLE), (WAIT * (cells - solid), BAR_STYLE), " " * (width - cells))


def cut(name: str, width: int) -> str:
    return name if len(name) <= width else name[:max(width - 1, 0)] + "…"


def table(rows: list[dict], width: int) -> list[Text]:
    """A line a row: name, file:line, CPU / wall, the bar, the waiting mark. Where the width
    is short the file:line goes whole (never half a line number), then the name is cut."""
    if not rows:
        return []
    marks = len(WAITS) if any(r.get("waiting") for r in rows) else 0
    numbers = len(figures(rows[0]))
    name_w = min(max(len(str(r.get("name") or "?")) for r in rows), NAME_MAX)
    where_w = max((len(str(r.get("where") or "")) for r in rows), default=0)
    # a line: name GAP [where GAP] numbers GAP bar [waits]
    rest = len(GAP) + numbers + len(GAP) + marks
    if where_w and name_w + len(GAP) + where_w + rest + BAR_MIN > width:
        where_w = 0
    columns = where_w + len(GAP) if where_w else 0
    name_w = max(min(name_w, width - columns - rest - BAR_MIN), NAME_MIN)
    bar_w = max(width - name_w - columns - rest, BAR_MIN)
    top = max((r.get("wall_ms") or 0.0) for r in rows)
    lines = []
    for r in rows:
        line = Text(f"{cut(str(r.get('name') or '?'), name_w):<{name_w}}{GAP}", style="bold" if r is rows[0] else "")
        if where_w:
            line.append(f"{str(r.get('where') or ''):<{where_w}}{GAP}", style="dim")
        line.append(figures(r) + GAP)
        line.append_text(bar(r.get("cpu_ms") or 0.0, r.get("wall_ms") or 0.0, top, bar_w))
        if r.get("waiting"):
            line.append(WAITS, style="bold yellow")
        lines.append(line)
    return lines


def slowest_first(rows: list[dict]) -> list[dict]:
    """By wall time, as the summary orders its stages (kept here: the title says so)."""
    return sorted(rows, key=lambda r: -(r.get("wall_ms") or 0.0))


def worker_lines(rows: list[dict], width: int) -> list[Text]:
    """A worker a line, the slowest first: its ms a sample, the share of it computed, how
    much of a core it kept busy, and whether it is slower than the others; where the width
    is short, the least telling go whole."""
    lines = []
    for w in rows:
        items = [(0, Text(f"worker {w.get('pid', '?')}: " + (f"{ms(w['ms_a_sample'])} ms a sample"
                                                             if w.get("ms_a_sample") is not None else "")))]
        if w.get("fetch_cpu_share") is not None:
            items.append((2, Text(f"computes {w['fetch_cpu_share']:.0%} of it")))
        if isinstance(w.get("busy"), (int, float)) and not isinstance(w["busy"], bool):
            items.append((3, Text(f"{w['busy']:.2f} of a core busy")))  # cpu_s / life: above 1 with threads
        if w.get("slower"):
            items.append((1, Text("slower than the others", style="bold yellow")))
        lines.append(fitted(items, width, gap=", ", lead=""))
    return lines


def where_made(pipeline: dict) -> str:
    at_once, processes = pipeline.get("workers") or 0, pipeline.get("processes") or 0
    if not at_once:
        return "in the training thread"
    over = f" ({processes} over the run)" if processes > at_once else ""
    return f"in {at_once} DataLoader worker{'s' if at_once > 1 else ''}{over}"


class PipelinePanel(Panel, Widget):
    panel_id = "pipeline"

    def signature(self, snap) -> object:
        return snap.pipeline, snap.status, snap.replay is not None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pipeline: dict | None = None
        self.live = True
        self.replay = False
        self.border_title = "data pipeline"
        self.border_subtitle = "l: back"

    def show(self, snap) -> None:
        self.pipeline = snap.pipeline or None
        self.live = snap.status in (RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STOPPING)
        self.replay = snap.replay is not None
        self.refresh()  # drawn at its own width in render(), hidden or shown

    def lines(self, width: int) -> list[Text]:
        pipeline = self.pipeline or {}
        stages = slowest_first(pipeline.get("stages") or [])
        batches = slowest_first(pipeline.get("batch_stages") or [])
        if not stages and not batches:
            return wrapped_lines(NOT_YET if self.live else NONE_IN_RUN, width, style="dim")
        made, legend = Text(where_made(pipeline)), (4, Text(f"{CPU} CPU {WAIT} waiting", style=BAR_STYLE))
        replay = [(3, Text("the run's totals", style="dim"))] if self.replay else []
        lines = []
        if stages:
            lines.append(fitted([(0, Text("ms a sample, CPU / wall", style="bold")), (1, made),
                                 (2, Text("the slowest first")), legend, *replay], width, lead=""))
            lines += table(stages, width)
        if batches:
            counted = max((b.get("batches") or 0) for b in batches)
            lines.append(fitted([(0, Text("ms a batch on the training process, CPU / wall", style="bold")),
                                 *([(1, Text(f"{counted:,} batches timed"))] if counted else []),
                                 *([] if stages else [legend, *replay])], width, lead=""))
            lines += table(batches, width)
        return lines + worker_lines(pipeline.get("worker_rows") or [], width)

    def render(self) -> Text:
        text = Text("\n").join(self.lines(max(self.content_size.width, 1)))
        text.no_wrap, text.overflow = True, "ellipsis"  # a row a line; past the panel's height, the fastest go
        return text


PANEL = PipelinePanel
