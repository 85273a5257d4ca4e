"""Auto-tuning vs the best hand-set configuration: for starved variants of the example,
the last epoch's samples/s under `fastmon run --headless --apply auto` against a grid
search of num_workers run bare (no fastmon), as a ratio (goal >= 0.9). The dataset opens
at no cost here (`--open-ms 0`): the worker count is what is compared, not the
persistent workers fastmon adds where each epoch re-opens it.

    python benchmarks/autotune_vs_grid.py      # writes benchmarks/results/autotune.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
STARVED = HERE.parent / "examples" / "starved.py"
CASES = {  # name -> starved.py arguments
    "2 ms/sample, batch 32": ["--load-ms", "2", "--batch-size", "32", "--open-ms", "0"],
    "0.5 ms/sample, batch 64": ["--load-ms", "0.5", "--batch-size", "64", "--samples", "38400", "--open-ms", "0"],
    "4 ms/sample, batch 16": ["--load-ms", "4", "--batch-size", "16", "--samples", "4800", "--open-ms", "0"],
}
GRID = (0, 2, 4, 8, 16)
EPOCHS = "3"


def last_epoch_rate(stdout: str) -> float:
    rates = [float(line.rsplit(",", 1)[1].split()[0]) for line in stdout.splitlines() if line.startswith("epoch ")]
    return rates[-1]


def run(cmd: list, cwd: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd, env=env, timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return out.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(HERE / "results" / "autotune.md"))
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="fastmon-autotune-")
    lines = [f"# Auto-tuned vs best hand-set DataLoader — {datetime.date.today()} — {platform.machine()}, "
             f"{os.cpu_count()} cores", "",
             f"Last of {EPOCHS} epochs, samples/s. Grid: num_workers in {list(GRID)}, each run bare.", "",
             "| case | start (workers=0) | best grid (workers) | fastmon auto (workers) | auto / best |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, case in CASES.items():
        grid = {n: last_epoch_rate(run([sys.executable, STARVED, *case, "--epochs", EPOCHS, "--num-workers", n], work))
                for n in GRID}
        best = max(grid, key=grid.get)
        auto_out = run([sys.executable, "-m", "fastmon", "run", "--headless", "--apply", "auto", STARVED, *case,
                        "--epochs", EPOCHS], work)
        auto = last_epoch_rate(auto_out)
        report = run([sys.executable, "-m", "fastmon", "report", "--json"], work)
        import json

        applied = [a for a in json.loads(report)["applied"] if a["id"] == "dataloader.num_workers"]
        chosen = applied[0]["params"]["num_workers"] if applied else 0
        lines.append(f"| {name} | {grid[0]:,.0f} | {grid[best]:,.0f} ({best}) | {auto:,.0f} ({chosen}) | "
                     f"{auto / grid[best]:.2f} |")
        print(lines[-1], flush=True)
    lines += ["", "Reproduce: `python benchmarks/autotune_vs_grid.py`"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
