"""`fastmon compare --fail-if-slower 10` on a shared machine: with another process spinning
a core for the whole time, does the guard pass the same script run again, and fail the
script whose data loading was made 5x slower, naming data_wait?

    python benchmarks/compare_busy.py [--tries 3]   # writes the table of benchmarks/results/compare_busy.md

The script is examples/healthy.py with a collate_fn that takes 3 ms a batch (loading that
is a small part of a ~25-40 ms step); the regression makes it 15 ms, as a heavier
augmentation would. Each pair is compared against one baseline run, as a CI job would.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPIN = "while True:\n    pass\n"
LOADER = "loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,"
SLOW = ("loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,\n"
        "                        collate_fn=lambda batch: (time.sleep({s}), torch.utils.data.default_collate(batch))[1],")


def script(load_s: float) -> str:
    text = (ROOT / "examples" / "healthy.py").read_text().replace("import argparse\n", "import argparse\nimport time\n")
    return text.replace(LOADER, SLOW.format(s=load_s))


def fastmon(*args, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
    return subprocess.run([sys.executable, "-m", "fastmon", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=env)


def run(folder: Path, load_s: float) -> Path:
    (folder / "train.py").write_text(script(load_s))
    done = fastmon("run", "--headless", "train.py", "--epochs", "4", cwd=folder)
    assert done.returncode == 0, done.stderr
    return sorted((folder / "fastmon-runs").glob("*"))[-1]


def judged(folder: Path, a: Path, b: Path) -> tuple[int, dict]:
    guard = fastmon("compare", a, b, "--fail-if-slower", "10", cwd=folder)
    result = json.loads(fastmon("compare", a, b, "--json", cwd=folder).stdout)
    return guard.returncode, result


def row(kind: str, code: int, result: dict) -> str:
    why = result.get("explained_by") or {}
    moved = ", ".join(f"{c['phase']} {c['ms_per_step']:+.1f} ms" for c in result.get("phases_moved") or []) or "none"
    interval = result.get("speedup_interval") or [0, 0]
    return (f"| {kind} | {code} | {result['verdict']} {result['speedup']:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}] "
            f"| {why.get('phase', '—')} | {moved} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=3)
    args = parser.parse_args()
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            baseline = run(folder, 0.003)
            print("| B is | exit | verdict | explained by | phases beyond their noise |\n| --- | ---: | --- | --- | --- |")
            for _ in range(args.tries):
                print(row("the same script", *judged(folder, baseline, run(folder, 0.003))), flush=True)
            for _ in range(args.tries):
                print(row("loading 5x slower", *judged(folder, baseline, run(folder, 0.015))), flush=True)
    finally:
        spinner.kill()


if __name__ == "__main__":
    main()
