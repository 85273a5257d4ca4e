"""One line per GPU — utilization, memory, power, temperature — where the GPU panel has
no room (a narrow or short terminal); the reason for no GPU, in one dim line, elsewhere."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from fastmon.report import known
from fastmon.tui.widgets.panel import Panel


def gpu_line(d: dict) -> Text:
    used, total = d.get("mem_used"), d.get("mem_total")
    memory = f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB" if used is not None and total else "n/a"
    text = Text(f"GPU{d['index']} ", style="bold")
    text.append(f"util {known(d.get('util'), '%')}", style="bold green")
    if d.get("sm_active") is not None:
        text.append(f" · SM active {d['sm_active']:.0f}%", style="bold green")
    text.append(f" · mem {memory} · {known(d.get('power_w'), ' W', '.0f')} · {known(d.get('temp_c'), '°C')}")
    return text


def gpus_line(gpus: list[dict]) -> Text:
    """Many GPUs in one line: the spread of their utilization and the fullest memory."""
    utils = [d["util"] for d in gpus if d.get("util") is not None]
    fullest = max((d for d in gpus if d.get("mem_total")), default=None,
                  key=lambda d: (d.get("mem_used") or 0) / d["mem_total"])
    text = Text(f"{len(gpus)} GPUs ", style="bold")
    if utils:
        text.append(f"util {sum(utils) / len(utils):.0f}% mean, {min(utils)}-{max(utils)}%", style="bold green")
    if fullest is not None:
        text.append(f" · fullest GPU{fullest['index']} {(fullest.get('mem_used') or 0) / 2**30:.1f}/"
                    f"{fullest['mem_total'] / 2**30:.0f} GiB")
    return text


class GpuLine(Panel, Static):
    panel_id = "gpu-line"

    def signature(self, snap) -> object:
        return (snap.gpu, snap.gpu_note, snap.torch_memory)

    def show(self, snap) -> None:
        if snap.gpu:
            self.update(Text("\n").join(map(gpu_line, snap.gpu)) if len(snap.gpu) <= 2 else gpus_line(snap.gpu))
        else:
            self.update(Text(snap.gpu_note or "GPU: no samples yet", style="dim"))


PANEL = GpuLine
