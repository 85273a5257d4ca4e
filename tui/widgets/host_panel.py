"""The host (psutil): the trainer's and each DataLoader worker's CPU and memory, the
system's CPU per core and RAM, and over time: the training's RSS, the loss the script
printed, torch's allocator."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from fastmon.report import mib
from fastmon.tui.widgets.panel import Panel

BLOCKS = " ▁▂▃▄▅▆▇█"


def spark(values: list, width: int) -> str:
    """The last ``width`` values as bars from the lowest to the highest of them."""
    values = values[-width:]
    low, high = min(values), max(values)
    span = (high - low) or 1
    return "".join(BLOCKS[1 + round((v - low) / span * (len(BLOCKS) - 2))] for v in values)


class HostPanel(Panel, Static):
    panel_id = "host-panel"

    def signature(self, snap) -> object:
        return snap.host

    _snap = None  # the last one shown

    def on_resize(self) -> None:
        if self._snap is not None:
            self.show(self._snap)  # the sparklines follow the panel's width

    def show(self, snap) -> None:
        self._snap = snap
        host = snap.host
        if not host or "processes" not in host:
            self.update(Text("host: waiting for the first sample", style="dim"), layout=False)
            return
        text = Text()
        procs = host["processes"]
        trainers = [p for p in procs if p["role"] == "trainer"]
        workers = [p for p in procs if p["role"] == "worker"]
        for p in trainers:
            text.append(f"trainer {p['pid']}: CPU {p['cpu']:.0f}%  RSS {mib(p['rss'])}\n", style="bold")
        if workers:
            total = sum(w["cpu"] for w in workers)
            text.append(f"{len(workers)} workers: CPU {total:.0f}% total, RSS {mib(sum(w['rss'] for w in workers))}\n")
            text.append("  " + "  ".join(f"{w['pid']}:{w['cpu']:.0f}%" for w in workers[:8])
                        + (" …" if len(workers) > 8 else "") + "\n")
        else:
            text.append("no DataLoader workers\n", style="dim")
        cores = host.get("cpu_per_core", [])
        text.append(f"CPU {sum(cores) / max(len(cores), 1):.0f}% of {len(cores)} cores ")
        text.append("".join(BLOCKS[min(int(c / 100 * (len(BLOCKS) - 1) + 0.5), len(BLOCKS) - 1)] for c in cores),
                    style="green")
        text.append(f"\nRAM {mib(host.get('ram_used'))} of {mib(host.get('ram_total'))}")
        memory, width = snap.memory, max(min(self.content_size.width - 28, 60), 8)
        if memory.get("rss"):  # memory over time: a leak shows as a climb
            text.append("\nRSS, training  ")
            text.append(spark(memory["rss"], width), style="cyan")
            text.append(f" {mib(memory['rss'][-1])}")
        if snap.losses:  # as the script printed it: no value is read from the device
            text.append("\nloss, printed  ")
            text.append(spark(snap.losses, width), style="yellow")
            text.append(f" {snap.losses[-1]:.4g}")
        if any(memory.get("allocated") or ()):
            text.append("\ntorch allocated ")
            text.append(spark(memory["allocated"], width), style="magenta")
            text.append(f" {mib(memory['allocated'][-1])}")
        self.update(text, layout=False)  # its size is the CSS's, whatever the text


PANEL = HostPanel
