"""The monitor's own cost: CPU of the monitor process (dashboard included) while a
training child runs at 1,000 steps/s, the dashboard's redraw rate, and how fast it
answers a key at 2,000 steps/s.

    python benchmarks/monitor_cpu.py        # writes benchmarks/results/monitor_cpu.md

The dashboard runs as `App.run_test` (Textual's headless driver: the whole compositor
runs, only the bytes to a terminal are skipped), in this process, over a real Session.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import psutil

from fastmon.session import RunOptions, Session
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import LiveSource

HERE = Path(__file__).resolve().parent
WARMUP_S = 4.0


def cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


async def dashboard_run(rate: float, seconds: float, runs_dir: str) -> dict:
    options = RunOptions(target=[str(HERE / "paced_loop.py"), "--rate", str(rate), "--seconds", str(seconds)],
                         runs_dir=runs_dir)
    session = Session(options)
    session.start()
    app = FastmonApp(LiveSource(session), session=session)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(WARMUP_S)
        cpu0, wall0, redraws0 = cpu_seconds(), time.monotonic(), app.redraws
        steps0 = session.view.rank(0).steps
        latencies = []
        while time.monotonic() - wall0 < seconds - WARMUP_S - 2:
            await pilot.pause(1.0)
            pressed = time.monotonic()
            await pilot.press("p")
            await pilot.press("p")
            latencies.append((time.monotonic() - pressed) / 2)
        cpu1, wall1, redraws1 = cpu_seconds(), time.monotonic(), app.redraws
        steps1 = session.view.rank(0).steps
        await pilot.press("q")
        if session.view.status == "running":
            await pilot.press("s")
    session.terminate()
    session.wait()
    wall = wall1 - wall0
    return {"rate": (steps1 - steps0) / wall, "cpu": (cpu1 - cpu0) / wall * 100,
            "redraw_hz": (redraws1 - redraws0) / wall, "key_ms": sorted(latencies)[len(latencies) // 2] * 1e3}


def headless_run(rate: float, seconds: float, runs_dir: str) -> dict:
    options = RunOptions(target=[str(HERE / "paced_loop.py"), "--rate", str(rate), "--seconds", str(seconds)],
                         runs_dir=runs_dir)
    session = Session(options)
    session.start()
    time.sleep(WARMUP_S)
    cpu0, wall0 = cpu_seconds(), time.monotonic()
    steps0 = session.view.rank(0).steps
    time.sleep(seconds - WARMUP_S - 2)
    cpu1, wall1 = cpu_seconds(), time.monotonic()
    steps1 = session.view.rank(0).steps
    session.wait()
    wall = wall1 - wall0
    return {"rate": (steps1 - steps0) / wall, "cpu": (cpu1 - cpu0) / wall * 100}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--out", default=str(HERE / "results" / "monitor_cpu.md"))
    args = parser.parse_args()
    runs_dir = tempfile.mkdtemp(prefix="fastmon-monitor-bench-")
    headless = headless_run(1000, args.seconds, runs_dir)
    dash = asyncio.run(dashboard_run(1000, args.seconds, runs_dir))
    fast = asyncio.run(dashboard_run(2000, args.seconds, runs_dir))
    lines = [
        f"# Monitor cost — {datetime.date.today()} — {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}", "",
        "CPU of the monitor process (channel, recorder, samplers, advisor, and the dashboard when on) "
        "over the run after a warm-up, as % of one core.", "",
        "| mode | child steps/s | monitor CPU | redraws/s | key answered in |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| headless | {headless['rate']:,.0f} | {headless['cpu']:.1f}% | — | — |",
        f"| dashboard 160x48 | {dash['rate']:,.0f} | {dash['cpu']:.1f}% | {dash['redraw_hz']:.1f} | "
        f"{dash['key_ms']:.0f} ms |",
        f"| dashboard 160x48 | {fast['rate']:,.0f} | {fast['cpu']:.1f}% | {fast['redraw_hz']:.1f} | "
        f"{fast['key_ms']:.0f} ms |",
        "", f"Reproduce: `python benchmarks/monitor_cpu.py --seconds {args.seconds:g}`",
    ]
    print("\n".join(lines))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
