"""Where the step goes: one stacked column per group of steps, over time.

Drawn with block characters rather than plotext: plotext's stacked bars cost ~270 ms a
frame at 160x48 (60 bars x 8 phases), which made the dashboard use most of a core.
Through Textual's line API: the rows are built as strips once per new snapshot or size
and ``render_line`` hands them out. Returning a Rich ``Text`` from ``render`` cost ~50 ms
a frame at 96x30 on the 2-core VM, most of it Textual converting the 3,000 styled cells
back into strips: at three frames a second, 15% of a core taken from a CPU training.
Each cell is coloured by the phase that fills most of it (the lower 1/8-block character
gives the top of each column its height).

The scale ignores outliers, as TensorBoard's charts do by default: an epoch's start that
waits a second for its workers would flatten a thousand 3 ms steps into the bottom row.
A column taller than ``OUTLIER_FACTOR`` times the ``TYPICAL_QUANTILE`` of the columns is
cut at the top of the scale with a ``▲``, and the title says how tall the tallest was.
"""

from __future__ import annotations

from bisect import bisect_right

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from fastmon.common.phases import PHASES
from fastmon.tui.colors import PHASE_COLORS
from fastmon.tui.widgets.panel import Panel

EIGHTHS = " ▁▂▃▄▅▆▇█"
CUT = "▲"
AXIS_WIDTH = 8
TYPICAL_QUANTILE = 0.9
OUTLIER_FACTOR = 4.0


def scale_top(totals: list[float]) -> float:
    """The top of the scale: the tallest column that is not an outlier."""
    ordered = sorted(totals)
    typical = ordered[min(int(len(ordered) * TYPICAL_QUANTILE), len(ordered) - 1)]
    return max(t for t in ordered if t <= OUTLIER_FACTOR * typical) or ordered[-1] or 1.0


def filling_most(heights: list[int], low: int) -> int:
    """The phase that fills most of the cell from ``low`` to ``low + 8`` eighths, given the
    column's cumulative heights; the lower one on a tie."""
    best, most = 0, -1
    below = low
    for phase in range(bisect_right(heights, low), len(heights)):
        share = min(heights[phase], low + 8) - below
        if share > most:
            best, most = phase, share
        below = heights[phase]
        if below >= low + 8:
            break
    return best


class StepBreakdown(Panel, Widget):
    panel_id = "breakdown"

    def signature(self, snap) -> object:
        return snap.steps

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.buckets: list[dict] = []
        self.bucket_steps = 1
        self.last_step = 0
        self.bucket_first: list[int] = []
        self.marks: list[tuple[int, str]] = []
        self.windows: list[tuple[int, int]] = []
        self._strips: list[Strip] = []
        self._drawn_for: tuple | None = None  # the size and style the strips were built for; None: rebuild

    def show(self, snap) -> None:
        self.buckets, self.bucket_steps, self.last_step = snap.buckets, snap.bucket_steps, snap.last_step
        self.bucket_first, self.marks, self.windows = snap.bucket_first, snap.marks, snap.windows
        self._drawn_for = None
        self.refresh()

    def render_line(self, y: int) -> Strip:
        size, base = self.content_size, self.visual_style.rich_style  # the theme's, cached by Textual
        if self._drawn_for != (size, base):
            self._strips = [line.adjust_cell_length(size.width, base) for line in self._draw(size, base)]
            self._drawn_for = (size, base)
        return self._strips[y] if y < len(self._strips) else Strip.blank(size.width, base)

    def _draw(self, size: Size, base: Style) -> list[Strip]:
        dim, bold = base + Style(dim=True), base + Style(bold=True)
        title = [Segment(f" where the step goes: ms per step, {self.bucket_steps} step(s) per column", bold)]
        if not self.buckets:
            return [Strip(title), Strip([Segment(" waiting for the first steps…", dim)])]
        plot_w, plot_h = max(size.width - AXIS_WIDTH, 1), max(size.height - 3, 1)
        buckets = self.buckets[-plot_w:]
        totals = [sum(b[p] for p in PHASES) for b in buckets]
        top = scale_top(totals)
        cut = [total > top for total in totals]
        if any(cut):
            title.append(Segment(f" · {CUT} {sum(cut)} cut off, the tallest {max(totals):.1f} ms", dim))
        phase_styles = [base + Style(color=PHASE_COLORS[phase]) for phase in PHASES]
        # Each column: the phases' cumulative heights bottom-up, in eighths of a cell (so the
        # phase at a cell's bottom is the first whose height is above it: a bisection).
        columns = []
        for bucket in buckets:
            heights, filled = [], 0.0
            for phase in PHASES:
                filled += bucket[phase] / top * plot_h * 8
                heights.append(round(filled))
            columns.append(heights)
        lines = [Strip(title)]
        for row in range(plot_h - 1, -1, -1):
            label = f"{top * (row + 1) / plot_h if row else 0.0:7.1f}┤" if row in (plot_h - 1, plot_h // 2, 0) else " " * 7 + "│"
            segments = [Segment(label, dim)]
            low = row * 8
            run, run_style = [], base
            for heights, clipped in zip(columns, cut):
                total8 = heights[-1]
                char, style = " ", base
                if total8 > low:
                    style = phase_styles[filling_most(heights, low)]
                    char = CUT if clipped and row == plot_h - 1 else EIGHTHS[min(total8 - low, 8)]
                if style is not run_style and run:
                    segments.append(Segment("".join(run), run_style))  # one segment per run of a colour
                    run = []
                run_style = style
                run.append(char)
            if run:
                segments.append(Segment("".join(run), run_style))
            lines.append(Strip(segments))
        firsts = self.bucket_first[-len(buckets):]
        first = firsts[0] if firsts else 0
        axis = [" "] * 7 + ["└"] + ["─"] * len(buckets)
        ticks, labels = axis_labels(len(axis), first, self.last_step)
        marked_axis, marked_ticks = set(), set()
        for low, high in self.windows:  # the steps an experiment measured: a heavy axis under them
            for column in range(max(bisect_right(firsts, low) - 1, 0), bisect_right(firsts, high)):
                axis[AXIS_WIDTH + column] = "━"
                marked_axis.add(AXIS_WIDTH + column)
        for step, what in self.marks:  # where each change landed, under its column
            column = bisect_right(firsts, step) - 1
            if 0 <= column < len(buckets):
                at = AXIS_WIDTH + column
                axis[at] = "┴"
                marked_axis.add(at)
                label = f"▲ {what}"
                span = range(at, at + len(label))
                if span.stop > len(ticks) or any(ticks[i] != " " for i in span):
                    label, span = "▲", range(at, at + 1)  # no room for its name: the mark alone, never half a word
                    for words in [w for w in labels if at in w]:  # a step number under it goes whole
                        ticks[words.start:words.stop] = " " * len(words)
                        labels.remove(words)
                ticks[span.start:span.stop] = label
                marked_ticks.update(span)
        mark = base + Style(color="yellow", bold=True)
        return [*lines, Strip(styled_runs(axis, marked_axis, dim, mark)),
                Strip(styled_runs(ticks, marked_ticks, dim, mark))]


def axis_labels(width: int, first: int, last: int) -> tuple[list[str], list[range]]:
    """The axis's step numbers: the first column's at the left, the last step at the right
    where both fit apart; and where each stands."""
    ticks, labels = [" "] * width, []
    for text, at in ((f"step {first:,}", AXIS_WIDTH), (f"{last:,}", width - len(f"{last:,}"))):
        span = range(at, at + len(text))
        if span.start >= AXIS_WIDTH and span.stop <= width and all(ticks[i] == " " for i in range(at - 1, span.stop)):
            ticks[span.start:span.stop] = text
            labels.append(span)
    return ticks, labels


def styled_runs(chars: list[str], marked: set[int], plain: Style, mark: Style) -> list[Segment]:
    """One segment per run of marked or plain characters."""
    segments: list[Segment] = []
    for i, char in enumerate(chars):
        style = mark if i in marked else plain
        if segments and segments[-1].style is style:
            segments[-1] = Segment(segments[-1].text + char, style)
        else:
            segments.append(Segment(char, style))
    return segments


PANEL = StepBreakdown
