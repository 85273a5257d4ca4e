"""Hot-apply: live DataLoader rebuilds lose and repeat nothing; experiments keep what helps."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import pytest

from conftest import EXAMPLES, SCRIPTS, clean_env, run_dirs
from fastmon.experiments import NOISE, ExperimentRunner
from fastmon.phases import STEP_FIELDS, StepRow


def read_epochs(path) -> list[list[int]]:
    return [list(map(int, line.split())) for line in path.read_text().splitlines()]


@pytest.mark.e2e
@pytest.mark.parametrize("persistent, shuffle", [(False, True), (True, False), (True, True)])
def test_live_rebuilds_serve_every_sample_once_per_epoch(tmp_path, persistent, shuffle):
    out = tmp_path / "indices.txt"
    args = [sys.executable, SCRIPTS / "loader_swaps.py", "--out", out]
    args += ["--persistent"] if persistent else []
    args += ["--shuffle"] if shuffle else []
    done = subprocess.run(args, capture_output=True, text=True, timeout=180, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "acks 6 of 6" in done.stdout
    assert "final workers 2" in done.stdout
    epochs = read_epochs(out)
    assert len(epochs) == 3
    for seen in epochs:
        assert sorted(seen) == list(range(1000))
    if not shuffle:
        assert all(seen == list(range(1000)) for seen in epochs)  # order kept too


@pytest.mark.e2e
def test_workers_of_an_epoch_left_by_break_stop_as_under_python():
    # Rebuilt loaders' workers once lived on in a reference cycle, each epoch's more, until
    # the garbage collector joined them 5 s each inside a later iter().
    done = subprocess.run([sys.executable, SCRIPTS / "breaks_epochs.py"], capture_output=True, text=True,
                          timeout=180, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "acks 12 of 12" in done.stdout
    during = [line.split() for line in done.stdout.splitlines() if line.startswith("epoch")]
    assert len(during) == 6 and all(alive == setting for *_, alive, _, setting in during), done.stdout
    after = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("after epoch")]
    assert after == ["0"] * 6, done.stdout


@pytest.mark.e2e
def test_spawned_workers_restarting_each_epoch_are_made_persistent_first(run_fastmon, report, tmp_path):
    # macOS's and Windows' start method: each epoch's first batch waits seconds for the
    # workers to import torch again. More workers would make that longer, not shorter.
    # Once kept, an epoch takes ~0.1 s: measuring beyond noise (0.75 s) takes ~8 of them,
    # after the two that start the workers: 24 leave room for advice that comes an epoch late.
    out = run_fastmon("run", "--headless", "--apply", "auto", SCRIPTS / "spawned_workers.py", "--epochs", "24")
    assert out.returncode == 0, out.stderr
    summary = report()
    assert summary["applied"][0]["id"] == "dataloader.persistent_workers"  # before any num_workers trial
    persistent = summary["applied"][0]
    assert persistent["kept"] and persistent["speedup"] > 2  # over whole epochs, their starts included
    (run,) = run_dirs(tmp_path)
    (loader,) = [json.loads(v) for (v,) in sqlite3.connect(run / "run.sqlite").execute(
        "SELECT value FROM facts WHERE key = 'loader.L0' ORDER BY t DESC LIMIT 1")]
    assert loader["epochs"] == 24 and loader["persistent_workers"]
    # the workers started at each epoch (64 steps) until the change, once more, then not at
    # the next epoch (later, a num_workers trial may start new ones). The change comes after
    # an epoch's worth of steps to compare with: an epoch or two later on a loaded machine.
    steps = [step for step, _ in loader["startups"]]
    restarts = next((i for i, step in enumerate(steps) if step != 64 * i), len(steps))
    assert 2 <= restarts <= 6 and all(step > 64 * restarts for step in steps[restarts:])
    assert all(seconds > 0.5 for _, seconds in loader["startups"])


@pytest.mark.e2e
def test_auto_mode_fixes_the_starved_example(run_fastmon, report, tmp_path):
    indices = tmp_path / "indices.txt"
    out = run_fastmon("run", "--headless", "--apply", "auto", EXAMPLES / "starved.py", "--epochs", "2",
                      "--record-indices", indices)
    assert out.returncode == 0, out.stderr
    summary = report()
    (applied,) = [a for a in summary["applied"] if a["id"] == "dataloader.num_workers"]
    assert applied["kept"]
    assert applied["after_samples_per_s"] / applied["before_samples_per_s"] >= 2.5
    assert applied["params"]["num_workers"] >= 4
    assert [t["params"]["num_workers"] for t in applied["tried"]][:2] == [2, 4]
    # within the first epoch (200 steps), the last stretch runs >= 2.5x the first window
    (run,) = run_dirs(tmp_path)
    db = sqlite3.connect(run / "run.sqlite")
    i_wall, i_samples = STEP_FIELDS.index("wall"), STEP_FIELDS.index("samples")
    rows = db.execute("SELECT * FROM steps WHERE rank = 0 ORDER BY step").fetchall()
    rate = lambda rs: sum(r[i_samples] for r in rs) / sum(r[i_wall] for r in rs)  # noqa: E731
    assert rate(rows[170:200]) / rate(rows[5:25]) >= 2.5
    for seen in read_epochs(indices):
        assert sorted(seen) == list(range(6400))
    # the report says so, and how to make it permanent
    text = subprocess.run([sys.executable, "-m", "fastmon", "report"], cwd=tmp_path, capture_output=True, text=True,
                          env=clean_env(), timeout=60).stdout
    assert "kept" in text and f"DataLoader(..., num_workers={applied['params']['num_workers']})" in text
    assert "starved.py:" in text


@pytest.mark.e2e
def test_ask_is_not_auto_headless_never_applies(run_fastmon, report):
    out = run_fastmon("run", "--headless", EXAMPLES / "starved.py", "--epochs", "1", "--samples", "1600")
    assert out.returncode == 0, out.stderr
    assert report()["applied"] == []


@pytest.mark.e2e
def test_auto_applies_safe_fixes_on_the_mistakes_example(run_fastmon, report):
    # 5 epochs: room for each experiment's 0.75 s of measurement on a loaded machine
    out = run_fastmon("run", "--headless", "--apply", "auto", EXAMPLES / "mistakes.py", "--epochs", "5")
    assert out.returncode == 0, out.stderr
    summary = report()
    advice = {a["id"]: a for a in summary["advice"]}
    for rule in ("autograd.detect_anomaly", "retained_graph", "validation.no_grad", "conv_bias_before_bn",
                 "optimizer.adamw", "zero_grad.set_to_none"):
        assert rule in advice, rule
    assert advice["retained_graph"]["location"].endswith("mistakes.py:56")
    assert advice["validation.no_grad"]["location"].endswith("mistakes.py:60")
    assert advice["zero_grad.set_to_none"]["location"].endswith("mistakes.py:54")
    assert advice["autograd.detect_anomaly"]["location"].endswith("mistakes.py:42")
    assert advice["optimizer.adamw"]["location"].endswith("mistakes.py:47")
    applied = {a["id"]: a for a in summary["applied"]}
    anomaly = applied["autograd.detect_anomaly"]
    assert anomaly["kept"] and anomaly["verdict"] == "faster" and anomaly["speedup_interval"][0] > 1
    assert all(a["action"] in ("hot_apply", "code_change") for a in summary["advice"])
    # the measured result replaces the estimate; a suggestion is told apart
    assert advice["autograd.detect_anomaly"]["measured"]["verdict"] == "faster"
    assert {a["id"] for a in summary["advice"] if a["kind"] == "suggestion"} == {"conv_bias_before_bn",
                                                                                 "optimizer.adamw"}
    assert "remove torch.autograd.set_detect_anomaly(True)" in "\n".join(summary["permanent_changes"])


@pytest.mark.e2e
def test_dataparallel_is_named(run_fastmon, report, tmp_path):
    script = tmp_path / "dp.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "model = nn.DataParallel(nn.Linear(8, 1))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(40):\n    opt.zero_grad()\n    model(torch.randn(16, 8)).sum().backward()\n    opt.step()\n")
    out = run_fastmon("run", "--headless", script)
    assert out.returncode == 0, out.stderr
    advice = {a["id"]: a for a in report()["advice"]}
    assert "dataparallel" in advice
    assert "--nproc-per-node" in advice["dataparallel"]["fix"]


# --- the experiment runner on synthetic steps -------------------------------------------
def step_rows(first: int, n: int, samples_per_s: float) -> list[StepRow]:
    rows = []
    for step in range(first, first + n):
        row = dict.fromkeys(STEP_FIELDS, 0)
        row.update(step=step, samples=32, wall=32 / samples_per_s)
        rows.append(StepRow(**row))
    return rows


class Probe:
    """Plays the probe's side: acks what the runner sends, at a given step."""

    def __init__(self):
        self.sent = []

    def __call__(self, message):
        self.sent.append(message)


def drive(runner, probe, rates, start=30):
    """Feed ``rates[i]`` samples/s after the i-th apply; returns the result."""
    results = []
    runner.done = results.append
    rows = step_rows(0, start, 100.0)
    seen = 0
    for _ in range(100):
        if results:
            break
        if len(probe.sent) > seen:
            message = probe.sent[seen]
            seen += 1
            step = rows[-1].step + 1
            if message["t"] == "revert":
                runner.on_ack({"t": "reverted", "exp": message["exp"], "ok": True, "step": step})
                continue
            rate = rates[min(seen - 1, len(rates) - 1)]
            if rate is None:
                runner.on_ack({"t": "applied", "exp": message["exp"], "ok": False, "error": "CUDA out of memory"})
                continue
            runner.on_ack({"t": "applied", "exp": message["exp"], "ok": True, "step": step})
            rows += step_rows(step, 400, rate)
        runner.tick(rows)
    assert results, "the experiment did not conclude"
    return results[0]


def advice(search=(), changes_maths=False):
    return {"id": "x", "apply": {"action": "loader", "params": {"n": 1}, "search": search,
                                 "changes_maths": changes_maths}}


def test_an_experiment_that_helps_is_kept():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [150.0])
    assert result["kept"] and result["speedup"] == pytest.approx(1.5)
    assert [m["t"] for m in probe.sent] == ["apply"]
    # the steps measured, for the chart: the baseline's 20 before the change, then the trial's
    (base_first, base_last), (trial_first, trial_last) = result["windows"]
    assert (base_first, base_last) == (10, 29) and 30 < trial_first <= trial_last


def test_an_experiment_that_hurts_is_reverted():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [80.0])
    assert not result["kept"] and result["state"] == "reverted"
    assert [m["t"] for m in probe.sent] == ["apply", "revert"]


def test_within_noise_safe_changes_stay_and_maths_changes_go():
    for changes_maths, kept in ((False, True), (True, False)):
        probe = Probe()
        runner = ExperimentRunner(probe, None)
        runner.start(advice(changes_maths=changes_maths), step_rows(0, 30, 100.0))
        assert drive(runner, probe, [100.0 * (1 + NOISE / 2)])["kept"] is kept


def test_a_search_settles_on_the_fewest_workers_within_noise_of_the_best():
    # 4 workers measured 2.5% faster than 2: noise; 2 again and again is the repeatable answer.
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(search=({"n": 2}, {"n": 4}, {"n": 8})), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, 205.0])
    assert result["kept"] and result["params"] == {"n": 2} and result["verdict"] == "faster"
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 2}]


@pytest.mark.parametrize("changes_maths, kept", [(False, True), (True, False)])
def test_no_measurable_change_keeps_only_a_harmless_change(changes_maths, kept):
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(changes_maths=changes_maths), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [97.0])
    assert result["verdict"] == "no measurable change" and result["kept"] is kept
    low, high = result["speedup_interval"]
    assert low < 1 < high


def test_the_verdicts_interval_widens_with_the_windows_spread():
    def verdict(after_rows):
        results = []
        runner = ExperimentRunner(Probe(), results.append)
        runner.start(advice(), step_rows(0, 40, 100.0))
        runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 40})
        runner.tick(step_rows(0, 40, 100.0) + after_rows)
        return results[0]

    # The same 110.8 samples/s on average: steady, or in blocks alternating 80 and 180.
    steady = verdict(step_rows(40, 160, 110.77))
    blocks = [step_rows(40 + 40 * i, 40, 80.0 if i % 2 == 0 else 180.0) for i in range(4)]
    swinging = verdict([row for block in blocks for row in block])
    assert steady["speedup"] == pytest.approx(swinging["speedup"], rel=0.01)
    assert steady["verdict"] == "faster" and swinging["verdict"] == "no measurable change"


def test_a_search_keeps_the_best_candidate():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    candidates = ({"n": 2}, {"n": 4}, {"n": 8}, {"n": 16})
    runner.start(advice(search=candidates), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, 390.0, 380.0])
    assert result["kept"] and result["params"] == {"n": 4}
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 8}, {"n": 4}]


def test_a_failed_candidate_falls_back_to_the_best_one():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(search=({"n": 2}, {"n": 4})), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [200.0, None, 200.0])
    assert result["kept"] and result["params"] == {"n": 2}
    assert [m.get("params") for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 2}]
    assert "out of memory" in result["error"]


def test_a_trial_is_measured_without_the_workers_starting_at_an_epoch_start():
    # num_workers 2 runs at 200 samples/s, 4 at 400, but an epoch begins during 4's
    # trial and its first step waits 2 s for the workers: 4 is still found the faster.
    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    startups = frozenset({130})
    runner.start(advice(search=({"n": 2}, {"n": 4}, {"n": 8})), step_rows(0, 30, 100.0), startups=startups)
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 30})
    rows = step_rows(0, 30, 100.0) + step_rows(30, 60, 200.0)
    runner.tick(rows, startups)
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 90})
    rows += step_rows(90, 200, 400.0)
    rows[130] = rows[130]._replace(wall=2.0)
    runner.tick(rows, startups)
    assert [m["params"] for m in probe.sent] == [{"n": 2}, {"n": 4}, {"n": 8}]
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 290})
    rows += step_rows(290, 100, 390.0)
    runner.tick(rows, startups)
    runner.on_ack({"t": "applied", "exp": 1, "ok": True, "step": 390})  # back to the best
    runner.tick(rows + step_rows(390, 100, 400.0), startups)
    (result,) = results
    assert result["params"] == {"n": 4}
    assert [t["samples_per_s"] for t in result["tried"]] == pytest.approx([200, 400, 390])


def test_persistent_workers_are_measured_over_whole_epochs():
    # 40-step epochs of 20 ms steps; each epoch's first step waits 2 s for its workers until
    # they persist. Applied at step 100: the epoch at 120 starts them once more, 160's does not.
    def epochs(first, n, stalls):
        return [row._replace(wall=2.0) if row.step in stalls else row for row in step_rows(first, n, 1600.0)]

    probe, results = Probe(), []
    runner = ExperimentRunner(probe, results.append)
    before = epochs(0, 100, {0, 40, 80})
    exp = runner.start({"id": "dataloader.persistent_workers", "apply": {"action": "loader",
                        "params": {"persistent_workers": True}}}, before, epoch=(40, 80))
    runner.on_ack({"t": "applied", "exp": exp.exp, "ok": True, "step": 100})
    rows = before + epochs(100, 60, {120})
    runner.tick(rows)
    assert not results  # the epoch that starts the persistent workers is not the measure
    runner.tick(rows + epochs(160, 40, set()))
    (result,) = results
    assert result["kept"]
    assert result["before_samples_per_s"] == pytest.approx(40 * 32 / (39 * 0.02 + 2.0), rel=1e-3)
    assert result["after_samples_per_s"] == pytest.approx(1600, rel=1e-3)


def test_a_change_that_fails_at_once_is_reported_not_kept():
    probe = Probe()
    runner = ExperimentRunner(probe, None)
    runner.start(advice(), step_rows(0, 30, 100.0))
    result = drive(runner, probe, [None])
    assert not result["kept"] and result["state"] == "failed"


@pytest.mark.e2e
def test_a_live_batch_change_scales_the_lr_and_keeps_every_sample(tmp_path):
    out = tmp_path / "indices.txt"
    done = subprocess.run([sys.executable, SCRIPTS / "batch_change.py", "--out", out], capture_output=True, text=True,
                          timeout=180, env=clean_env())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "epoch 0 sizes [10, 20] lr 0.2 base 0.2 len 50" in lines  # doubled mid-epoch, LR x2
    assert "epoch 1 sizes [20] lr 0.2 base 0.2 len 50" in lines
    assert "epoch 2 sizes [10, 20] lr 0.1 base 0.1 len 100" in lines  # reverted mid-epoch
    assert "acks [('applied', True), ('reverted', True)]" in lines
    for seen in read_epochs(out):
        assert sorted(seen) == list(range(1000))


def run_with_probe(tmp_path, body: str) -> str:
    """Runs ``body`` as a script with the probe installed (no monitor: the probe's
    messages are collected in ``acks``, control messages go in by hand); its stdout."""
    script = tmp_path / "probed.py"
    script.write_text("import torch, fastmon.probe\n"
                      "probe = fastmon.probe.install(None); acks = []; probe.message = acks.append\n" + body)
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120, env=clean_env())
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.e2e
def test_worker_start_ups_are_the_waits_for_them_of_each_loader(tmp_path):
    # Both loaders' workers start (0.3 s each) at iter(), before either delivers; the
    # training epoch (0.8 s) leaves the validation workers time to start: no wait for them.
    out = run_with_probe(
        tmp_path,
        "import time\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "data = TensorDataset(torch.arange(64.))\n"
        "slow_start = lambda worker: time.sleep(0.3)\n"
        "train = DataLoader(data, batch_size=8, num_workers=1, worker_init_fn=slow_start)\n"
        "val = DataLoader(data, batch_size=8, num_workers=1, worker_init_fn=slow_start)\n"
        "model = torch.nn.Linear(1, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(2):\n"
        "    batches, checks = iter(train), iter(val)\n"
        "    for (x,) in batches:\n"
        "        opt.zero_grad(); model(x[:, None]).sum().backward(); time.sleep(0.1); opt.step()\n"
        "    for (x,) in checks: pass\n"
        "probe.loader_part.report()\n"
        "facts = {a['key']: a['value'] for a in acks if a['t'] == 'fact'}\n"
        "print([[round(s, 2) for _, s in facts[k]['startups']] for k in ('loader.L0', 'loader.L1')])\n")
    train, val = json.loads(out.strip().splitlines()[-1])
    assert len(train) == len(val) == 2
    assert all(0.25 < s < 3 for s in train) and all(s < 0.2 for s in val)


@pytest.mark.e2e
def test_a_custom_batch_sampler_is_refused_not_broken(tmp_path):
    out = run_with_probe(
        tmp_path,
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.arange(100.)), batch_sampler=[[i, i + 1] for i in range(0, 100, 2)])\n"
        "model = torch.nn.Linear(1, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step, (x,) in enumerate(loader):\n"
        "    opt.zero_grad(); model(x[:, None]).sum().backward(); opt.step()\n"
        "    if step == 3: probe.publisher.deliver([{'t': 'apply', 'exp': 1, 'action': 'batch_size',"
        " 'params': {'factor': 2}}])\n"
        "print([a.get('error') for a in acks if a['t'] == 'applied'], opt.param_groups[0]['lr'])\n")
    assert "has its own batch_sampler" in out and out.strip().endswith("0.1")


@pytest.mark.e2e
def test_the_optimizer_is_switched_to_foreach_and_back(tmp_path):
    out = run_with_probe(
        tmp_path,
        "model = torch.nn.Linear(4, 1); opt = torch.optim.AdamW(model.parameters(), lr=0.1, foreach=False)\n"
        "seen = []\n"
        "for step in range(12):\n"
        "    opt.zero_grad(); model(torch.randn(8, 4)).sum().backward(); opt.step()\n"
        "    seen.append(opt.param_groups[0]['foreach'])\n"
        "    if step == 3: probe.publisher.deliver([{'t': 'apply', 'exp': 1, 'action': 'optimizer_foreach',"
        " 'params': {'value': True}}])\n"
        "    if step == 7: probe.publisher.deliver([{'t': 'revert', 'exp': 1}])\n"
        "print(seen)\n")
    assert out.strip() == str([False] * 4 + [True] * 4 + [False] * 4)


def test_a_batch_trial_stands_in_zeros_for_a_batch_the_loop_has_freed():
    # the H200 check's loop, `model(xb.cuda())`, freed its batch after backward: the trial
    # between steps was refused with "the last batch is gone" instead of being tried
    import torch

    from fastmon.probe.batch_change import grown, remember_inputs

    tokens, kept = torch.randint(1, 50, (4, 8)), torch.randn(4, 3)
    remembered = remember_inputs((tokens, kept, "mask"))
    del tokens
    bigger_tokens, bigger_kept, flag = grown(remembered, 8)
    assert bigger_tokens.shape == (32, 8) and bigger_tokens.dtype == torch.int64 and not bigger_tokens.any()
    assert torch.equal(bigger_kept, torch.cat([kept] * 8)) and flag == "mask"
