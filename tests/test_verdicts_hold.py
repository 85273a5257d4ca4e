"""A verdict holds when checked against the run's own record: every claimed rate is the
recorded samples over the recorded time of the steps it names (plus the start-up it
states), a kept change's claim is what the run then records, and every "make it
permanent" line runs when written into the script it names."""

from __future__ import annotations

import json
import re
import sqlite3
import statistics
import subprocess
import sys

import pytest

from conftest import SCRIPTS, clean_env, fastmon_cmd, run_dirs
from fastmon.advisor.facts import Facts
from fastmon.advisor.rules import BY_ID
from fastmon.cli import EXIT_NOT_WRITTEN
from fastmon.permanent import as_dict, edited, line_text, permanent_changes
from fastmon.common.phases import STEP_FIELDS

WALL, SAMPLES = STEP_FIELDS.index("wall"), STEP_FIELDS.index("samples")


def recorded(run) -> dict[int, tuple[float, int]]:
    db = sqlite3.connect(run / "run.sqlite")
    rows = db.execute("SELECT * FROM steps WHERE rank = 0 ORDER BY step").fetchall()
    return {r[1]: (r[WALL], r[SAMPLES]) for r in rows}


def record_rate(steps: dict, blocks, startup: float = 0.0) -> float:
    counted = [steps[s] for first, last in blocks for s in range(first, last + 1) if s in steps]
    assert len(counted) == sum(last - first + 1 for first, last in blocks), "a step the window names is not recorded"
    return sum(n for _, n in counted) / (sum(w for w, _ in counted) + startup)


def epochs_of(run) -> tuple[int, list[int]]:
    """The training loader's steps an epoch and the steps its epochs began at, as recorded."""
    db = sqlite3.connect(run / "run.sqlite")
    facts = [json.loads(value) for (value,) in db.execute("SELECT value FROM facts WHERE key LIKE 'loader.%' ORDER BY t")]
    began = {s[0] for fact in facts for s in fact["startups"] if not s[3]}  # each fact holds the latest few
    return facts[-1]["len"], sorted({0} | began)


def held_rate(steps: dict, first: int, last: int, epoch: tuple[int, list[int]]) -> float:
    """The rate recorded over steps ``first``..``last``, an epoch's start paid once an epoch:
    a claim spreads each epoch's worker start-up over the epoch's steps, so a span of 1.6
    epochs holding one start-up is put at 1.6 of them (the mean start seen in the span)."""
    span = range(first, last + 1)
    assert all(s in steps for s in span), "a step the span names is not recorded"
    length, began = epoch
    starts = [s for s in began if s in span]
    samples = sum(steps[s][1] for s in span)
    if not starts:
        return samples / sum(steps[s][0] for s in span)
    rest = sum(steps[s][0] for s in span if s not in starts)
    return samples / (rest + len(span) / length * statistics.mean(steps[s][0] for s in starts))


# A claim against the rate the run later held, on this VM: one CI run of mistakes.py held
# anomaly detection off at 18.2k samples/s for 300 steps after its trial's 26.6k, and ran
# at 23-27k later with the same settings: the machine, not the claim, moved by ~30%. The
# bug this guards against claimed 1.9x what the run got.
HELD = 0.35


def assert_claims_hold(run, summary) -> None:
    """Each trial's rates as the record gives them (3%); each kept change's claim within
    HELD of what the run recorded from where it holds until the next change."""
    steps = recorded(run)
    epoch = epochs_of(run)
    applied = summary["applied"]
    for i, a in enumerate(applied):
        windows = [a["before"], a["after"], *(t["window"] for t in a["tried"])]
        for window in filter(None, windows):
            if window["steps"]:
                assert window["samples_per_s"] == pytest.approx(
                    record_rate(steps, window["blocks"], window["startup_s"]), rel=0.03), (a["id"], window)
        if a["before"] and a["before"]["steps"]:
            assert a["before_samples_per_s"] == pytest.approx(a["before"]["samples_per_s"], rel=1e-3)
        if a["after"] and a["after"]["steps"]:
            assert a["after_samples_per_s"] == pytest.approx(a["after"]["samples_per_s"], rel=1e-3)
        if a["kept"] and a["verdict"] == "faster":
            until = applied[i + 1]["step"] if i + 1 < len(applied) else max(steps) + 1
            span = [(a["holds_from"], until - 1)]
            if sum(steps[s][0] for s in range(a["holds_from"], until) if s in steps) >= 1.0:  # a second or more
                then = held_rate(steps, a["holds_from"], until - 1, epoch)
                assert a["after_samples_per_s"] == pytest.approx(then, rel=HELD), (a["id"], span)


def run_patched(tmp_path, script: str, *args) -> subprocess.CompletedProcess:
    """`fastmon report --patch` of the latest run, applied with git apply; the script run
    by python afterwards."""
    diff = subprocess.run(fastmon_cmd("report", "--patch"), cwd=tmp_path, capture_output=True, text=True,
                          env=clean_env(), timeout=60)
    assert diff.returncode == 0 and diff.stdout.startswith(f"--- a/{script}"), diff.stderr
    applied = subprocess.run(["git", "apply", "-"], input=diff.stdout, cwd=tmp_path, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    return subprocess.run([sys.executable, script, *args], cwd=tmp_path, capture_output=True, text=True,
                          env=clean_env(), timeout=120)


@pytest.mark.e2e
def test_the_demos_trials_claim_what_the_record_holds_and_its_patch_runs(starved_auto):
    out, tmp_path = starved_auto  # its folder: the patch goes into its copy of the script
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(tmp_path)
    summary = json.loads(subprocess.run(fastmon_cmd("report", str(run), "--json"), capture_output=True, text=True,
                                        timeout=60, env=clean_env()).stdout)
    assert_claims_hold(run, summary)
    workers = next(a for a in summary["applied"] if a["id"] == "dataloader.num_workers")
    assert workers["kept"] and workers["verdict"] == "faster"
    assert workers["after"]["startup_s"] > 0  # a worker count pays for its start-ups
    # the line that keeps it runs, written into the script
    keep = summary["permanent"][0]
    assert keep["location"] == "starved.py:57" and "num_workers=" in keep["code"]
    # asked from another folder: the script is found from where the run started
    (tmp_path / "elsewhere").mkdir()
    elsewhere = subprocess.run(fastmon_cmd("report", run, "--patch"), cwd=tmp_path / "elsewhere",
                               capture_output=True, text=True, env=clean_env(), timeout=60)
    assert elsewhere.returncode == 0 and "+    parser.add_argument(\"--num-workers\"" in elsewhere.stdout, \
        elsewhere.stderr
    done = run_patched(tmp_path, "starved.py", "--epochs", "1", "--samples", "320")
    assert done.returncode == 0, done.stderr
    # starved.py takes its count from --num-workers: the option's default changes, the option still works
    patched = (tmp_path / "starved.py").read_text()
    assert f'parser.add_argument("--num-workers", type=int, default={workers["params"]["num_workers"]})' in patched
    assert "num_workers=args.num_workers" in patched
    none = subprocess.run([sys.executable, "starved.py", "--num-workers", "0", "--epochs", "1", "--samples", "320"],
                          cwd=tmp_path, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert none.returncode == 0, none.stderr  # the option still works, down to no workers
    # nothing could be written (the script moved): said, and an exit code of its own for `| git apply`
    (tmp_path / "starved.py").rename(tmp_path / "moved.py")
    lost = subprocess.run(fastmon_cmd("report", "--patch"), cwd=tmp_path, capture_output=True, text=True,
                          env=clean_env(), timeout=60)
    assert lost.returncode == EXIT_NOT_WRITTEN and not lost.stdout and "cannot be read" in lost.stderr


@pytest.mark.e2e
def test_the_mistakes_trials_claim_what_the_record_holds_and_its_patch_runs(mistakes_auto):
    out, tmp_path = mistakes_auto  # its folder: the patch goes into its copy of the script
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(tmp_path)
    summary = json.loads(subprocess.run(fastmon_cmd("report", str(run), "--json"), capture_output=True, text=True,
                                        timeout=60, env=clean_env()).stdout)
    assert_claims_hold(run, summary)
    anomaly = next(a for a in summary["applied"] if a["id"] == "autograd.detect_anomaly")
    assert anomaly["method"] == "interleaved" and anomaly["verdict"] == "faster" and anomaly["kept"], anomaly
    assert "torch.autograd.set_detect_anomaly(False)  # mistakes.py:42" in summary["permanent_changes"]
    done = run_patched(tmp_path, "mistakes.py", "--epochs", "1", "--samples", "512")
    assert done.returncode == 0, done.stderr
    assert "torch.autograd.set_detect_anomaly(False)" in (tmp_path / "mistakes.py").read_text()


@pytest.mark.e2e
def test_a_loader_built_each_epoch_gets_not_judged_not_harmless(run_fastmon, report, tmp_path):
    out = run_fastmon("run", "--headless", "--apply", "auto", SCRIPTS / "loader_each_epoch.py", "--epochs", "4")
    assert out.returncode == 0, out.stderr
    summary = report()
    (workers,) = [a for a in summary["applied"] if a["id"] == "dataloader.num_workers"]
    assert workers["verdict"] == "not judged" and not workers["kept"]
    # 40 steps an epoch: the new loader is seen at the start of the epoch after the change
    built = re.search(r"the script built a new DataLoader at step (\d+)", workers["error"])
    assert built and int(built[1]) % 40 == 0, workers["error"]
    advice = next(a for a in summary["advice"] if a["id"] == "dataloader.num_workers")
    assert advice["status"] == "open"  # still the advice: the change could not take
    assert "harmless" not in out.stderr and summary["permanent"] == []
    text = subprocess.run(fastmon_cmd("report"), cwd=tmp_path, capture_output=True, text=True, env=clean_env(),
                          timeout=60).stdout
    assert f"not judged: the script built a new DataLoader at step {built[1]}" in text and "✔" not in text


# --- every permanent line runs, written into the script it names -------------------------
SCRIPT = """import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
args = parser.parse_args()
torch.autograd.set_detect_anomaly(True)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8,
                    shuffle=True,
                    num_workers=args.workers)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, foreach=False)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad(set_to_none=False)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
print("done", loader.num_workers, loader.persistent_workers, loader.batch_size, optimizer.defaults["foreach"],
      torch.is_anomaly_enabled(), torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(),
      torch.get_num_threads())
"""
WHERE = {"dataloader": 10, "autograd.detect_anomaly": 8, "zero_grad.set_to_none": 17, "optimizer.fused": 14,
         "batch_size": 10}


def facts() -> dict:
    return {"loader.L0": {"id": "L0", "epochs": 2, "len": 8, "batch_size": 8, "num_workers": 2,
                          "location": "script.py:10"},
            "optimizer.O0": {"class": "AdamW", "location": "script.py:14"}}


@pytest.mark.e2e
def test_every_permanent_line_runs_when_written_into_the_script(tmp_path):
    # a worker count kept as harmless and persistent workers measured faster: the line holds both
    applied = [
        {"id": "dataloader.num_workers", "kept": True, "verdict": "no measurable change", "params": {"num_workers": 2}},
        {"id": "dataloader.persistent_workers", "kept": True, "verdict": "faster", "params": {"persistent_workers": True}},
        {"id": "dataloader.num_workers", "kept": False, "verdict": "slower", "params": {"num_workers": 8}},
    ]
    for rule, params in (("autograd.detect_anomaly", {"value": False}), ("zero_grad.set_to_none", {"value": True}),
                         ("optimizer.fused", {"value": True}), ("cudnn.benchmark", {"value": True}),
                         ("tf32", {"value": "high"}), ("batch_size", {"factor": 2, "lr_scale": 2}),
                         ("torch.num_threads", {"value": 1})):
        applied.append({"id": rule, "kept": True, "verdict": "faster", "params": params})
    advice = [{"id": rule, "location": f"script.py:{line}"} for rule, line in WHERE.items()]
    changes = permanent_changes(applied, facts(), advice)
    assert len(changes) == 8  # the loader's one call, and each rule's line
    loader = changes[0]
    assert line_text(loader) == ("DataLoader(..., persistent_workers=True, num_workers=2)  # script.py:10 "
                                 "(num_workers=2: not itself measured faster; persistent_workers needs it)")
    assert not any("num_workers=8" in c["code"] for c in changes)  # reverted: never a line
    source = SCRIPT
    for change in sorted(changes, key=lambda c: (c["edit"] != "after_import", int(c["location"].split(":")[1])
                                                 if c.get("location") else 0), reverse=True):
        line = int(change["location"].split(":")[1]) if change.get("location") else 1
        if change["edit"]:
            source = edited(source, line, change)
    (tmp_path / "script.py").write_text(source)
    done = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env=clean_env())
    assert done.returncode == 0, done.stderr + source
    assert done.stdout.split() == ["done", "2", "True", "16", "True", "False", "True", "high", "1"], source


def test_a_line_for_each_rule_that_applies_live():
    # every rule with a live change says how to keep it: code, and where it goes
    for rule_id, rule in BY_ID.items():
        if hasattr(rule, "permanent"):
            kept = rule.permanent({}, Facts(values=facts()))
            line = as_dict(kept, WHERE.get(rule_id))["code"]
            assert "torch" in line or "zero_grad" in line or "DataLoader" in line, rule_id


def test_a_setting_the_script_reads_from_its_options_is_kept_as_the_option_s_default():
    source = ("import argparse\nparser = argparse.ArgumentParser()\n"
              "parser.add_argument('-w', '--num-workers', type=int)\n"
              "parser.add_argument('--pin', dest='pin_memory', default=False)\n"
              "args = parser.parse_args([])\n"
              "loader = DataLoader(data, num_workers=args.num_workers, pin_memory=args.pin_memory, batch_size=8)\n")
    change = {"edit": "keywords", "calls": ["DataLoader"], "code": "",
              "keywords": {"num_workers": 16, "pin_memory": True, "persistent_workers": True}}
    new = edited(source, 6, change)
    assert "parser.add_argument('-w', '--num-workers', type=int, default=16)" in new
    assert "parser.add_argument('--pin', dest='pin_memory', default=True)" in new
    # persistent workers only where the option gives some: DataLoader refuses them with none
    assert ("DataLoader(data, num_workers=args.num_workers, pin_memory=args.pin_memory, batch_size=8, "
            "persistent_workers=args.num_workers > 0)") in new
    # a value from elsewhere (a config object) is written in as before
    config = source.replace("num_workers=args.num_workers", "num_workers=cfg.num_workers")
    assert ("DataLoader(data, num_workers=16, pin_memory=args.pin_memory, batch_size=8, persistent_workers=True)"
            in edited(config, 6, change))


@pytest.mark.e2e
@pytest.mark.parametrize("compiled", [False, True])
def test_a_loop_that_sleeps_between_steps_is_neither_data_bound_nor_compute_bound(run_fastmon, report, compiled):
    # issue 56: a sleep after each step of a loop without a DataLoader read "data-bound 93%", and
    # the same sleep beside a compiled step function "compute-bound"
    out = run_fastmon("run", "--headless", SCRIPTS / "sleep_loop.py", *(["--compile"] if compiled else []))
    assert out.returncode == 0, out.stderr[-3000:]
    summary = report()
    assert summary["verdict"]["issue"].startswith("other-bound"), summary["verdict"]
    assert summary["phases"]["other"] > 0.5 and summary["phases"]["data_wait"] < 0.2
