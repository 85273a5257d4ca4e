"""What a scrape of /metrics costs the monitor: its process's CPU over a window of
scrapes as fast as one client can make them, less its CPU over an equal window with
none, interleaved (none, flood, none, flood ...), over a real `fastmon run --headless
--log-to prometheus` of a paced training loop.

    python benchmarks/scrape_flood.py       # writes benchmarks/results/scrape_flood.md
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
SERVED = re.compile(r"metrics for Prometheus at http://[^:]+:(\d+)/metrics")


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--window", type=float, default=4.0)
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    seconds = args.window * args.pairs * 2 + 30
    with tempfile.TemporaryDirectory() as runs:
        proc = subprocess.Popen([sys.executable, "-m", "fastmon", "run", "--headless", "--log-to", "prometheus",
                                 "--metrics-port", "0", "--runs-dir", runs, str(HERE / "paced_loop.py"), "--rate",
                                 "200", "--seconds", str(seconds)], stderr=subprocess.PIPE, text=True)
        for line in proc.stderr:
            found = SERVED.search(line)
            if found:
                break
        url = f"http://127.0.0.1:{found[1]}/metrics"
        monitor = psutil.Process(proc.pid)
        time.sleep(10)  # the training started and stepping
        quiet, flood, scrapes = [], [], []
        for _ in range(args.pairs):
            before = cpu(monitor)
            time.sleep(args.window)
            quiet.append(cpu(monitor) - before)
            before, end, count = cpu(monitor), time.monotonic() + args.window, 0
            while time.monotonic() < end:
                urllib.request.urlopen(url, timeout=10).read()
                count += 1
            flood.append(cpu(monitor) - before)
            scrapes.append(count)
        proc.terminate()
        proc.wait(timeout=60)
    per_scrape = [(f - q) / n * 1000 for f, q, n in zip(flood, quiet, scrapes)]
    lines = [f"# /metrics under a scrape flood ({datetime.date.today()}, {platform.node()}, "
             f"{psutil.cpu_count()} cores)", "",
             "Command: `python benchmarks/scrape_flood.py` — a real `fastmon run --headless --log-to prometheus` "
             "of benchmarks/paced_loop.py at 200 steps/s; windows of "
             f"{args.window:g} s, without scrapes and with one client scraping as fast as it can, interleaved.", "",
             "| pair | scrapes/s | monitor CPU, quiet (s) | monitor CPU, flood (s) | extra CPU per scrape (ms) |",
             "|---|---|---|---|---|"]
    for i, (q, f, n, p) in enumerate(zip(quiet, flood, scrapes, per_scrape), 1):
        lines.append(f"| {i} | {n / args.window:.0f} | {q:.3f} | {f:.3f} | {p:.3f} |")
    lines += ["", f"Median extra CPU per scrape: **{statistics.median(per_scrape):.3f} ms** "
              f"(goal ≤ 1 ms; /metrics is rendered at most once a second and served from that)."]
    text = "\n".join(lines) + "\n"
    (HERE / "results" / "scrape_flood.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
