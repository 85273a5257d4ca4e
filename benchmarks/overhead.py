"""Probe overhead on the same CPU training loop (loop.py), four ways:

1. Interleaved runs: `python loop.py` and `fastmon run --headless loop.py`, alternately,
   median ratio of their mean step times. What a user sees, monitor included; but two
   processes seconds apart see different machine states (a few % on a shared VM). The
   first case runs with `fastmon run --every-step` too: the cost of timing every step;
   the DataLoader one as `python loop.py --attach` too: fastmon.attach() in the script.
2. In-process A/B: one `fastmon run` whose loop runs pairs of short segments, one with the
   probe suspended (bare torch, every patch and hook out) and one with it on, in random
   order, a few unclocked steps after each switch (its re-patching is a transient no real
   run has). Per pair, probed minus bare µs/step, after dropping pairs more than 10
   median absolute deviations from the median (a garbage collection or a stalled vCPU
   puts ±4 ms on a 20-step segment of 3 ms steps, both ways); the mean keeps what is
   rare but the probe's (a segment holding a timed step). Every step of the A/B also
   runs a reference kernel no probe hook touches (loop.py): the estimate is the pair
   difference where the kernel's two times were equal, the intercept of the difference
   regressed on the kernel's difference, which takes out the core's speed changing
   between the halves (the spread halves or better on a noisy VM). Its bias would be
   the slope times the kernel's own mean difference, shown: near zero, since nothing
   of the probe runs in the kernel. Bootstrap 95% intervals over pairs. The control
   runs the same pairs with the probe on in both halves: the method's own noise. The publisher
   thread ships the log whenever its round comes, in either half, so the pairs cannot see
   it: its CPU time per step is added (an upper bound on what it takes from training).

3. What the monitor process takes from the training: pairs of segments with the monitor
   stopped (SIGSTOP) and running, the probe on in both. The A/B above cannot see it (it
   runs in both halves); the interleaved runs can, among their other noise. loop.py trains
   on one thread; the ~3 ms case runs again on every core, where the monitor has none to
   itself. (The dashboard cannot be measured so: Textual repaints the whole screen on
   SIGCONT. `monitor_cost.py` compares whole runs.)

4. What one timed step costs, from a run's own step records (`fastmon run --headless
   loop.py`, many steps): the median wall time of the timed steps, of the untimed step
   before each (it arms the timing hooks), of the one after (it disarms them, and runs
   cold), against the median of the untimed steps far from any timed one. Their sum is
   what the probe's schedule (``fastmon.probe.sampling``) measures for itself in the run
   to space its timed steps; the table puts its last measure beside.

Then the probe's RSS over 100k steps. Before and after all of it, the machine's noise: the
robust sd of the pair differences of bare 20-step segments of the ~3 ms case (`loop.py
--noise-pairs`); what an A/B resolves depends on it more than on anything else.

    python benchmarks/overhead.py            # writes benchmarks/results/overhead.md
    python benchmarks/overhead.py --quick    # fewer repeats, for a smoke test
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from fastmon.common.phases import STEP_FIELDS
from fastmon.probe.sampling import TIME_ALL_FIRST
from fastmon.records import RunRecord

HERE = Path(__file__).resolve().parent
_STEP, _WALL, _TIMED = (STEP_FIELDS.index(field) for field in ("step", "wall", "timed"))
LOOP = HERE / "loop.py"
CASES = {  # name -> loop.py arguments
    "tiny MLP 8, batch 4, no DataLoader": ["--width", "8", "--batch", "4", "--no-loader", "--steps", "8000"],
    "MLP 64, batch 32, DataLoader": ["--width", "64", "--batch", "32", "--steps", "6000"],
    "MLP 420, batch 224, DataLoader": ["--width", "420", "--batch", "224", "--steps", "1500"],
    "MLP 64, batch 32, 2 workers, a Compose a sample": ["--width", "64", "--batch", "32", "--workers", "2",
                                                        "--steps", "3000"],
}
NOISE_CASE = ["--width", "420", "--batch", "224"]
NOISE_PAIRS = 300
EVERY_STEP_CASE = "tiny MLP 8, batch 4, no DataLoader"  # also run with --every-step: what full timing costs
ATTACH_CASE = "MLP 64, batch 32, DataLoader"  # also run as `python loop.py --attach`: fastmon.attach()
TIMED_STEP_RUN_STEPS = {name: 40_000 if "420" not in name else 20_000 for name in CASES}  # ~40 timed steps or more


def bench_env() -> dict:
    """This environment without the FASTMON_ variables of a run this one may sit in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}


def run(cmd: list[str], cwd: str) -> str:
    # Generous: a 4000-pair A/B of 3 ms steps runs ~20 min.
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=bench_env(), timeout=4 * 3600)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{out.stderr[-2000:]}")
    return out.stdout


def printed(stdout: str, name: str) -> float:
    """The value loop.py printed as ``NAME VALUE``."""
    return float(next(line.split()[1] for line in stdout.splitlines() if line.startswith(name + " ")))


def pairs(stdout: str, tag: str = "ab") -> list[tuple[float, ...]]:
    """The rows loop.py printed as ``TAG VALUE...``."""
    return [tuple(float(v) for v in line.split()[1:]) for line in stdout.splitlines() if line.startswith(tag + " ")]


OUTLIER_MADS = 10  # pairs further than this many median absolute deviations from the median are dropped


def inliers(differences: list[float]) -> list[float]:
    median = statistics.median(differences)
    spread = statistics.median(abs(d - median) for d in differences)
    return [d for d in differences if abs(d - median) <= OUTLIER_MADS * spread]


def robust_mean(differences: list[float]) -> float:
    return statistics.mean(inliers(differences))


def inlier_pairs(pairs_of_differences: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(step difference, kernel difference) pairs, without those where either is an outlier."""
    steps = set(inliers([d for d, _ in pairs_of_differences]))
    kernels = set(inliers([k for _, k in pairs_of_differences]))
    return [(d, k) for d, k in pairs_of_differences if d in steps and k in kernels]


def kernel_fit(pairs_of_differences: list[tuple[float, float]]):
    """The least-squares line through the (kernel difference, step difference) pairs."""
    kept = inlier_pairs(pairs_of_differences)
    return statistics.linear_regression([k for _, k in kept], [d for d, _ in kept])


def adjusted_mean(pairs_of_differences: list[tuple[float, float]]) -> float:
    """The step difference where the reference kernel's difference is zero."""
    return kernel_fit(pairs_of_differences).intercept


def ab_differences(stdout: str) -> list[tuple[float, float]]:
    """(probed minus bare µs/step, the same of the reference kernel) of each A/B pair."""
    return [(probed - bare, probed_kernel - bare_kernel) for bare, probed, bare_kernel, probed_kernel in pairs(stdout)]


def with_interval(estimate, differences: list[float], resamples: int = 1000) -> tuple[float, float, float]:
    """``estimate`` of the pair differences, and its bootstrap 95% interval over pairs."""
    rng = random.Random(0)
    boot = sorted(estimate(rng.choices(differences, k=len(differences))) for _ in range(resamples))
    return estimate(differences), boot[int(0.025 * resamples)], boot[int(0.975 * resamples)]


SECTIONS = ("runs", "ab", "monitor", "timed", "rss")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=11, help="interleaved bare/fastmon run pairs per case")
    parser.add_argument("--pairs", type=int, default=1000, help="in-process A/B segment pairs per case")
    parser.add_argument("--segment", type=int, default=20, help="clocked steps per A/B segment")
    parser.add_argument("--warm", type=int, default=5, help="unclocked steps after each A/B switch")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"which to run, of {','.join(SECTIONS)}")
    parser.add_argument("--rss-steps", type=int, default=100_000)
    parser.add_argument("--out", default=str(HERE / "results" / "overhead.md"))
    args = parser.parse_args()
    sections = args.sections.split(",")
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}: choose from {','.join(SECTIONS)}")
    if args.quick:
        args.repeats, args.pairs, args.rss_steps = 2, 40, 5_000
        TIMED_STEP_RUN_STEPS.update((name, 1_000) for name in CASES)
    if args.only:
        for name in [name for name in CASES if args.only not in name]:
            del CASES[name]
    work = tempfile.mkdtemp(prefix="fastmon-bench-")
    noise = [sys.executable, str(LOOP), *NOISE_CASE, "--noise-pairs", str(40 if args.quick else NOISE_PAIRS)]
    noise_before = run(noise, work)
    print(f"machine noise now: {printed(noise_before, 'noise_sd_us'):.0f} µs/step (robust sd of bare segment pair "
          f"differences; {printed(noise_before, 'noise_sd_adjusted_us'):.0f} after the kernel regression)", flush=True)
    watched = [sys.executable, "-m", "fastmon", "run", "--headless", str(LOOP)]
    lines = [f"# Probe overhead — {datetime.date.today()} — {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, Python {platform.python_version()}"]
    if "runs" in sections:
        lines += runs_section(watched, work, args.repeats)
    if "ab" in sections:
        lines += ab_section(watched, work, args.pairs, args.segment, args.warm)
    if "monitor" in sections:
        lines += monitor_section(watched, work, args.pairs, args.segment)
    if "timed" in sections:
        lines += timed_step_section(watched, work)
    if "rss" in sections:
        lines += rss_section(watched, work, args.rss_steps)
    noise_after = run(noise, work)
    lines[1:1] = ["", f"Machine noise (bare `loop.py {' '.join(NOISE_CASE)} --noise-pairs`, robust sd of "
                  f"the pair differences of 20-step segments): {printed(noise_before, 'noise_sd_us'):.0f} µs/step "
                  f"before, {printed(noise_after, 'noise_sd_us'):.0f} after; after the kernel regression "
                  f"{printed(noise_before, 'noise_sd_adjusted_us'):.0f} and "
                  f"{printed(noise_after, 'noise_sd_adjusted_us'):.0f}. "
                  "A quiet hour here reads 20-40 unadjusted."]
    lines += ["", f"Reproduce: `{shlex.join(['python', 'benchmarks/overhead.py', *sys.argv[1:]])}`"]
    print("\n".join(lines[-3:]))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")


def runs_section(watched: list[str], work: str, repeats: int) -> list[str]:
    lines = ["", "Interleaved runs: `python loop.py` vs `fastmon run --headless loop.py`, alternately; mean step "
             f"time of each run's timed steps; median over {repeats} pairs of runs.", "",
             "| case | bare µs/step | fastmon µs/step | added µs/step | median ratio |",
             "| --- | ---: | ---: | ---: | ---: |"]
    bare = [sys.executable, str(LOOP)]
    every_step = [sys.executable, "-m", "fastmon", "run", "--headless", "--every-step", str(LOOP)]
    runs = [(name, case, watched) for name, case in CASES.items()]
    if EVERY_STEP_CASE in CASES:
        runs.append((f"{EVERY_STEP_CASE}, `--every-step`", CASES[EVERY_STEP_CASE], every_step))
    if ATTACH_CASE in CASES:
        runs.append((f"{ATTACH_CASE}, `fastmon.attach()`", CASES[ATTACH_CASE] + ["--attach"], bare))
    for name, case, command in runs:
        bare_us, watched_us, ratios = [], [], []
        for _ in range(repeats):
            b = printed(run(bare + [a for a in case if a != "--attach"], work), "step_us")
            w = printed(run(command + case, work), "step_us")
            bare_us.append(b)
            watched_us.append(w)
            ratios.append(w / b)
        mb, mw = statistics.median(bare_us), statistics.median(watched_us)
        lines.append(f"| {name} | {mb:.1f} | {mw:.1f} | {mw - mb:+.1f} | {statistics.median(ratios):.3f} |")
        print(lines[-1], flush=True)
    return lines


def ab_section(watched: list[str], work: str, pair_count: int, segment: int, warm: int) -> list[str]:
    lines = ["", f"In-process A/B under `fastmon run --headless`: {pair_count} pairs of {segment}-step segments "
             f"({warm} to {2 * warm} unclocked steps after each switch), probe suspended (every patch "
             "and hook out) vs on, "
             "in random order; every step runs a reference kernel first (a matmul the size of the first layer's, "
             "no probe hook in it; its time is in bare µs/step). Pair difference = probed minus bare µs/step, "
             f"pairs more than {OUTLIER_MADS} median absolute deviations from the median dropped. Raw = their "
             "mean; adjusted = the difference where the kernel's times were equal (intercept of the difference "
             "regressed on the kernel's difference): the core's speed changing between halves taken out. "
             "Kernel = the kernel's own mean difference: what the probe does to code it does not touch (the "
             "adjustment's bias is slope x this). Control: the same pairs with the probe on in both halves, "
             "adjusted. Publisher = its thread's CPU time per step, which the pairs cannot see. Added = adjusted "
             "+ publisher; ratio = (bare + added) / bare. [bootstrap 95%]", "",
             "| case | bare µs/step | raw mean [95%] (pairs dropped) | adjusted [95%] (slope) | kernel [95%] | "
             "control, adjusted [95%] | publisher µs/step | added µs/step | ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, case in CASES.items():
        ab = ["--ab-pairs", str(pair_count), "--ab-segment", str(segment), "--ab-warm", str(warm)]
        measured_out = run(watched + case + ab, work)
        measured = ab_differences(measured_out)
        control = ab_differences(run(watched + case + ab + ["--ab-control"], work))
        bare_us = statistics.median(row[0] for row in pairs(measured_out))
        raw_mean, raw_low, raw_high = with_interval(robust_mean, [d for d, _ in measured])
        mean, low, high = with_interval(adjusted_mean, measured)
        k_mean, k_low, k_high = with_interval(robust_mean, [k for _, k in measured])
        c_mean, c_low, c_high = with_interval(adjusted_mean, control)
        publisher = printed(measured_out, "publisher_us_per_step")
        added = mean + publisher
        lines.append(f"| {name} | {bare_us:.1f} | {raw_mean:+.1f} [{raw_low:+.1f}, {raw_high:+.1f}] "
                     f"({len(measured) - len(inlier_pairs(measured))}) | {mean:+.1f} [{low:+.1f}, {high:+.1f}] "
                     f"({kernel_fit(measured).slope:.1f}) | {k_mean:+.2f} [{k_low:+.2f}, {k_high:+.2f}] | "
                     f"{c_mean:+.1f} [{c_low:+.1f}, {c_high:+.1f}] | {publisher:.1f} | {added:+.1f} | "
                     f"{(bare_us + added) / bare_us:.4f} |")
        print(lines[-1], flush=True)
    return lines


def rss_section(watched: list[str], work: str, steps: int) -> list[str]:
    every = max(steps // 10, 1)
    out = run(watched + ["--no-loader", "--steps", str(steps), "--warmup", "0", "--rss-every", str(every)], work)
    rss = [(int(s), int(r)) for _, s, r in (line.split() for line in out.splitlines() if line.startswith("rss"))]
    (first_step, first_rss), (last_step, last_rss) = rss[0], rss[-1]
    return ["", f"Probe process RSS over {steps:,} steps (MLP 64, under `fastmon run --headless`): "
            f"{first_rss / 2**20:.1f} MiB at step {first_step:,}, {last_rss / 2**20:.1f} MiB at step {last_step:,} "
            f"({(last_rss - first_rss) / 2**20:+.2f} MiB)."]


def monitor_section(watched: list[str], work: str, pair_count: int, segment: int) -> list[str]:
    lines = ["", f"What the monitor process takes from the training (`loop.py --monitor-pairs`): {pair_count} pairs of "
             f"{segment}-step segments, the monitor stopped (SIGSTOP) vs running, in random order, probe on in both. "
             "Everything the monitor does it does in the running halves (a stopped one catches up on SIGCONT), "
             "so its cost to a normal run's step is half their mean difference (outliers dropped as above).", "",
             "| case | stopped µs/step | mean difference [95%] (pairs dropped) | monitor's cost, µs a step |",
             "| --- | ---: | ---: | ---: |"]
    every_core = {f"{name}, torch on every core": CASES[name] + ["--threads", "0"] for name in CASES if "420" in name}
    for name, case in {**CASES, **every_core}.items():
        out = run(watched + case + ["--monitor-pairs", str(pair_count), "--ab-segment", str(segment)], work)
        measured = pairs(out, "monitor")  # (stopped, running)
        differences = [running - stopped for stopped, running in measured]
        mean, low, high = with_interval(robust_mean, differences)
        lines.append(f"| {name} | {statistics.median(s for s, _ in measured):.1f} | {mean:+.1f} [{low:+.1f}, {high:+.1f}] "
                     f"({len(differences) - len(inliers(differences))}) | {mean / 2:+.1f} |")
        print(lines[-1], flush=True)
    return lines


def timed_step_section(watched: list[str], work: str) -> list[str]:
    lines = ["", "What one timed step costs (`fastmon run --headless loop.py`, one run per case; median wall time "
             "of each kind of step minus that of the untimed steps at least 4 steps from a timed one):", "",
             "| case | timed steps | untimed µs | timed step | step before (arms) | step after (disarms) | "
             "one timed step, in all | the probe's own measure | at the run's sample, µs a step |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, case in CASES.items():
        folder = tempfile.mkdtemp(dir=work)
        steps = ["--steps", str(TIMED_STEP_RUN_STEPS[name])]
        run(watched + case + steps, folder)
        (record,) = Path(folder).glob("fastmon-runs/*/run.sqlite")
        run_record = RunRecord(record.parent)
        steps_recorded = run_record.steps(rank=0)
        said = run_record.facts().get("timing")  # the probe's last word on its price
        run_record.close()
        own = f"{said['timed_step_us']:.0f}, one in {said['one_in']:.0f}" if said else "-"
        rows = [(row[_STEP], row[_WALL], row[_TIMED]) for row in steps_recorded
                if row[_STEP] >= TIME_ALL_FIRST + 50]  # past the start's all-timed steps
        timed = {step for step, _, was_timed in rows if was_timed}
        walls: dict[str, list[float]] = {"timed": [], "before": [], "after": [], "far": []}
        for step, wall, _ in rows:
            kind = ("timed" if step in timed else "before" if step + 1 in timed else "after" if step - 1 in timed
                    else "far" if all(step + k not in timed for k in range(-4, 5)) else None)
            if kind:
                walls[kind].append(wall * 1e6)
        far = statistics.median(walls["far"])
        extra = {kind: statistics.median(walls[kind]) - far for kind in ("timed", "before", "after")}
        episode = sum(extra.values())
        share = len(timed) / len(rows)
        lines.append(f"| {name} | {len(timed)} of {len(rows)} | {far:.1f} | {extra['timed']:+.1f} | "
                     f"{extra['before']:+.1f} | {extra['after']:+.1f} | {episode:+.0f} | {own} | "
                     f"{episode * share:+.1f} |")
        print(lines[-1], flush=True)
    return lines


if __name__ == "__main__":
    main()
