"""FLOPs, MFU and the bound verdict: counted on a real training step, worked out by hand,
and read from the recorded H200 runs."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from conftest import ROOT, SCRIPTS, clean_env
from fastmon.peaks import math_dtype, peak_tflops
from fastmon.live_state import LiveState, RankState
from fastmon.records import RunRecord
from fastmon.report import format_text, gpu_run_line
from fastmon.step_table import StepTable
from fastmon.summary import slowed_steps, steady_left_out, summarize
from fastmon.tui.snapshot import LiveSource, ReplaySource

MLP = SCRIPTS / "mlp_flops.py"
WIDTHS, BATCH = (16, 1024, 1024, 10), 64
RECORDED = ROOT / "tests" / "data"


def by_hand() -> int:
    """Forward 2 x in x out x batch a layer; backward as much again for the weights'
    gradient and for the input's, but the first layer's input needs none."""
    layers = list(zip(WIDTHS, WIDTHS[1:]))
    forward = sum(2 * n_in * n_out * BATCH for n_in, n_out in layers)
    input_grads = sum(2 * n_in * n_out * BATCH for n_in, n_out in layers[1:])
    return 2 * forward + input_grads


@pytest.mark.e2e
def test_an_mlp_s_flops_are_counted_as_worked_out_by_hand_and_change_no_weight(run_fastmon, report, tmp_path):
    bare = subprocess.run([sys.executable, MLP], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=clean_env())
    out = run_fastmon("run", "--headless", MLP)
    assert out.returncode == 0, out.stderr
    weights = re.search(r"^weights \w+$", out.stdout, re.M).group()
    assert weights == bare.stdout.strip()  # the counted step ran every operator as it would have
    compute = report()["compute"]
    assert compute["flops_per_step"] == by_hand()
    weights_count = sum(n_in * n_out for n_in, n_out in zip(WIDTHS, WIDTHS[1:]))
    assert compute["flops_per_step"] == pytest.approx(6 * weights_count * BATCH, rel=0.02)  # the usual 6ND
    assert compute["flops_per_sample"] == by_hand() / BATCH
    assert compute["dtype"] == "float32" and compute["mfu"] is None
    assert compute["tflops_per_s"] > 0
    summary = report()
    assert {"step": compute["counted_at_step"], "why": "FLOP count"} in [
        {k: u[k] for k in ("step", "why")} for u in summary["startup_steps"]]
    rate = compute["flops_per_sample"] * summary["samples_per_s"]
    assert compute["tflops_per_s"] == pytest.approx(rate / 1e12, rel=1e-3)
    assert re.search(r"compute: [\d.]+ MFLOP a step \(counted at step 3, float32\), [\d.,]+ [GM]FLOP/s achieved; "
                     r"MFU n/a \(a CPU has no datasheet peak to divide by\)", out.stderr)
    # the trace: a FLOP/s counter at each timed step, from the FLOPs a sample
    assert run_fastmon("export", "-o", tmp_path / "trace.json").returncode == 0
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    counters = [e for e in trace if e["name"] == "achieved TFLOP/s"]
    timed = [e for e in trace if e.get("cat") == "step" and e["args"]["timed"]]
    assert len(counters) == len(timed) > 0


@pytest.mark.parametrize("run", ["h200-nanogpt-eager-1", "h200-nanogpt-compiled", "h200-hf-trainer-gpt2"])
def test_the_recorded_h200_runs_are_launch_bound_on_every_surface(run):
    """nanoGPT and a small GPT-2 on an H200: NVML saw the GPU busy 19-46% of the steps'
    time while the host was not waiting for data."""
    compute = summarize(RECORDED / run)["compute"]
    assert compute["bound"] == "launch-bound"
    assert 15 < compute["gpu_busy_in_steps"] < 50
    assert ("torch.compile (fewer, fused kernels)" in compute["remedies"]) == ("compiled" not in run)
    assert ReplaySource(RECORDED / run).snapshot().bound == (compute["bound"], compute["bound_why"])
    # and the live dashboard once the run has ended (it kept no sample times, and said nothing)
    live = LiveSource(ended_session(RECORDED / run)).snapshot()
    assert live.bound == (compute["bound"], compute["bound_why"])
    reported = summarize(RECORDED / run)["gpu"]["devices"]
    assert [gpu_run_line(d) for d in live.gpu_run] == [gpu_run_line(d) for d in reported]


def ended_session(run):
    """What a session holds once the recorded run has ended, as its state owner built it."""
    record = RunRecord(run)
    state = LiveState(status="finished", exit_code=0, facts=record.facts(), events=record.events())
    left_out = steady_left_out(StepTable.read(record, 0), slowed_steps(record.events()).get(0, {}))
    rank = state.ranks[0] = RankState()
    for row in record.steps(0):
        rank.add(row, start_up=row.step in left_out)
    state.gpu.extend(record.samples("gpu"))
    return SimpleNamespace(view=state.view(), options=SimpleNamespace(target=record.meta()["target"]),
                           gpu=SimpleNamespace(note=""))


def test_a_starved_run_is_data_bound():
    assert summarize(RECORDED / "starved-run")["compute"]["bound"] == "data-bound"


@pytest.mark.parametrize("name,dtype,precision,peak", [
    ("NVIDIA H200", "bfloat16", "highest", ("H200", 989)),
    ("NVIDIA H100 80GB HBM3", "bfloat16", "highest", ("H100 SXM", 989)),
    ("NVIDIA H100 PCIe", "float32", "high", ("H100 PCIe", 378)),  # TF32
    ("NVIDIA A100-SXM4-80GB", "float32", "highest", ("A100", 19.5)),
    ("NVIDIA A10", "float16", "highest", ("A10", 125)),
    ("NVIDIA A10G", "float16", "highest", None),  # not the A10's datasheet
    ("NVIDIA L40S", "bfloat16", "highest", ("L40S", 362)),
    ("NVIDIA L4", "bfloat16", "highest", ("L4", 121)),
    ("Tesla V100-SXM2-16GB", "bfloat16", "highest", None),  # no bf16 on Volta
])
def test_a_chip_s_peak_is_its_datasheet_s_for_the_dtype_its_matrix_units_run(name, dtype, precision, peak):
    assert peak_tflops(name, math_dtype(dtype, precision)) == peak


@pytest.mark.e2e
def test_a_calibrated_chip_s_rate_is_what_a_run_is_read_against(run_fastmon, tmp_path):
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = run_fastmon("doctor", "--calibrate", env_extra=cache)
    assert out.returncode == 0, out.stderr
    cpu, rate = re.search(r"^  (CPU .+): float32 ([\d.]+) TFLOP/s$", out.stdout, re.M).groups()
    assert float(rate) > 0
    assert run_fastmon("run", "--headless", MLP, env_extra=cache).returncode == 0
    summary = json.loads(run_fastmon("report", "--json", env_extra=cache).stdout)
    compute = summary["compute"]
    assert compute["measured_tflops"] == float(rate)
    assert compute["of_measured"] == pytest.approx(compute["tflops_per_s"] / float(rate), abs=1e-3)
    assert cpu in json.loads((tmp_path / "cache" / "fastmon" / "calibration.json").read_text())


@pytest.mark.e2e
def test_a_compiled_mlp_is_counted_on_shapes_as_its_eager_model_and_nothing_recompiles(run_fastmon, report,
                                                                                       tmp_path):
    bare = subprocess.run([sys.executable, MLP, "--compile"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=clean_env())
    out = run_fastmon("run", "--headless", MLP, "--compile")
    assert out.returncode == 0, out.stderr
    assert re.search(r"^weights \w+$", out.stdout, re.M).group() == bare.stdout.strip()
    summary = report()
    compute = summary["compute"]
    if not hasattr(torch.compiler, "set_stance"):  # torch 2.4-2.5: said, not guessed
        assert "this torch cannot run it as eager code on shapes alone" in compute["flops_why"]
        return
    assert compute["flops_per_step"] == by_hand()  # the eager count's, exactly
    assert (summary["compile"]["graphs"], summary["compile"]["recompiles"]) == (1, 0)  # nothing compiled for shapes
    counted = compute["counted_at_step"]
    assert {(u["step"], u["why"]) for u in summary["startup_steps"]} >= {(counted, "FLOP count"),
                                                                        (counted + 1, "FLOP count")}


@pytest.mark.e2e
@pytest.mark.parametrize("compiled", [False, True])
def test_gradient_accumulation_counts_every_micro_batch_of_the_step(run_fastmon, report, compiled):
    # 4 micro-batches of 64 to an optimizer step: a step's FLOPs are 4 forwards+backwards
    out = run_fastmon("run", "--headless", MLP, "8", "--accumulate", "4", *(["--compile"] if compiled else []))
    assert out.returncode == 0, out.stderr
    summary = report()
    if compiled and not hasattr(torch.compiler, "set_stance"):
        return  # torch 2.4-2.5 count no compiled model (the test above says how it is said)
    assert summary["compute"]["flops_per_step"] == 4 * by_hand()
    assert summary["compute"]["flops_per_sample"] == by_hand() / BATCH  # the step's samples: all four batches'


@pytest.mark.e2e
def test_a_count_that_fails_costs_the_count_not_the_step_timing(run_fastmon, report, tmp_path):
    script = tmp_path / "train.py"  # torch's FLOP formulas cannot be imported: the count fails at its start
    script.write_text("import sys\nsys.modules['torch.utils.flop_counter'] = None\n" + MLP.read_text())
    out = run_fastmon("run", "--headless", script)
    assert out.returncode == 0, out.stderr
    summary = report()
    assert summary["compute"]["flops_per_step"] is None
    assert [f["part"] for f in summary["probe_faults"]] == ["flops"]
    assert summary["timed_steps"] >= 15  # every step of this short run is still timed


@pytest.mark.e2e
def test_the_counted_step_costs_its_neighbours_time_not_seconds(run_fastmon, report, tmp_path):
    # A manual SGD loop on a tiny model: the count's own cost is all there is to see. Its
    # first dispatch through a Python mode once imported torch._dynamo there (1.5-3.7 s).
    script = tmp_path / "sgd.py"
    script.write_text("import torch\nw = torch.randn(8, 1, requires_grad=True)\n"
                      "for step in range(40):\n    (torch.randn(64, 8) @ w).pow(2).mean().backward()\n"
                      "    with torch.no_grad():\n        w -= 0.01 * w.grad\n        w.grad.zero_()\n")
    out = run_fastmon("run", "--headless", "--every-step", script)
    assert out.returncode == 0, out.stderr
    summary = report()
    counted = summary["compute"]["counted_at_step"]
    walls = dict(sqlite3.connect(next((tmp_path / "fastmon-runs").iterdir()) / "run.sqlite").execute(
        "SELECT step, wall FROM steps WHERE rank = 0"))
    neighbours = [walls[s] for s in range(counted + 1, counted + 21)]
    # the count's own operators through a Python mode: ~45-60 ms on the 2-core VM, against
    # the seconds an import of torch._dynamo there once cost
    assert walls[counted] < max(neighbours) + 0.2, (walls[counted], neighbours)


@pytest.mark.parametrize("run", sorted(p.name for p in RECORDED.iterdir()))
def test_a_recorded_run_gets_today_s_advice_and_one_verdict_on_every_surface(run):
    # The H200 records held advice of older rules: "conv net" advice for GPT-2, "batch None",
    # DataLoader(..., batch_size=x2) for nanoGPT, which has no DataLoader
    summary = summarize(RECORDED / run)
    assert summary["advice_rederived"]  # recorded before records were stamped with their rules
    advice = {a["id"]: a for a in summary["advice"]}
    assert not {"cudnn.benchmark", "channels_last"} & set(advice)  # no convolution in these models
    assert "None" not in json.dumps([[a["evidence"], a["fix"]] for a in advice.values()])
    if "nanogpt" in run:
        assert "DataLoader" not in json.dumps(summary["advice"])
    verdict = summary["verdict"]
    assert set(verdict) == {"issue", "why", "next"}
    assert ReplaySource(RECORDED / run).snapshot().verdict.as_dict() == verdict
    text = format_text(summary)
    assert re.search(r"  verdict( \(steps \d+-\d+, after fastmon's changes\))?: " + re.escape(
        f"{verdict['issue']} — {verdict['why']} — next: {verdict['next']}"), text)
    assert "derived again with today's rules" in text or not [a for a in summary["advice"] if a["kind"] == "problem"]


@pytest.mark.e2e
def test_a_gans_flops_a_step_hold_both_optimizers_steps(run_fastmon, report):
    # the discriminator's step and the generator's end a step each: the count covers one of each
    out = run_fastmon("run", "--headless", SCRIPTS / "gan.py")
    assert out.returncode == 0, out.stderr
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    discriminator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    bce = nn.BCEWithLogitsLoss()
    with FlopCounterMode(display=False) as counter:  # one batch of the script's loop, both steps
        fake = generator(torch.randn(16, 4))
        (bce(discriminator(torch.randn(16, 8)), torch.ones(16, 1))
         + bce(discriminator(fake.detach()), torch.zeros(16, 1))).backward()
        bce(discriminator(fake), torch.ones(16, 1)).backward()
    compute = report()["compute"]
    assert compute["counted_steps"] == 2
    assert compute["flops_per_step"] * 2 == counter.get_total_flops()
    assert "one for each optimizer" in out.stderr


@pytest.mark.e2e
def test_an_lstms_flops_say_what_they_miss(run_fastmon, report):
    # torch has no FLOP formula for an LSTM: the count is a floor, and says which module it missed
    out = run_fastmon("run", "--headless", ROOT / "tests" / "clients" / "sequence_first.py")
    assert out.returncode == 0, out.stderr
    compute = report()["compute"]
    (missed,) = [u for u in compute["uncounted"] if u["module"] == "LSTM"]
    assert "rnn" in missed["operator"] and 0 < missed["forward_share"] < 1
    assert "compute: at least " in out.stderr and "not counted (torch has no FLOP formula" in out.stderr
    assert "flops_per_token_estimate" not in compute  # 6N + attention is a transformer's estimate
