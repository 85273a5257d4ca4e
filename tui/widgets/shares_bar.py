"""The bar of the current phase shares, with the starved part plainly coloured."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from fastmon.phases import PHASE_LABELS, PHASES
from fastmon.tui.colors import PHASE_COLORS, STARVED_SHARE


class SharesBar(Widget):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shares = {p: 0.0 for p in PHASES}

    def show(self, snap) -> None:
        self.shares = snap.recent.shares
        self.refresh()

    def render(self) -> Text:
        shares = self.shares
        width = max(self.content_size.width, 1)
        bar = Text()
        used = 0
        for i, phase in enumerate(PHASES):
            cells = round(shares[phase] * width) if i < len(PHASES) - 1 else width - used
            cells = max(min(cells, width - used), 0)
            used += cells
            bar.append("█" * cells, style=PHASE_COLORS[phase])
        legend = Text()
        if shares["data_wait"] >= STARVED_SHARE:
            legend.append(f" STARVED: {shares['data_wait']:.0%} waiting for data ", style="bold white on red")
            legend.append(" ")
        for phase in PHASES:
            legend.append("■ ", style=PHASE_COLORS[phase])
            legend.append(f"{PHASE_LABELS[phase]} {shares[phase]:.0%}  ",
                          style="bold" if shares[phase] >= 0.25 else "")
        return Text("\n").join([bar, legend])
