"""Probe overhead, measured two ways on the same CPU training loop (loop.py):

1. Interleaved runs: `python loop.py` and `fastmon run --headless loop.py`, alternately,
   median ratio of their mean step times. What a user sees, monitor included; but two
   processes seconds apart see different machine states (a few % on a shared VM). The
   first case runs with `fastmon run --every-step` too: the cost of timing every step.
2. In-process A/B: one `fastmon run` whose loop alternates segments with the probe
   suspended (bare torch, every patch and hook out) and on. The headline is the ratio
   of the summed segment times (a mean: the probe's occasional work, a housekeeping
   step or a flush, counts in full), with a bootstrap 95% interval over pairs. Beside it
   the median over pairs of the per-step difference: each segment's mean still holds its
   timed steps and flushes, but a segment that a neighbour slowed by a third (seen on the
   3 ms case here) no longer swings the result. The control runs the same alternation
   with the probe on in both halves: the method's own noise.

3. Where the probe's cost goes, on the MLP 64 DataLoader case: interleaved runs of bare
   python and of the probe alone (`python -m fastmon.probe`, no monitor process) with no
   step timed after the first 50, with exactly one in 10 timed, and with its own random
   sample. Never-timed minus bare is the untimed path's cost; (one-in-10 minus
   never-timed) x 10 is the cost of one timed step among untimed ones, the figure that
   ``fastmon.probe.sampling.TIMED_STEP_COST_NS`` stands for.

Then the probe's RSS over 100k steps.

    python benchmarks/overhead.py            # writes benchmarks/results/overhead.md
    python benchmarks/overhead.py --quick    # fewer repeats, for a smoke test
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOOP = HERE / "loop.py"
CASES = {  # name -> loop.py arguments
    "tiny MLP 8, batch 4, no DataLoader": ["--width", "8", "--batch", "4", "--no-loader", "--steps", "8000"],
    "MLP 64, batch 32, DataLoader": ["--width", "64", "--batch", "32", "--steps", "6000"],
    "MLP 420, batch 224, DataLoader": ["--width", "420", "--batch", "224", "--steps", "1500"],
}
EVERY_STEP_CASE = "tiny MLP 8, batch 4, no DataLoader"  # also run with --every-step: what full timing costs
SPLIT_CASE = "MLP 64, batch 32, DataLoader"  # where the cost goes: untimed path, one timed step
NEVER = 10**9  # --timed-every: no step timed after the first ones


def run(cmd: list[str], cwd: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def step_us(stdout: str) -> float:
    return float(next(line.split()[1] for line in stdout.splitlines() if line.startswith("step_us")))


def pairs(stdout: str) -> list[tuple[float, float]]:
    return [(float(b), float(p)) for _, b, p in (line.split() for line in stdout.splitlines() if line.startswith("ab "))]


def ratio_of_sums(pairs_: list[tuple[float, float]]) -> float:
    return sum(p for _, p in pairs_) / sum(b for b, _ in pairs_)


def with_interval(pairs_: list[tuple[float, float]], resamples: int = 2000) -> tuple[float, float, float]:
    """The ratio of summed probed to summed bare time, and its bootstrap 95% interval."""
    rng = random.Random(0)
    boot = sorted(ratio_of_sums(rng.choices(pairs_, k=len(pairs_))) for _ in range(resamples))
    return ratio_of_sums(pairs_), boot[int(0.025 * resamples)], boot[int(0.975 * resamples)]


def median_difference(pairs_: list[tuple[float, float]], resamples: int = 2000) -> tuple[float, float, float]:
    """The median over pairs of probed minus bare µs/step, and its bootstrap 95% interval:
    blind to the segments a noisy neighbour slowed by a third (seen on 3 ms steps here),
    which swing the sums by more than the probe's whole cost."""
    rng = random.Random(0)
    differences = [p - b for b, p in pairs_]
    boot = sorted(statistics.median(rng.choices(differences, k=len(differences))) for _ in range(resamples))
    return statistics.median(differences), boot[int(0.025 * resamples)], boot[int(0.975 * resamples)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=11, help="interleaved bare/fastmon run pairs per case")
    parser.add_argument("--pairs", type=int, default=60, help="in-process A/B segment pairs per case")
    parser.add_argument("--segment", type=int, default=400,
                        help="steps per A/B segment: long enough to hold ~10 timed steps of the probe's sample")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rss-steps", type=int, default=100_000)
    parser.add_argument("--out", default=str(HERE / "results" / "overhead.md"))
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.pairs, args.rss_steps = 2, 10, 5_000
    work = tempfile.mkdtemp(prefix="fastmon-bench-")
    bare = [sys.executable, str(LOOP)]
    watched = [sys.executable, "-m", "fastmon", "run", "--headless", str(LOOP)]
    lines = [f"# Probe overhead — {datetime.date.today()} — {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}", "",
             "Interleaved runs: `python loop.py` vs `fastmon run --headless loop.py`, alternately; mean step "
             f"time of each run's timed steps; median over {args.repeats} pairs of runs.", "",
             "| case | bare µs/step | fastmon µs/step | added µs/step | median ratio |",
             "| --- | ---: | ---: | ---: | ---: |"]
    every_step = [sys.executable, "-m", "fastmon", "run", "--headless", "--every-step", str(LOOP)]
    runs = [(name, case, watched) for name, case in CASES.items()]
    runs.append((f"{EVERY_STEP_CASE}, `--every-step`", CASES[EVERY_STEP_CASE], every_step))
    for name, case, command in runs:
        bare_us, watched_us, ratios = [], [], []
        for _ in range(args.repeats):
            b = step_us(run(bare + case, work))
            w = step_us(run(command + case, work))
            bare_us.append(b)
            watched_us.append(w)
            ratios.append(w / b)
        mb, mw = statistics.median(bare_us), statistics.median(watched_us)
        lines.append(f"| {name} | {mb:.1f} | {mw:.1f} | {mw - mb:+.1f} | {statistics.median(ratios):.3f} |")
        print(lines[-1], flush=True)

    lines += ["", f"In-process A/B under `fastmon run --headless`: {args.pairs} pairs of {args.segment}-step segments, probe "
              "suspended (every patch and hook out) vs on, alternating order. Ratio = summed probed time / "
              "summed bare time [bootstrap 95% interval over pairs]; added µs/step = the difference of the "
              "sums per step. Median difference = the median over pairs of probed minus bare µs/step "
              "[bootstrap 95%]. Control: the same alternation with the probe on in both halves.", "",
              "| case | bare µs/step | ratio [95%] | added µs/step | median difference µs/step [95%] | "
              "control ratio [95%] | control median difference [95%] |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, case in CASES.items():
        ab = ["--ab-pairs", str(args.pairs), "--ab-segment", str(args.segment)]
        measured = pairs(run(watched + case + ab, work))
        control = pairs(run(watched + case + ab + ["--ab-control"], work))
        ratio, low, high = with_interval(measured)
        c_ratio, c_low, c_high = with_interval(control)
        bare_mean = statistics.mean(b for b, _ in measured)
        added = statistics.mean(p - b for b, p in measured)
        median, m_low, m_high = median_difference(measured)
        c_median, cm_low, cm_high = median_difference(control)
        lines.append(f"| {name} | {bare_mean:.1f} | {ratio:.4f} [{low:.4f}, {high:.4f}] | {added:+.1f} | "
                     f"{median:+.1f} [{m_low:+.1f}, {m_high:+.1f}] | {c_ratio:.4f} [{c_low:.4f}, {c_high:.4f}] | "
                     f"{c_median:+.1f} [{cm_low:+.1f}, {cm_high:+.1f}] |")
        print(lines[-1], flush=True)

    lines += split_section(args.repeats, work)

    every = max(args.rss_steps // 10, 1)
    out = run(watched + ["--no-loader", "--steps", str(args.rss_steps), "--warmup", "0", "--rss-every", str(every)], work)
    rss = [(int(s), int(r)) for _, s, r in (line.split() for line in out.splitlines() if line.startswith("rss"))]
    first, last = rss[0], rss[-1]
    lines += ["", f"Probe process RSS over {args.rss_steps:,} steps (MLP 64, under `fastmon run --headless`): "
              f"{first[1] / 2**20:.1f} MiB at step {first[0]:,}, {last[1] / 2**20:.1f} MiB at step {last[0]:,} "
              f"({(last[1] - first[1]) / 2**20:+.2f} MiB).", "",
              "Reproduce: `python benchmarks/overhead.py`"]
    print("\n".join(lines[-3:]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


def split_section(repeats: int, work: str) -> list[str]:
    probe = [sys.executable, "-m", "fastmon.probe", str(LOOP)] + CASES[SPLIT_CASE]
    variants = {"bare": [sys.executable, str(LOOP)] + CASES[SPLIT_CASE], "never": probe + ["--timed-every", str(NEVER)],
                "one_in_10": probe + ["--timed-every", "10"], "sampled": probe}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, command in variants.items():
            times[name].append(step_us(run(command, work)))

    def added(name: str, base: str = "bare") -> float:
        return statistics.median(v - b for v, b in zip(times[name], times[base]))

    rows = [("probe, no step timed after the first 50 (the untimed path)", added("never")),
            ("probe, one step in 10 timed", added("one_in_10")),
            ("probe, its own random sample (as shipped)", added("sampled"))]
    lines = ["", f"Where the cost goes ({SPLIT_CASE}; `python -m fastmon.probe`, no monitor; interleaved, "
             f"median over {repeats} rounds of the per-round difference to bare, bare "
             f"{statistics.median(times['bare']):.1f} µs/step):", "",
             "| run | added µs/step |", "| --- | ---: |"]
    lines += [f"| {name} | {value:+.1f} |" for name, value in rows]
    lines += ["", f"One timed step among untimed ones costs about {added('one_in_10', 'never') * 10:.0f} µs "
              "((one in 10 − none) × 10)."]
    print("\n".join(lines), flush=True)
    return lines


if __name__ == "__main__":
    main()
