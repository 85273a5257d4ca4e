"""GPUs (NVML): utilization and memory over time, power, clocks, temperature, this
process's memory beside torch's allocator view. Without a GPU: one line saying why."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from fastmon.report import gpu_run_line, known


def gib(n) -> str:
    return "n/a" if n is None else f"{n / 2**30:.1f}"


# Past this many GPUs their rows fill the panel: the plot would be a line or two high.
PLOT_MAX_GPUS = 3
# plotext takes tens of ms to draw a GPU's last minute (more with more GPUs): at the
# sampler's 2 Hz the panel took ~6% of a core (benchmarks/gpu_plot_cpu.py). The rows carry
# every sample; the plot, like nvitop's, at most once in this many seconds, and the latest
# samples always (a trailing draw).
PLOT_EVERY = 2.0


class GpuPanel(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows = 0  # the text's rows at the last update
        self._history: dict = {}  # the samples the plot is to show
        self._plotted_at = float("-inf")
        self._trailing_draw = None

    def compose(self) -> ComposeResult:
        yield Static(id="gpu-text")
        yield PlotextPlot(id="gpu-plot")

    def show(self, snap) -> None:
        text = self.query_one("#gpu-text", Static)
        plot = self.query_one("#gpu-plot", PlotextPlot)
        text.set_class(bool(snap.gpu), "rows")
        if not snap.gpu:
            plot.display = False
            text.update(Text(snap.gpu_note or "GPU: no samples yet", style="yellow"))
            self._rows = 0
            return
        plot.display = len(snap.gpu) <= PLOT_MAX_GPUS
        lines = []
        for d in snap.gpu:  # one row each, what matters first: a narrow panel cuts the end
            lines.append(
                f"GPU{d['index']} util {known(d.get('util'), '%')}  mem {gib(d.get('mem_used'))}/{gib(d.get('mem_total'))} GiB  "
                f"this run {gib(d.get('process_mem'))} GiB  {known(d.get('power_w'), ' W', '.0f')}  "
                f"SM {known(d.get('sm_clock'), ' MHz')}  {known(d.get('temp_c'), '°C')}  {d.get('name') or ''}")
        lines += [f"over the run: {gpu_run_line(d)}" for d in snap.gpu_run]  # the report's line
        mem = snap.torch_memory
        if mem:
            lines.append(f"torch allocator: allocated {gib(mem['allocated'])} · reserved {gib(mem['reserved'])} · "
                         f"peak {gib(mem['peak'])} GiB")
        text.update("\n".join(lines), layout=len(lines) != self._rows)  # its height follows the GPU count
        self._rows = len(lines)
        if not plot.display:
            return
        self._history = snap.gpu_history
        wait = self._plotted_at + PLOT_EVERY - time.monotonic()
        if wait <= 0:
            self._plot()
        elif self._trailing_draw is None:
            self._trailing_draw = self.set_timer(wait, self._plot)

    def _plot(self) -> None:
        self._trailing_draw = None
        self._plotted_at = time.monotonic()
        plot = self.query_one("#gpu-plot", PlotextPlot)
        plt = plot.plt
        plt.clear_figure()
        plt.title("GPU utilization and memory, %")
        for index, hist in self._history.items():
            plt.plot(hist["util"], label=f"util {index} {hist['util'][-1]:.0f}%", color="green")
            plt.plot(hist["mem"], label=f"mem {index} {hist['mem'][-1]:.0f}%", color="magenta")
        plt.ylim(0, 100)
        plot.refresh()
