"""GPUs (NVML): utilization and memory over time, power, clocks, temperature, this
process's memory beside torch's allocator view. Without a GPU: one line saying why."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot


def gib(n) -> str:
    return f"{(n or 0) / 2**30:.1f}"


class GpuPanel(Vertical):
    def compose(self) -> ComposeResult:
        yield Static(id="gpu-text")
        yield PlotextPlot(id="gpu-plot")

    def show(self, snap) -> None:
        text = self.query_one("#gpu-text", Static)
        plot = self.query_one("#gpu-plot", PlotextPlot)
        if not snap.gpu:
            plot.display = False
            text.update(Text(snap.gpu_note or "GPU: no samples yet", style="yellow"), layout=False)
            return
        plot.display = True
        lines = []
        for d in snap.gpu:
            lines.append(
                f"GPU{d['index']} {d.get('name') or ''}  util {d.get('util')}%  mem {gib(d.get('mem_used'))}/"
                f"{gib(d.get('mem_total'))} GiB  {d.get('power_w') or 0:.0f} W  SM {d.get('sm_clock')} MHz  "
                f"{d.get('temp_c')}°C  this run {gib(d.get('process_mem'))} GiB")
        mem = snap.torch_memory
        if mem:
            lines.append(f"torch allocator: allocated {gib(mem['allocated'])} · reserved {gib(mem['reserved'])} · "
                         f"peak {gib(mem['peak'])} GiB")
        text.update("\n".join(lines), layout=False)
        plt = plot.plt
        plt.clear_figure()
        plt.title("GPU utilization and memory, %")
        for index, hist in snap.gpu_history.items():
            plt.plot(hist["util"], label=f"util {index}", color="green")
            plt.plot(hist["mem"], label=f"mem {index}", color="magenta")
        plt.ylim(0, 100)
        plot.refresh()
