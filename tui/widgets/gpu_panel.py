"""GPUs (NVML): utilization and memory as bars and over time, power, clocks, temperature,
this run's memory beside torch's allocator view; past PLOT_MAX_GPUS, a row per GPU."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from fastmon.report import gib, gpu_run_line, known
from fastmon.session import SAMPLE_EVERY
from fastmon.tui.widgets.fit import fitted, wrapped_lines
from fastmon.tui.widgets.gpu_line import gpu_line
from fastmon.tui.widgets.panel import Panel


def meter(percent: float | None, width: int) -> Text:
    """A bar of ``width`` cells, filled to ``percent``: green, then yellow, red when near full."""
    if percent is None:
        return Text("▕" + "·" * width + "▏", style="dim")
    filled = round(min(max(percent, 0.0), 100.0) / 100 * width)
    style = "green" if percent < 70 else "yellow" if percent < 90 else "red"
    return Text.assemble("▕", ("█" * filled, style), ("░" * (width - filled), "dim"), "▏")


# Past this many GPUs their rows fill the panel: the plot would be a line or two high.
PLOT_MAX_GPUS = 3
# plotext takes tens of ms to draw a GPU's last minute (more with more GPUs): at the
# sampler's 2 Hz the panel took ~6% of a core (benchmarks/gpu_plot_cpu.py). The rows carry
# every sample; the plot, like nvitop's, at most once in this many seconds, and the latest
# samples always (a trailing draw).
PLOT_EVERY = 2.0


class GpuPanel(Panel, Vertical):
    panel_id = "gpu-panel"

    def signature(self, snap) -> object:
        return (snap.gpu, snap.gpu_note, snap.torch_memory)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows = 0  # the text's rows at the last update
        self._history: dict = {}  # the samples the plot is to show
        self._plotted_at = float("-inf")
        self._trailing_draw = None
        self._snap = None  # the last one shown

    def compose(self) -> ComposeResult:
        yield Static(id="gpu-text")
        yield PlotextPlot(id="gpu-plot")

    def on_resize(self) -> None:
        if self._snap is not None:
            self.show(self._snap)  # the bars follow the panel's width

    def show(self, snap) -> None:
        self._snap = snap
        text = self.query_one("#gpu-text", Static)
        plot = self.query_one("#gpu-plot", PlotextPlot)
        text.set_class(bool(snap.gpu), "rows")
        if not snap.gpu:
            plot.display = False
            text.update(Text(snap.gpu_note or "GPU: no samples yet", style="yellow"))
            self._rows = 0
            return
        plot.display = len(snap.gpu) <= PLOT_MAX_GPUS
        width = max(self.content_size.width, 20)
        lines = []
        for d in snap.gpu if len(snap.gpu) > PLOT_MAX_GPUS else ():  # a node's GPUs: a row each
            lines.append(gpu_line(d))
        for d in snap.gpu if len(snap.gpu) <= PLOT_MAX_GPUS else ():  # nvitop's two rows: the device, its load
            lines.append(fitted([(0, Text(f"GPU{d['index']} {d.get('name') or ''}", style="bold")),
                                 *sm_item(d),
                                 (3, Text(known(d.get("temp_c"), "°C"))),
                                 (2, Text(known(d.get("power_w"), " W", ".0f"))),
                                 (4, Text(f"SM {known(d.get('sm_clock'), ' MHz')}")),
                                 (1, Text(f"this run {gib(d.get('process_mem'))} GiB"))], width, gap="  ", lead=""))
            used, total = d.get("mem_used"), d.get("mem_total")
            util, memory = f" {known(d.get('util'), '%'):>4}", f" {gib(used)}/{gib(total)} GiB"
            bar = (width - len("util ") - len(util) - len("  mem ") - len(memory) - 4) // 2  # 4: the meters' ends
            if bar >= 3:
                lines.append(Text.assemble("util ", meter(d.get("util"), bar), f"{util}  mem ",
                                           meter(100 * used / total if used is not None and total else None, bar),
                                           memory))
            else:  # too narrow for the meters: the figures alone
                lines.append(Text(f"util{util}  mem{memory}"))
        for d in snap.gpu_run:  # the report's line, over as many lines as it takes
            lines += wrapped_lines(f"over the run: {gpu_run_line(d)}", width, style="dim")
        mem = snap.torch_memory
        if mem:
            lines += wrapped_lines(f"torch allocator: allocated {gib(mem['allocated'])} · reserved "
                                   f"{gib(mem['reserved'])} · peak {gib(mem['peak'])} GiB", width)
        text.update(Text("\n").join(lines), layout=len(lines) != self._rows)  # its height follows the GPU count
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
        colors = ("green", "magenta", "cyan", "yellow", "blue", "red")
        latest = []
        for index, hist in self._history.items():
            seconds = [-(len(hist["util"]) - 1 - i) * SAMPLE_EVERY for i in range(len(hist["util"]))]
            plt.plot(seconds, hist["util"], color=colors[(2 * index) % len(colors)])
            plt.plot(seconds, hist["mem"], color=colors[(2 * index + 1) % len(colors)])
            latest.append(f"GPU{index} util {hist['util'][-1]:.0f}% mem {hist['mem'][-1]:.0f}%")
        # the values in the title, not a legend over the lines; the unit with the axis
        plt.title(" · ".join(latest))
        plt.xlabel("seconds ago (util and memory, %)")
        plt.ylim(0, 100)
        plot.refresh()


PANEL = GpuPanel


def sm_item(d: dict) -> list[tuple[int, Text]]:
    """The device line's SM activity (NVML GPM: how much of the chip the kernels keep
    busy, where util says only that one ran): said n/a on a GPU without GPM."""
    if d.get("gpm") is False:
        return [(4, Text("SM active n/a (no GPM)", style="dim"))]
    if d.get("sm_active") is None:
        return []
    return [(1, Text(f"SM active {d['sm_active']:.0f}%", style="bold green"))]
