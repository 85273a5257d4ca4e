"""`fastmon report`, the replay's first screen and `fastmon export` on a long run's record:
seconds and peak memory.

Writes a synthetic record of N steps of one rank (~1 ms steps, the first 50 and then one
in ~200 timed, as the probe samples a fast loop) and runs each a few times, each in a
fresh process: its wall time and its peak RSS (from wait4). The replay runs the dashboard
headless (Textual's run_test, 160x48) until its first screen is drawn.

    python benchmarks/report_speed.py [--steps 1000000] [--runs 3] [--no-index] [--only report]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fastmon.common.phases import PHASES, STEP_FIELDS
from fastmon.records import RECORD_FILE, SCHEMA, write_column_index


def write_record(run_dir: Path, steps: int, index: bool = True) -> None:
    run_dir.mkdir(parents=True)
    db = sqlite3.connect(run_dir / RECORD_FILE)
    db.executescript(SCHEMA)
    rng = random.Random(1)
    t = 1.8e9

    def rows():
        nonlocal t
        for step in range(steps):
            wall = 0.0009 + rng.random() * 0.0002
            t += wall
            values = dict.fromkeys(STEP_FIELDS)
            values.update(rank=0, step=step, t_end=t, wall=wall, samples=64,
                          timed=int(step < 50 or rng.random() < 1 / 200))
            if values["timed"]:
                parts = [rng.random() for _ in PHASES]
                values.update({p: wall * x / sum(parts) for p, x in zip(PHASES, parts)})
                values.update(mem_alloc=0, mem_reserved=0, mem_peak=0, h2d_bytes=0, h2d_pageable_bytes=0,
                              sync_calls=0, eval_forwards=0, eval_grad_forwards=0, micro_batches=1)
            yield tuple(values[f] for f in STEP_FIELDS)

    db.executemany(f"INSERT INTO steps VALUES ({', '.join('?' * len(STEP_FIELDS))})", rows())
    for key, value in (("target", ["bench.py"]), ("exit_code", 0), ("started", 1.8e9)):
        db.execute("INSERT INTO meta VALUES (?, ?)", (key, json.dumps(value)))
    db.commit()
    if index:
        write_column_index(db)  # as the recorder does at a run's end
    db.close()


FIRST_SCREEN = """
import asyncio, sys
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import ReplaySource

async def first_screen():
    async with FastmonApp(ReplaySource(sys.argv[1])).run_test(size=(160, 48)) as pilot:
        await pilot.pause()

asyncio.run(first_screen())
"""


def measure(command: list[str]) -> tuple[float, float]:
    """Seconds and peak RSS in MiB of one run of ``command``."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(command)} failed")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-index", action="store_true",
                        help="a record without the column index (a run killed before its end): the rows scanned")
    parser.add_argument("--only", help="run only the commands whose name contains this (report, replay, export)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        write_record(run, args.steps, index=not args.no_index)
        print(f"{args.steps:,} steps, record {(run / RECORD_FILE).stat().st_size / 2**20:.0f} MiB")
        commands = {"fastmon report": [sys.executable, "-m", "fastmon", "report", str(run)],
                    "replay, first screen": [sys.executable, "-c", FIRST_SCREEN, str(run)],
                    "fastmon export": [sys.executable, "-m", "fastmon", "export", str(run), "-o",
                                       str(Path(tmp) / "trace.json")]}
        for _ in range(args.runs):
            for name, command in commands.items():
                if args.only and args.only not in name:
                    continue
                seconds, mib = measure(command)
                print(f"{name}: {seconds:.2f} s, peak RSS {mib:.0f} MiB")


if __name__ == "__main__":
    main()
