"""The bar of the current phase shares, with the starved part plainly coloured, and a
legend that names all eight phases at any width (it wraps)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from fastmon.advisor.bound import DATA
from fastmon.common.phases import PHASE_LABELS, PHASES
from fastmon.tui.colors import PHASE_COLORS
from fastmon.tui.widgets.panel import Panel


def segments(shares: dict, width: int) -> list[int]:
    """Cells per phase: the cumulative shares rounded, so each segment is within a cell of
    its share and the bar fills the width exactly."""
    total = sum(shares[p] for p in PHASES) or 1.0
    cells, edge, filled = [], 0, 0.0
    for phase in PHASES:
        filled += shares[phase] / total
        end = round(filled * width)
        cells.append(end - edge)
        edge = end
    cells[-1] += width - edge
    return cells


def starved_text(snap) -> str:
    """What the STARVED banner says: the share the verdict read, and whose (under DDP, the
    straggler's: the bar beside it is the first rank's)."""
    if not (snap.bound and snap.bound[0] == DATA):
        return ""
    whose = f"rank {snap.judged_rank} " if snap.judged_rank is not None else ""
    return f"{whose}{snap.judged_data_wait:.0%} waiting for data"


def legend_items(shares: dict, starved: str) -> list[Text]:
    """``starved``: the banner where the verdict is data-bound (``advisor.verdict``), else ""."""
    items = []
    if starved:
        items.append(Text(f" STARVED: {starved} ", style="bold white on red"))
    for phase in PHASES:
        item = Text("■ ", style=PHASE_COLORS[phase])
        item.append(f"{PHASE_LABELS[phase]} {shares[phase]:.0%}", style="bold" if shares[phase] >= 0.25 else "")
        items.append(item)
    return items


def wrapped(items: list[Text], width: int, gap: str = "  ") -> list[Text]:
    lines, line = [], Text()
    for item in items:
        if line.cell_len and line.cell_len + len(gap) + item.cell_len > width:
            lines.append(line)
            line = Text()
        if line.cell_len:
            line.append(gap)
        line.append_text(item)
    return [*lines, line]


class SharesBar(Panel, Widget):
    panel_id = "shares"

    def signature(self, snap) -> object:
        return snap.steps, snap.bound

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shares = {p: 0.0 for p in PHASES}
        self.starved = ""

    def show(self, snap) -> None:
        width = max(self.content_size.width, 1)
        lines = len(wrapped(legend_items(self.shares, self.starved), width))
        self.shares, self.starved = snap.recent.shares, starved_text(snap)
        self.refresh(layout=len(wrapped(legend_items(self.shares, self.starved), width)) != lines)  # the legend's height

    def get_content_height(self, container, viewport, width: int) -> int:
        return 1 + len(wrapped(legend_items(self.shares, self.starved), max(width, 1)))

    def render(self) -> Text:
        width = max(self.content_size.width, 1)
        bar = Text()
        for phase, cells in zip(PHASES, segments(self.shares, width)):
            bar.append("█" * cells, style=PHASE_COLORS[phase])
        return Text("\n").join([bar, *wrapped(legend_items(self.shares, self.starved), width)])


PANEL = SharesBar
