"""What fastmon adds to a short script's wall time, and where it goes: the whole command,
bare (`python S`) and under `fastmon run --headless S`, in interleaved pairs; beside it the
probe alone in the training process (`python -m fastmon.probe S`, no monitor) and the
command line's own start (`fastmon --version`). The rest is the monitor's start and end.

    python benchmarks/short_script_wall.py [--pairs 5] [--script PATH ...]

The default script is a 40-step manual SGD loop (no DataLoader, no optimizer); --script
adds any other, e.g. pytorch/examples' regression/main.py. Writes
benchmarks/results/short_script_wall.md.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results" / "short_script_wall.md"
READING = "## Reading these figures"
SGD = ("import torch\nw = torch.randn(8, 1, requires_grad=True)\nfor step in range(40):\n"
       "    (torch.randn(64, 8) @ w).pow(2).mean().backward()\n"
       "    with torch.no_grad():\n        w -= 0.01 * w.grad\n        w.grad.zero_()\n")


def wall(command: list, cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return time.perf_counter() - started


def measure(script: Path, pairs: int, cwd: str) -> dict:
    fastmon = [sys.executable, "-m", "fastmon"]
    kinds = {"bare": [sys.executable, script], "fastmon": [*fastmon, "run", "--headless", script],
             "probe alone": [sys.executable, "-m", "fastmon.probe", script], "command line": [*fastmon, "--version"]}
    times = {kind: [] for kind in kinds}
    for _ in range(pairs):  # interleaved: a machine that slows down slows every kind alike
        for kind, command in kinds.items():
            times[kind].append(wall(command, cwd))
    added = [f - b for f, b in zip(times["fastmon"], times["bare"])]
    probe = [p - b for p, b in zip(times["probe alone"], times["bare"])]
    return {"bare": statistics.median(times["bare"]), "fastmon": statistics.median(times["fastmon"]),
            "added": (statistics.median(added), min(added), max(added)),
            "probe": statistics.median(probe), "command line": statistics.median(times["command line"])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--script", action="append", type=Path, default=[])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        sgd = Path(cwd) / "manual_sgd.py"
        sgd.write_text(SGD)
        rows = [(name, measure(path.resolve(), args.pairs, cwd))
                for name, path in [("manual SGD, 40 steps", sgd), *((p.name, p) for p in args.script)]]
    lines = [f"# A short script's wall time, bare and under fastmon ({datetime.date.today()})", "",
             f"`python benchmarks/short_script_wall.py --pairs {args.pairs}"
             + "".join(f" --script {p}" for p in args.script) + f"` on {platform.machine()}, "
             f"torch {torch.__version__}, Python {platform.python_version()}; seconds, median of {args.pairs} "
             "interleaved runs of each (added: fastmon minus bare per pair, median [lowest, highest]).", "",
             "| script | bare | fastmon | added | of it: the probe alone | the command line's start |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, m in rows:
        median, low, high = m["added"]
        lines.append(f"| {name} | {m['bare']:.2f} | {m['fastmon']:.2f} | {median:+.2f} [{low:+.2f}, {high:+.2f}] | "
                     f"{m['probe']:+.2f} | {m['command line']:.2f} |")
    kept = RESULTS.read_text().partition(READING)[1:] if RESULTS.exists() else ("", "")
    RESULTS.write_text("\n".join(lines) + "\n\n" + "".join(kept))  # the reading below the table stays
    print("\n".join(lines))


if __name__ == "__main__":
    main()
