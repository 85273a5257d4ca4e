"""What the dashboard's GPU plot costs: CPU of a GPU panel fed NVML-shaped samples at the
session's rate (`SAMPLE_EVERY`, 2 Hz), with the plot drawn on every sample against drawn
at its pace (`PLOT_EVERY`), alternately, for 1 and 3 GPUs (past `PLOT_MAX_GPUS` there is
no plot). No GPU is needed: the samples are made up, plotext's work is the same.

    python benchmarks/gpu_plot_cpu.py        # writes benchmarks/results/gpu_plot_cpu.md

The panels row runs alone under `App.run_test` (Textual's headless driver: the compositor
runs, only the bytes to a terminal are skipped) 96 columns wide, as in a 160x48 dashboard:
the GPU panel 48x12, its plot 46x8.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
from textual.app import App, ComposeResult
from textual.containers import Horizontal

import fastmon.tui.widgets.gpu_panel as gpu_panel
from fastmon.session import SAMPLE_EVERY
from fastmon.tui.widgets.gpu_panel import GpuPanel
from fastmon.tui.widgets.host_panel import HostPanel

HERE = Path(__file__).resolve().parent
HISTORY = 120  # samples the snapshot keeps per GPU


class PanelApp(App):
    CSS_PATH = HERE.parent / "tui" / "fastmon.tcss"

    def compose(self) -> ComposeResult:
        with Horizontal(id="panels"):
            yield GpuPanel(id="gpu-panel")
            yield HostPanel(id="host-panel")


def samples(count: int) -> SimpleNamespace:
    gpus = [{"index": i, "name": "NVIDIA H200", "util": random.randint(0, 100), "mem_used": 20 * 2**30,
             "mem_total": 141 * 2**30, "power_w": 300.0, "sm_clock": 1980, "temp_c": 50,
             "process_mem": 18 * 2**30} for i in range(count)]
    history = {i: {"util": [random.uniform(0, 100) for _ in range(HISTORY)],
                   "mem": [random.uniform(0, 100) for _ in range(HISTORY)]} for i in range(count)}
    return SimpleNamespace(gpu=gpus, gpu_note="", gpu_history=history, torch_memory=None)


async def panel_cpu(count: int, plot_every: float, seconds: float) -> float:
    gpu_panel.PLOT_EVERY = plot_every
    app = PanelApp()
    async with app.run_test(size=(96, 30)) as pilot:
        panel = app.query_one(GpuPanel)
        await pilot.pause(1.0)
        times = psutil.Process().cpu_times()
        cpu0, wall0 = times.user + times.system, time.monotonic()
        while time.monotonic() - wall0 < seconds:
            panel.show(samples(count))
            await pilot.pause(SAMPLE_EVERY)
        times = psutil.Process().cpu_times()
        cpu1, wall1 = times.user + times.system, time.monotonic()
    return 100 * (cpu1 - cpu0) / (wall1 - wall0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results" / "gpu_plot_cpu.md"))
    args = parser.parse_args()
    paced = gpu_panel.PLOT_EVERY
    results: dict = {}
    for _ in range(args.rounds):
        for count in (1, 3):
            for plot_every in (0.0, paced):
                cpu = asyncio.run(panel_cpu(count, plot_every, args.seconds))
                results.setdefault((count, plot_every), []).append(cpu)
    lines = [
        f"# GPU plot cost — {datetime.date.today()} — {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}", "",
        f"CPU of a process running only the dashboard's GPU and host panels (48x12 each), fed a sample every {SAMPLE_EVERY:g} s, as % of one core "
        f"({args.rounds} rounds of {args.seconds:g} s, the two modes alternating; the idle app's own cost included).",
        "", f"| GPUs | plot on every sample | plot at most every {paced:g} s |", "| ---: | ---: | ---: |",
    ]
    for count in (1, 3):
        lines.append(f"| {count} | " + " | ".join(
            ", ".join(f"{cpu:.1f}%" for cpu in results[(count, plot_every)]) for plot_every in (0.0, paced)) + " |")
    lines += ["", f"Reproduce: `python benchmarks/gpu_plot_cpu.py --seconds {args.seconds:g} --rounds {args.rounds}`"]
    print("\n".join(lines))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
