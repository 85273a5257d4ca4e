"""Third-party training code run unchanged under fastmon (tests/clients/): the script's
own step count and the samples it trained on are what fastmon records, exactly; the facts
name the framework and describe the model rightly; nothing of fastmon's shows in dynamo's
graph or the script's output."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
import shutil
import sqlite3

import pytest
import torch

from conftest import ROOT, SCRIPTS, advised_for_the_code, run_dirs

CLIENTS = ROOT / "tests" / "clients"


def own_count(stdout: str) -> tuple[int, int]:
    """The script's own 'steps N samples M' line."""
    found = re.search(r"^steps (\d+) samples (\d+)", stdout, re.M)
    assert found, stdout[-2000:]
    return int(found[1]), int(found[2])


def facts_of(tmp_path) -> dict:
    (run,) = run_dirs(tmp_path)
    db = sqlite3.connect(run / "run.sqlite")
    try:
        return {key: json.loads(value) for key, value in db.execute("SELECT key, value FROM facts ORDER BY t")}
    finally:
        db.close()


def assert_untouched(out) -> None:
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fastmon: the probe" not in out.stderr  # no probe part failed
    assert "Dynamo does not know" not in out.stderr  # dynamo met none of fastmon's calls
    breaks = re.findall(r"Graph break in user code at (\S+)", out.stderr)
    import fastmon.probe

    probe = str(Path(fastmon.probe.__file__).resolve().parent)  # where it is installed, whatever the folder's name
    assert not [b for b in breaks if str(Path(b.split(":")[0]).resolve()).startswith(probe)], breaks


CASES = {  # client: (arguments, framework, model class)
    "hf_trainer.py": ((), "transformers.Trainer", "GPT2LMHeadModel"),
    "accelerate_loop.py": ((), "accelerate", "Sequential"),
    "lightning_datamodule.py": ((), "lightning", "Sequential"),  # training_step calls self.net
    "optimizerless.py": ((), None, "Linear"),
    "sequence_first.py": ((), "plain", "RNNModel"),
    "ema_validation.py": ((), "plain", "Sequential"),
    "two_optimizers.py": ((), "plain", "Sequential"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("client", sorted(CASES))
def test_a_client_is_counted_exactly_and_described_rightly(run_fastmon, report, tmp_path, client):
    arguments, framework, model = CASES[client]
    if framework == "transformers.Trainer":
        from transformers.utils import is_torch_available

        if not is_torch_available():  # transformers 5 needs torch 2.6; .ci/run tests fastmon on 2.4.1 too
            pytest.skip("this transformers does not run on this torch")
    out = run_fastmon("run", "--headless", CLIENTS / client, *arguments, timeout=280)
    assert_untouched(out)
    steps, samples = own_count(out.stdout)
    summary = report()
    assert (summary["steps"], summary["samples"]) == (steps, samples)
    facts = facts_of(tmp_path)
    if framework:
        assert facts["framework"]["name"] == framework
    assert facts[f"model.{model}"]["conv"] is False  # transformers' Conv1D is a linear layer
    assert "None" not in json.dumps([a["evidence"] + a["fix"] for a in summary["advice"]])
    # healthy code: no problem advised (issue 25's false alarms: num_workers on in-memory data)
    assert advised_for_the_code(summary["advice"]) == []
    assert summary["memory"]["workers_seen_max"] == 0  # none of these starts a DataLoader worker
    if client == "two_optimizers.py":
        assert {"optimizer.Adam", "optimizer.Adam.2"} <= set(facts)
    if client == "sequence_first.py":
        assert facts["model.RNNModel"]["sequence_first"] is True
    # a language model's input ids are tokens; a float input's are none
    assert (summary["tokens"] is not None) == (client in ("hf_trainer.py", "sequence_first.py"))


@pytest.mark.e2e
@pytest.mark.parametrize("client, arguments, batch", [("hf_trainer.py", ("--max-steps", "20"), 8),
                                                      ("hf_trainer.py", ("2", "--max-steps", "12"), 16),
                                                      ("accelerate_loop.py", (), 16), ("ema_validation.py", (), 32),
                                                      ("lightning_datamodule.py", (), 32)])
def test_a_loop_that_fetches_a_batch_ahead_gives_each_step_its_own(run_fastmon, report, tmp_path, client, arguments,
                                                                    batch):
    # accelerate's DataLoaderShard (under the Trainer too), Lightning's fetcher and timm's
    # PrefetchLoader fetch one batch ahead: each epoch's first step once held two and its
    # last none, and a run stopped by max_steps counted a batch never trained on (808 of 800)
    if client == "hf_trainer.py":
        from transformers.utils import is_torch_available

        if not is_torch_available():
            pytest.skip("this transformers does not run on this torch")
    out = run_fastmon("run", "--headless", CLIENTS / client, *arguments, timeout=280)
    assert_untouched(out)
    steps, samples = own_count(out.stdout)
    assert (report()["steps"], report()["samples"]) == (steps, samples)
    (run,) = run_dirs(tmp_path)
    per_step = [n for (n,) in sqlite3.connect(run / "run.sqlite").execute("SELECT samples FROM steps ORDER BY step")]
    assert per_step == [batch] * steps


@pytest.mark.e2e
@pytest.mark.parametrize("arguments", [("--workers", "2", "--persistent"), ("--workers", "2", "--persistent",
                                                                           "--break-after", "7")])
def test_a_fetched_ahead_loader_with_persistent_workers_gives_each_step_its_own(run_fastmon, tmp_path, arguments):
    # a persistent-workers iterator looks the same just before its end and after: each
    # epoch's first step held two batches and its last none until its StopIteration was watched
    out = run_fastmon("run", "--headless", SCRIPTS / "fetch_ahead.py", *arguments)
    assert_untouched(out)
    steps, samples = own_count(out.stdout)
    (run,) = run_dirs(tmp_path)
    per_step = [n for (n,) in sqlite3.connect(run / "run.sqlite").execute("SELECT samples FROM steps ORDER BY step")]
    assert len(per_step) == steps and per_step == [16] * steps and samples == 16 * steps


@pytest.mark.e2e
def test_recompilations_are_counted_as_dynamo_logs_them_and_advised_at_their_line(run_fastmon, report):
    # dynamo's counters["recompiles"] stays empty on torch 2.13: a loop recompiling five
    # times was reported "0 recompilations" and the rule could never fire
    out = run_fastmon("run", "--headless", SCRIPTS / "recompiles.py", timeout=280,
                      env_extra={"TORCH_LOGS": "recompiles"})
    assert out.returncode == 0, out.stderr[-3000:]
    logged = out.stderr.count("Recompiling function")
    summary = report()
    assert logged == 5 and summary["compile"]["recompiles"] == logged
    reason = summary["compile"]["recompile_reasons"][-1]  # the guard that failed, where dynamo says it (2.5+)
    assert "mode ==" in reason or (torch_before(2, 5) and reason.startswith("a guard failed"))
    advice = {a["id"]: a for a in summary["advice"]}["compile_recompiles"]
    # the guarded line where dynamo names it (torch 2.13: 14), else the compiled function's (11)
    assert re.search(r"recompiles\.py:(14|11)$", advice["location"]) and "5 recompilations" in advice["evidence"]


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["function", "method", "step"])
def test_a_compiled_model_compiles_as_without_fastmon(run_fastmon, report, tmp_path, how):
    """torch.compile(model), model.compile() and a compiled training step: dynamo logs no
    graph break and no recompilation in fastmon's code; the step that compiled is left out
    of the shares and said to be."""
    out = run_fastmon("run", "--headless", CLIENTS / "compiled.py", "--how", how, "--epochs", "3", timeout=280,
                      env_extra={"TORCH_LOGS": "graph_breaks,recompiles"})
    assert_untouched(out)
    assert "Recompiling function" not in out.stderr
    counts = dict(re.findall(r"^(graph_breaks|recompiles|unique_graphs) (\d+)", out.stdout, re.M))
    assert counts["recompiles"] == "0"
    if how != "step":
        assert counts == {"graph_breaks": "0", "recompiles": "0", "unique_graphs": "1"}
    steps, samples = own_count(out.stdout)
    summary = report()
    assert (summary["steps"], summary["samples"]) == (steps, samples)
    assert summary["startup_steps"] and summary["startup_steps"][0]["step"] == 0
    assert summary["steady_steps"] < summary["steps"]
    assert summary["compile"]["graphs"] == int(counts["unique_graphs"])
    assert summary["compile"]["recompiles"] == 0
    assert re.search(r"start-up, left out of the rates, shares and medians: step 0: [\d.]+ s \(torch.compile\)", out.stderr)
    assert summary["memory"]["workers_seen_max"] == 0
    # its kernels pass no dispatch mode: its eager code is counted on shapes (with nothing
    # compiled again, as the counts above say); a whole compiled step holds no forward to see
    compute = summary["compute"]
    if how == "step" or not hasattr(torch.compiler, "set_stance"):
        assert compute["flops_per_step"] is None and "compiled" in compute["flops_why"]
    else:
        eager = run_fastmon("run", "--headless", CLIENTS / "compiled.py", "--how", "eager", "--epochs", "1")
        assert eager.returncode == 0
        # on shapes, attention takes torch's math path, whose matmuls have formulas; eager on a
        # CPU runs a fused attention kernel that has none: QK^T and AV of 2 blocks, 4 heads of
        # 16, 16 tokens, 32 samples, forward and twice that backward
        attention = 2 * 3 * 2 * (2 * 16 * 16 * 16) * 4 * 32
        assert compute["flops_per_step"] == report()["compute"]["flops_per_step"] + attention


@pytest.mark.e2e
def test_samples_stay_exact_across_a_live_batch_size_change(run_fastmon, report):
    out = run_fastmon("run", "--headless", ROOT / "tests" / "scripts" / "batch_change_counted.py")
    assert out.returncode == 0, out.stderr
    steps, samples = own_count(out.stdout)
    assert samples == 3000
    summary = report()
    assert (summary["steps"], summary["samples"]) == (steps, samples)


NANOGPT = ROOT / "benchmarks" / "clients" / "nanogpt"
NANOGPT_SMALL = dict(batch_size=8, block_size=64, n_layer=2, n_head=2, n_embd=64, max_iters=40)


@pytest.mark.e2e
def test_nanogpt_as_published_is_counted_exactly_and_its_flops_match_its_own_formula(run_fastmon, report, tmp_path):
    # karpathy/nanoGPT's train.py, unchanged, small enough for a CPU: every iteration is an
    # optimizer step of batch_size sequences (its evaluation at iteration 0 is not training)
    import numpy as np

    shutil.copytree(NANOGPT, tmp_path, dirs_exist_ok=True)
    data = tmp_path / "data" / "shakespeare_char"
    data.mkdir(parents=True)
    np.random.default_rng(0).integers(0, 65, 100_000, dtype=np.uint16).tofile(data / "train.bin")
    np.random.default_rng(1).integers(0, 65, 10_000, dtype=np.uint16).tofile(data / "val.bin")
    (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 65}))
    small = [f"--{key}={value}" for key, value in NANOGPT_SMALL.items()]
    out = run_fastmon("run", "--headless", "train.py", "config/train_shakespeare_char.py", "--device=cpu",
                      "--compile=False", "--dtype=float32", "--eval_interval=1000", "--eval_iters=2",
                      "--log_interval=10", "--lr_decay_iters=40", *small, timeout=280)
    assert_untouched(out)
    assert "iter 40: loss" in out.stdout
    summary = report()
    steps = NANOGPT_SMALL["max_iters"] + 1  # iterations 0 to max_iters, each one step
    assert (summary["steps"], summary["samples"]) == (steps, steps * NANOGPT_SMALL["batch_size"])
    # nanoGPT's estimate_mfu: 6N + 12 L H Q T FLOPs a token; N by hand (no biases, the
    # position embedding left out, lm_head tied to the token embedding)
    layers, heads, width, tokens = (NANOGPT_SMALL[k] for k in ("n_layer", "n_head", "n_embd", "block_size"))
    params = 65 * width + layers * (12 * width**2 + 2 * width) + width
    formula = (6 * params + 12 * layers * heads * (width // heads) * tokens) * tokens * NANOGPT_SMALL["batch_size"]
    assert summary["compute"]["flops_per_step"] == pytest.approx(formula, rel=0.02)  # 365.1 vs 366.1 MFLOP
    # its tokens: "tokens per iteration will be: N", each iteration
    (per_iteration,) = map(int, re.findall(r"tokens per iteration will be: ([\d,]+)", out.stdout.replace(",", "")))
    assert summary["tokens"] == per_iteration * steps == steps * NANOGPT_SMALL["batch_size"] * tokens
    # MFU by tokens: nanoGPT's own estimate_mfu a token, 6N + 12 L H Q T
    assert summary["compute"]["flops_per_token_estimate"] == pytest.approx(formula / tokens / NANOGPT_SMALL[
        "batch_size"], rel=0.01)
    assert advised_for_the_code(summary["advice"]) == []


def torch_before(major: int, minor: int) -> bool:
    import torch

    return tuple(int(part) for part in torch.__version__.split(".")[:2]) < (major, minor)

