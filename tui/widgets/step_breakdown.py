"""Where the step goes: one stacked column per group of steps, over time.

Drawn with block characters rather than plotext: plotext's stacked bars cost ~270 ms a
frame at 160x48 (60 bars x 8 phases), which made the dashboard use most of a core.
This widget costs a few ms: one pass over the cells, each cell coloured by the phase
that fills it (the lower 1/8-block character gives the top of each column its height).
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from fastmon.phases import PHASES
from fastmon.tui.colors import PHASE_COLORS

EIGHTHS = " ▁▂▃▄▅▆▇█"
AXIS_WIDTH = 8


class StepBreakdown(Widget):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.buckets: list[dict] = []
        self.bucket_steps = 1
        self.last_step = 0

    def show(self, snap) -> None:
        self.buckets, self.bucket_steps, self.last_step = snap.buckets, snap.bucket_steps, snap.steps
        self.refresh()

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        title = Text(f" where the step goes: ms per step, {self.bucket_steps} step(s) per column", style="bold")
        plot_w, plot_h = max(width - AXIS_WIDTH, 1), max(height - 3, 1)
        if not self.buckets:
            return Text("\n").join([title, Text(" waiting for the first steps…", style="dim")])
        buckets = self.buckets[-plot_w:]
        totals = [sum(b[p] for p in PHASES) for b in buckets]
        top = max(totals) or 1.0
        # Each column: the phases stacked bottom-up, in eighths of a cell.
        columns = []
        for bucket in buckets:
            segments, filled = [], 0.0
            for phase in PHASES:
                filled += bucket[phase] / top * plot_h * 8
                segments.append((round(filled), PHASE_COLORS[phase]))
            columns.append(segments)
        lines = [title]
        for row in range(plot_h - 1, -1, -1):
            label = f"{top * (row + 1) / plot_h if row else 0.0:7.1f}┤" if row in (plot_h - 1, plot_h // 2, 0) else " " * 7 + "│"
            line = Text(label, style="dim")
            low = row * 8
            run, run_style = [], ""
            for segments in columns:
                total8 = segments[-1][0]
                char, style = " ", ""
                if total8 > low:
                    # coloured by the phase at the cell's bottom; full unless the column ends here
                    style = next(color for height8, color in segments if height8 > low)
                    char = EIGHTHS[min(total8 - low, 8)]
                if style != run_style and run:
                    line.append("".join(run), style=run_style)  # one span per run of a colour
                    run = []
                run_style = style
                run.append(char)
            if run:
                line.append("".join(run), style=run_style)
            lines.append(line)
        first = max(self.last_step - len(buckets) * self.bucket_steps, 0)
        axis = Text(" " * 7 + "└" + "─" * len(buckets), style="dim")
        ticks = Text(" " * AXIS_WIDTH + f"step {first}".ljust(max(len(buckets) - len(str(self.last_step)), 1))
                     + str(self.last_step), style="dim")
        return Text("\n").join([*lines, axis, ticks])
