"""What the monitor process costs the training: the same ~3 ms CPU loop (loop.py, MLP 420)
run bare, under `fastmon run --headless`, and under `fastmon run` with the dashboard in a
160x48 pseudo-terminal, one after another in rotating order; per repeat, each mode's mean
step time over the bare run's; median over the repeats.

Twice: torch on one thread (a core to spare for the monitor), and on torch's default
(every core). In the second, the monitor's CPU comes out of the training's: a torch op
split over every core waits for its slowest thread, and a thread that loses its core to
the monitor for a time slice holds up the others, which spin meanwhile.

    python benchmarks/monitor_cost.py       # writes benchmarks/results/monitor_cost.md
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import os
import platform
import pty
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

from overhead import bench_env, printed, run

HERE = Path(__file__).resolve().parent
LOOP = [str(HERE / "loop.py"), "--width", "420", "--batch", "224", "--steps", "1500"]
MODES = ("bare", "headless", "dashboard")
THREADS = {"torch on 1 thread": "1", f"torch on every core ({os.cpu_count()})": "0"}


def in_terminal(command: list[str], cwd: str, cols: int = 160, rows: int = 48) -> int:
    """Runs ``command`` with a pseudo-terminal for stdin/stdout/stderr, reading (and
    dropping) what it draws so that it never blocks on a full terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=cwd,
                            env=dict(bench_env(), TERM="xterm-256color"), start_new_session=True)
    os.close(slave)
    try:
        while os.read(master, 1 << 16):
            pass
    except OSError:  # EIO: the terminal's last user is gone
        pass
    os.close(master)
    return proc.wait(timeout=60)


def run_mode(mode: str, threads: str) -> float:
    loop = LOOP + ["--threads", threads]
    with tempfile.TemporaryDirectory() as work:
        if mode == "bare":
            return printed(run([sys.executable, *loop], work), "step_us")
        if mode == "headless":
            return printed(run([sys.executable, "-m", "fastmon", "run", "--headless", *loop], work), "step_us")
        code = in_terminal([sys.executable, "-m", "fastmon", "run", "--exit-on-finish", *loop], work)
        if code != 0:
            raise RuntimeError(f"the dashboard run exited {code}")
        (record,) = Path(work).glob("fastmon-runs/*/run.sqlite")
        stdout = "".join(text for (text,) in sqlite3.connect(record).execute(
            "SELECT text FROM log WHERE stream = 'stdout' ORDER BY rowid"))
        return printed(stdout, "step_us")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(HERE / "results" / "monitor_cost.md"))
    args = parser.parse_args()
    lines = [f"# What the monitor costs the training — {datetime.date.today()} — {platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}", "",
             f"`loop.py {' '.join(LOOP[1:])}` bare, under `fastmon run --headless` and under the dashboard "
             f"(160x48 pseudo-terminal), rotating order, {args.repeats} repeats; median of each mode's mean "
             "step time, and the median over repeats of its ratio to that repeat's bare run.", "",
             "| torch threads | bare µs/step | headless µs/step | dashboard µs/step | headless / bare | dashboard / bare |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, threads in THREADS.items():
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            order = MODES[repeat % 3:] + MODES[:repeat % 3]
            for mode in order:
                times[mode].append(run_mode(mode, threads))
        ratio = {mode: statistics.median(t / b for t, b in zip(times[mode], times["bare"])) for mode in MODES}
        median = {mode: statistics.median(times[mode]) for mode in MODES}
        lines.append(f"| {name} | {median['bare']:.0f} | {median['headless']:.0f} | {median['dashboard']:.0f} | "
                     f"{ratio['headless']:.3f} | {ratio['dashboard']:.3f} |")
        print(lines[-1], flush=True)
    lines += ["", "Reproduce: `python benchmarks/monitor_cost.py`"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
