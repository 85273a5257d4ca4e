"""Probe overhead: the same CPU training loop bare (`python loop.py`) and watched
(`fastmon run --headless loop.py`), interleaved, median ratio of the mean step time.
Then the probe's RSS over 100k steps.

    python benchmarks/overhead.py            # writes benchmarks/results/overhead.md
    python benchmarks/overhead.py --quick    # fewer repeats, for a smoke test
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOOP = HERE / "loop.py"
CASES = {  # name -> loop.py arguments
    "~0.3 ms step (MLP 64, batch 32, DataLoader)": ["--width", "64", "--batch", "32", "--steps", "3000"],
    "~3 ms step (MLP 640, batch 192, DataLoader)": ["--width", "640", "--batch", "192", "--steps", "600"],
}


def run(cmd: list[str], cwd: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def step_us(stdout: str) -> float:
    return float(next(line.split()[1] for line in stdout.splitlines() if line.startswith("step_us")))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rss-steps", type=int, default=100_000)
    parser.add_argument("--out", default=str(HERE / "results" / "overhead.md"))
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.rss_steps = 2, 5_000
    work = tempfile.mkdtemp(prefix="fastmon-bench-")
    bare = [sys.executable, str(LOOP)]
    watched = [sys.executable, "-m", "fastmon", "run", "--headless", str(LOOP)]
    lines = [f"# Probe overhead — {datetime.date.today()} — {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}", "",
             "Same script, bare vs under `fastmon run --headless`, runs interleaved; mean step time of the "
             "timed steps in each run; median over runs.", "",
             "| case | bare µs/step | fastmon µs/step | added µs/step | median ratio |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, case in CASES.items():
        bare_us, watched_us, ratios = [], [], []
        for _ in range(args.repeats):
            b = step_us(run(bare + case, work))
            w = step_us(run(watched + case, work))
            bare_us.append(b)
            watched_us.append(w)
            ratios.append(w / b)
        mb, mw = statistics.median(bare_us), statistics.median(watched_us)
        lines.append(f"| {name} | {mb:.1f} | {mw:.1f} | {mw - mb:+.1f} | {statistics.median(ratios):.3f} |")
        print(lines[-1], flush=True)
    every = max(args.rss_steps // 10, 1)
    out = run(watched + ["--no-loader", "--steps", str(args.rss_steps), "--warmup", "0", "--rss-every", str(every)], work)
    rss = [(int(s), int(r)) for _, s, r in (line.split() for line in out.splitlines() if line.startswith("rss"))]
    first, last = rss[0], rss[-1]
    lines += ["", f"Probe process RSS over {args.rss_steps:,} steps (tiny MLP, under `fastmon run --headless`): "
              f"{first[1] / 2**20:.1f} MiB at step {first[0]:,}, {last[1] / 2**20:.1f} MiB at step {last[0]:,} "
              f"({(last[1] - first[1]) / 2**20:+.2f} MiB).", "",
              "Reproduce: `python benchmarks/overhead.py`"]
    print("\n".join(lines[-4:]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
