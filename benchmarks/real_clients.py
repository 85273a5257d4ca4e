"""Third-party training code (tests/clients/) bare and under `fastmon run --headless`,
interleaved: per pair, fastmon's figure over the bare one; the median ratio over the
pairs, with the lowest and highest. The figure is what each script reports of its own
training: the compiled model's median step time (after compiling), the others' training
seconds (the Trainer's train_runtime, a timer around each loop). Also whether fastmon's
step and sample counts equal the script's own, and the advice it gave.

    python benchmarks/real_clients.py [--pairs 5]   # writes benchmarks/results/real_clients.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLIENTS = HERE.parent / "tests" / "clients"
# client: (arguments, the figure the script prints of its own speed)
RUNS = {
    "compiled.py": (["--epochs", "30"], r"^median step ms ([\d.]+)"),
    "hf_trainer.py": ([], r"^seconds ([\d.]+)"),
    "accelerate_loop.py": ([], r"^seconds ([\d.]+)"),
    "lightning_datamodule.py": ([], r"^seconds ([\d.]+)"),
    "sequence_first.py": ([], r"^seconds ([\d.]+)"),
    "ema_validation.py": ([], r"^seconds ([\d.]+)"),
    "optimizerless.py": ([], r"^seconds ([\d.]+)"),
    "two_optimizers.py": ([], r"^seconds ([\d.]+)"),
}


def run(command: list[str], cwd: str, threads: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads)) if threads else None
    out = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    if out.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{out.stderr[-3000:]}")
    return out


def figure(pattern: str, stdout: str) -> float:
    return float(re.search(pattern, stdout, re.M)[1])


def one_client(name: str, pairs: int, cwd: str, threads: int | None) -> dict:
    arguments, pattern = RUNS[name]
    script = [str(CLIENTS / name), *arguments]
    ratios, report = [], None
    for pair in range(pairs):
        order = ("bare", "fastmon") if pair % 2 == 0 else ("fastmon", "bare")
        figures = {}
        for mode in order:
            command = [sys.executable, *script] if mode == "bare" else \
                [sys.executable, "-m", "fastmon", "run", "--headless", *script]
            out = run(command, cwd, threads)
            figures[mode] = figure(pattern, out.stdout)
            if mode == "fastmon":
                own = re.search(r"^steps (\d+) samples (\d+)", out.stdout, re.M)
                report = json.loads(run([sys.executable, "-m", "fastmon", "report", "--json"], cwd).stdout)
                exact = (report["steps"], report["samples"]) == (int(own[1]), int(own[2]))
        ratios.append(figures["fastmon"] / figures["bare"])
    return {"client": name, "steps": report["steps"], "samples": report["samples"], "exact": exact,
            "ratio": statistics.median(ratios), "low": min(ratios), "high": max(ratios),
            "advice": [a["id"] for a in report["advice"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=list(RUNS))
    parser.add_argument("--threads", type=int, help="torch's threads in both runs (OMP_NUM_THREADS): 1 leaves "
                                                    "a core to the monitor, as a GPU training does")
    parser.add_argument("--out", default=str(HERE / "results" / "real_clients.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        results = []
        for name in args.only:
            results.append(one_client(name, args.pairs, cwd, args.threads))
            print(json.dumps(results[-1]), flush=True)
    import torch

    lines = [f"# Real clients bare and under fastmon ({datetime.date.today()})", "",
             f"`python benchmarks/real_clients.py {' '.join(sys.argv[1:])}` on {platform.machine()}, "
             f"{os.cpu_count()} cores, torch {torch.__version__}, Python {platform.python_version()}. "
             "Ratio: fastmon's figure over the bare run's, per interleaved pair (the compiled model: its "
             "median step time after compiling; the others: their training seconds); median [lowest, highest].", "",
             "| client | steps | samples | counted exactly | time ratio | advice given |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        lines.append(f"| {r['client']} | {r['steps']} | {r['samples']} | {'yes' if r['exact'] else 'NO'} | "
                     f"{r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}] | {', '.join(r['advice']) or 'none'} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
