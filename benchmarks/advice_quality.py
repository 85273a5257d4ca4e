"""The advisor's precision and recall on a corpus: healthy scripts of different kinds
(any problem advised on them is a false alarm) and every seed mistake a CPU can show,
planted once each in an otherwise healthy loop (``advice_corpus/planted.py``). Then, for
each planted problem with a live change, the advisor's predicted gain against the one its
experiment measured (``--apply auto``).

    python benchmarks/advice_quality.py   # prints the tables of benchmarks/results/advice_quality.md

Counted as problems: advice of kind "problem" (suggestions are counted apart). A planted
problem is found when its rule fires, with the file:line of the cause where it is in code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fastmon.common.verdicts import params_text

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "advice_corpus"
CLIENTS = ROOT / "tests" / "clients"
PLANTED = CORPUS / "planted.py"

HEALTHY = {
    "in-memory MLP (planted.py --mistake none)": [PLANTED, "--mistake", "none"],
    "in-memory data, EMA, validation": [CLIENTS / "ema_validation.py"],
    "conv net": [CORPUS / "healthy_convnet.py"],
    "transformer (sequence first)": [CLIENTS / "sequence_first.py"],
    "compiled transformer": [CLIENTS / "compiled.py"],
    "Lightning module": [CLIENTS / "lightning_datamodule.py"],
    "transformers Trainer": [CLIENTS / "hf_trainer.py"],
    "accelerate loop": [CLIENTS / "accelerate_loop.py"],
    "gradient accumulation": [ROOT / "tests" / "scripts" / "accumulate.py"],
    "manual SGD, no optimizer": [ROOT / "tests" / "scripts" / "manual_sgd.py"],
}
# mistake: (the rule that must fire, its kind, whether the cause is a line of code, more arguments)
SEEDS = {
    "anomaly": ("autograd.detect_anomaly", "problem", True, ()),
    "starved": ("dataloader.num_workers", "problem", True, ()),
    "spawned": ("dataloader.persistent_workers", "problem", True, ()),
    # norms are sampled every ~100 steps on steps this short: the spike at step 750
    "grad_spike": ("grad_clipping", "problem", False, ("--steps", "1500")),
    "profiler": ("profiler.left_on", "problem", True, ()),
    "retained_graph": ("retained_graph", "problem", True, ()),
    "tensor_copy": ("tensor_copy", "problem", True, ()),
    "eval_grad": ("validation.no_grad", "problem", True, ()),
    "set_to_none": ("zero_grad.set_to_none", "problem", True, ()),
    "adam_weight_decay": ("optimizer.adamw", "suggestion", True, ()),
    "no_schedule": ("lr_schedule", "suggestion", False, ("--steps", "2500")),  # said past 2,000 steps
    "conv_bias": ("conv_bias_before_bn", "suggestion", False, ()),  # named by layer (features.0), not line
}
GPU_ONLY = ("amp", "batch_size", "channels_last", "cudnn.benchmark", "dataloader.pin_memory", "dataparallel",
            "memory.pressure", "multi_gpu.unused", "optimizer.fused", "sync.per_step", "tf32", "torch_compile",
            "compile_recompiles (CPU-plantable, not yet in the corpus)")


SPIN = "import time\nwhile True:\n    pass\n"  # another job on one core: the shared-cores case


def advised(command: list, apply: str = "never", busy: bool = False, allow: str = "") -> dict:
    """`fastmon run --headless` of a command in a fresh folder (``busy``: with another
    process spinning a core all along; ``allow``: --allow's ids); its report's JSON."""
    with tempfile.TemporaryDirectory() as folder:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FASTMON_")}
        spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if busy else None
        try:
            run = subprocess.run([sys.executable, "-m", "fastmon", "run", "--headless", "--apply", apply,
                                  *(["--allow", allow] if allow else []), *map(str, command)], cwd=folder, capture_output=True, text=True, timeout=900, env=env)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        if run.returncode != 0:
            raise SystemExit(f"{command} failed ({run.returncode}):\n{run.stderr[-2000:]}")
        report = subprocess.run([sys.executable, "-m", "fastmon", "report", "--json"], cwd=folder,
                                capture_output=True, text=True, timeout=120, env=env)
        return json.loads(report.stdout)


def ids(report: dict, kind: str) -> list[str]:
    return [a["id"] for a in report["advice"] if a.get("kind", "problem") == kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--live-only", action="store_true", help="only the table of live changes")
    if not parser.parse_args().live_only:
        precision_and_recall()
    live_changes()


def precision_and_recall() -> None:
    false_alarms, problems_advised = 0, 0
    print("| healthy script | problems advised | suggestions |\n| --- | --- | --- |")
    for name, command in HEALTHY.items():
        report = advised(command)
        problems = ids(report, "problem")
        false_alarms += len(problems)
        problems_advised += len(problems)
        print(f"| {name} | {', '.join(problems) or 'none'} | {', '.join(ids(report, 'suggestion')) or 'none'} |")

    found = {"problem": [0, 0], "suggestion": [0, 0]}  # kind: [found, planted]
    print("\n| planted mistake | expected | found | at | other problems |\n| --- | --- | --- | --- | --- |")
    for mistake, (rule, kind, in_code, more) in SEEDS.items():
        report = advised([PLANTED, "--mistake", mistake, *more])
        advice = {a["id"]: a for a in report["advice"]}
        hit = rule in advice and (advice[rule].get("location") or not in_code)
        found[kind][0] += bool(hit)
        found[kind][1] += 1
        others = [i for i in ids(report, "problem") if i != rule]
        false_alarms += len(others)
        problems_advised += len(ids(report, "problem"))
        where = advice[rule].get("location") if rule in advice else None
        print(f"| {mistake} | {rule} ({kind}) | {'yes' if hit else 'NO'} | {where or '—'} | {', '.join(others) or 'none'} |")

    precision = 1 - false_alarms / problems_advised if problems_advised else 1.0
    print(f"\nproblems: recall {found['problem'][0]}/{found['problem'][1]}, precision {precision:.2f} "
          f"({false_alarms} false alarms of {problems_advised} problems advised); "
          f"suggestions: {found['suggestion'][0]}/{found['suggestion'][1]}")
    print(f"not plantable without a GPU: {', '.join(GPU_ONLY)}")


def live_changes() -> None:
    # The estimate is for the first candidate a search tries: compared with that trial.
    print("\n| planted mistake | live change | predicted | measured (first candidate) | settled on [interval] |"
          "\n| --- | --- | ---: | ---: | --- |")
    # (steps of ~1 ms: enough for the experiments' 1 s windows)
    # The busy rows again with torch's thread count allowed (it can change a reduction's
    # last bits): the change that undoes what the busy core does to torch's threads.
    threads = "torch.num_threads"
    for mistake, busy, allow in (("starved", False, ""), ("starved", True, ""), ("starved", True, threads),
                                 ("spawned", False, ""), ("set_to_none", False, ""), ("anomaly", False, ""),
                                 ("anomaly", True, ""), ("anomaly", True, threads)):
        report = advised([PLANTED, "--mistake", mistake, "--steps", "4000"], apply="auto", busy=busy, allow=allow)
        predicted = {a["id"]: a.get("est_gain") for a in report["advice"]}
        for a in report["applied"]:
            first = a["tried"][0] if a["tried"] else None
            if a.get("method") == "interleaved" and a.get("speedup"):
                measured = f"{a['speedup']:.2f}x {a['params']}"
            else:
                measured = (f"{first['samples_per_s'] / a['before_samples_per_s']:.2f}x {first['params']}"
                            if first and a["before_samples_per_s"] else "—")
            interval = a.get("speedup_interval")
            settled = (f"{params_text(a['params'])}: {a['speedup']:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}], "
                       if a.get("speedup") else "")
            gain = a.get("predicted", predicted.get(a["id"]))
            name = mistake + (", one core busy" if busy else "") + (f", --allow {allow}" if allow else "")
            print(f"| {name} | {a['id']} | {f'{gain:.2f}x' if gain else '—'} | {measured} | "
                  f"{settled}{a.get('verdict')}, {'kept' if a['kept'] else 'reverted'} |")

    # Loading that is CPU work (a decode in Python) on cores the training already fills:
    # workers take cores from the training. What the advisor predicts for 2 workers, against
    # the script timed without fastmon, 0 and 2 workers alternately, 3 pairs.
    report = advised([PLANTED, "--mistake", "cpu_loading", "--steps", "2000"])
    workers = next((a for a in report["advice"] if a["id"] == "dataloader.num_workers" and a.get("est_gain")), None)
    rates = {0: [], 2: []}
    for _ in range(3):
        for n in (0, 2):
            done = subprocess.run([sys.executable, PLANTED, "--mistake", "cpu_loading", "--steps", "1500",
                                   "--workers", str(n)], capture_output=True, text=True, timeout=600)
            rates[n].append(float(done.stdout.split("samples/s ")[1]))
    ratio = sum(rates[2]) / sum(rates[0])
    print(f"\ncpu_loading (CPU-bound loading on the 2 cores the training fills): "
          f"{'advised at ' + format(workers['est_gain'], '.2f') + 'x' if workers else 'not advised (under 1.10x)'}; "
          f"timed without fastmon, 2 workers vs none: {ratio:.2f}x "
          f"({', '.join(f'{a:.0f}/{b:.0f}' for a, b in zip(rates[2], rates[0]))} samples/s)")


if __name__ == "__main__":
    main()
