"""The host (psutil): the trainer's and each DataLoader worker's CPU and memory, the
system's CPU per core and RAM."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from fastmon.report import mib

BLOCKS = " ▁▂▃▄▅▆▇█"


class HostPanel(Static):
    def show(self, snap) -> None:
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
        self.update(text, layout=False)  # its size is the CSS's, whatever the text
