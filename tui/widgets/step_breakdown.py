"""Where the step goes: a stacked bar per group of steps, over time."""

from __future__ import annotations

from textual_plotext import PlotextPlot

from fastmon.phases import PHASES
from fastmon.tui.colors import PLOT_COLORS


class StepBreakdown(PlotextPlot):
    def show(self, snap) -> None:
        plt = self.plt
        plt.clear_figure()
        plt.title(f"Where the step goes (ms per step, {snap.bucket_steps} step(s) per bar)")
        if snap.buckets:
            first = snap.steps - len(snap.buckets) * snap.bucket_steps
            x = [max(first + i * snap.bucket_steps, 0) for i in range(len(snap.buckets))]
            series = [[bucket[p] for bucket in snap.buckets] for p in PHASES]
            # No legend inside the plot (it hides bars): the shares bar below is the legend.
            plt.stacked_bar(x, series, color=[PLOT_COLORS[p] for p in PHASES], width=0.9)
            # Explicit ticks: plotext's own choice for bar charts varies from run to run.
            every = max(len(x) // 6, 1)
            plt.xticks(x[::every], [str(v) for v in x[::every]])
            plt.xlabel("step")
        self.refresh()
