"""Sharded and language-model runs: every collective counted as comm (exposed or overlapped),
tokens counted beside samples (docs/sharded.md)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import torch

from conftest import ROOT, SCRIPTS, run_dirs
from fastmon.advisor.window import Window
from fastmon.common.phases import StepRow
from fastmon.common.step_events import COMM_OVERLAP, ENTER, LEAVE, TOKENS, StepAssembler
from fastmon.probe.dist_hooks import COLLECTIVES
from fastmon.probe.tokens import NOT_READ, token_counts
from fastmon.summary import judge, window_summary
from test_step_events import MS, as_dicts, log, one_step

CLIENTS = ROOT / "tests" / "clients"
distributed = pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")
NOT_COLLECTIVES = re.compile(r"(get|new|is|init|destroy)_\w+|group|ProcessGroup|Work|ReduceOp|Backend|GroupMember")


def collective_calls(root: Path) -> set[str]:
    """The ``dist.<name>(`` calls in the python files under ``root``."""
    return {name for path in root.rglob("*.py") for name in re.findall(r"\bdist\.(\w+)\(", path.read_text())}


def test_every_collective_torchs_fsdp_calls_is_wrapped():
    # FSDP2 (torch.distributed.fsdp.fully_shard; _composable.fsdp before 2.6) and FSDP1
    # call these by name at run time: a name missing here was comm 0.0% (issue 51)
    base = Path(torch.distributed.__file__).parent
    calls = set()
    for folder in ("fsdp", "_composable/fsdp"):
        if (base / folder).is_dir():
            calls |= collective_calls(base / folder)
    assert {"all_gather_into_tensor", "all_gather_single"} & calls  # the scan found FSDP's all-gather
    missing = sorted(name for name in calls if not NOT_COLLECTIVES.fullmatch(name) and name not in COLLECTIVES)
    assert missing == []
    assert all(hasattr(torch.distributed, name) for name in calls if name in COLLECTIVES)


def test_a_collective_issued_without_waiting_is_overlapped_and_its_wait_exposed():
    step = one_step(0, 0)
    events = [*step[:-3],  # data, forward: 0-6 ms
              (ENTER + 6, 6 * MS), (LEAVE, 7 * MS),  # the call: 1 ms exposed
              (ENTER + 3, 7 * MS), (LEAVE, 10 * MS),  # backward while it runs
              (ENTER + 6, 10 * MS), (LEAVE, 11 * MS), (COMM_OVERLAP, 3 * MS),  # the wait: 1 ms, after 3 ms under way
              *step[-2:]]
    (row,) = as_dicts(StepAssembler(0).feed(log(*events), 0, 0.0))
    assert row["comm"] == pytest.approx(0.002) and row["comm_overlapped"] == pytest.approx(0.003)
    assert sum(row[p] for p in ("data_wait", "h2d", "forward", "backward", "optimizer", "sync", "comm", "other")) \
        == pytest.approx(row["wall"])  # overlapped time is beside the phases, not in the wall


def test_tokens_are_the_forwards_ids_and_the_mask_says_which_are_not_padding():
    ids = torch.randint(0, 100, (4, 16))
    mask = torch.ones(4, 16, dtype=torch.long)
    mask[:, 12:] = 0
    assert token_counts((ids,), {}) == (64, NOT_READ)
    assert token_counts((), {"input_ids": ids, "attention_mask": mask}) == (64, 48)
    assert token_counts(({"input_ids": ids, "attention_mask": mask},), None) == (64, 48)
    assert token_counts((torch.randn(4, 3, 8, 8),), {}) is None  # images
    assert token_counts((ids[0],), {}) is None  # not a batch
    # a mask on a device is not read: its sum would make the host wait for the device
    assert token_counts((), {"input_ids": ids, "attention_mask": mask.to("meta")}) == (64, NOT_READ)


def test_a_steps_tokens_add_its_forwards_and_untimed_steps_take_the_timed_ones_per_sample():
    first, second = one_step(0, 0), one_step(13, 1)  # 32 samples each
    first[3:3] = [(TOKENS, 2048, 1600), (TOKENS, 2048, -1)]  # two forwards, the second's mask not read
    second[3:3] = [(TOKENS, 4096, 3840)]
    rows = StepAssembler(0).feed(log(*first, *second), 0, 0.0)
    assert [(r.tokens, r.tokens_nonpad) for r in rows] == [(4096, None), (4096, 3840)]
    untimed = StepRow(0, 2, 0.0, 0.013, *[None] * 8, 16, *[None] * 9, 0)  # half a batch, untimed
    window = Window.from_rows([*rows, untimed])
    assert window.tokens == 4096 + 4096 + 16 * 128  # the timed steps' 128 tokens a sample
    assert window.tokens_nonpad == window.tokens * 3840 // 4096  # the share where masks told it
    assert Window.from_rows([untimed]).tokens is None  # a vision run's: none


def test_even_ranks_in_collectives_are_bandwidth_never_not_waiting_for_other_ranks():
    rows = [StepRow(0, s, 0.0, 0.1, 0.0, 0.0, 0.03, 0.04, 0.01, 0.0, 0.02, 0.0, 8, *[0] * 9, 1) for s in range(30)]
    own = window_summary(Window.from_rows(rows))
    ranks = [{"rank": r, **own} for r in (0, 1)]
    verdict = judge(own, ranks, None, None, on_gpu=False).bound
    assert verdict[0] == "compute-bound"
    assert "20% of the step is in collectives" in verdict[1] and "bandwidth" in verdict[1]
    assert "other ranks" not in verdict[1]


def comm_seconds(folder: Path) -> dict[int, float]:
    db = sqlite3.connect(folder / "run.sqlite")
    try:
        return dict(db.execute("SELECT rank, SUM(comm) FROM steps GROUP BY rank").fetchall())
    finally:
        db.close()


@pytest.mark.e2e
@distributed
def test_fsdp2_collectives_are_comm_as_the_script_times_them_and_its_tokens_counted(run_fastmon, report, tmp_path):
    out = run_fastmon("run", "--headless", "--every-step", "--nproc-per-node", "2", SCRIPTS / "fsdp2_lm.py",
                      "--steps", "40")
    assert out.returncode == 0, out.stderr[-3000:]
    own = {int(r): float(s) for r, s in re.findall(r"rank (\d) collectives ([\d.]+) s", out.stdout)}
    assert set(own) == {0, 1}
    recorded = comm_seconds(run_dirs(tmp_path)[-1])
    for rank in (0, 1):
        assert recorded[rank] == pytest.approx(own[rank], rel=0.25), (recorded, own)
    summary = report()
    for r in summary["ranks"]:
        assert r["phases"]["comm"] >= 0.10, summary["ranks"]
        assert r["tokens"] == 40 * 8 * 64  # 8 sequences of 64 a step
    assert summary["job"]["tokens"] == 2 * 40 * 8 * 64
    assert f"{2 * 40 * 8 * 64:,} tokens in all" in out.stderr  # the job's, beside the job's rate
    assert "not keep waiting for data or other ranks" not in summary["verdict"]["why"]
    assert "tokens/s" in out.stderr
    # FLOPs a token by 6N + attention, N unsharded (FSDP2's DTensor shards count whole): 2 blocks
    # of width 128 (attention 4x128x128 + 4x128, MLP 2x128x512 + 512 + 128, two norms), the
    # embedding and the head (512 x 128 + 512); no position embedding here
    blocks = 2 * (4 * 128 * 128 + 4 * 128 + 2 * 128 * 512 + 512 + 128 + 2 * 256)
    params = blocks + 512 * 128 + 128 * 512 + 512
    compute = summary["compute"]
    assert compute["flops_per_token_estimate"] == 6 * params + 12 * 2 * 128 * 64
    # torch counts nothing for CPU's fused attention kernel: named, with its share
    assert [u["module"] for u in compute["uncounted"]] == ["MultiheadAttention"]
    assert "compute: at least" in out.stderr
    # seen as sharded (the sharded-run rules read it; on a CPU none applies: test_advisor_rules)
    facts = sqlite3.connect(run_dirs(tmp_path)[-1] / "run.sqlite").execute(
        "SELECT value FROM facts WHERE key LIKE 'model.%'").fetchall()
    assert {"kind": "FSDP2", "units": 3, "reshard_after_forward": True, "param_dtype": None} in [
        json.loads(v)["sharding"] for (v,) in facts]


@pytest.mark.e2e
@distributed
def test_fsdp1_on_cpu_is_counted_and_its_collectives_are_comm(run_fastmon, report):
    out = run_fastmon("run", "--headless", "--nproc-per-node", "2", SCRIPTS / "fsdp2_lm.py", "--wrap", "fsdp1",
                      "--steps", "30", "--pad", "16")
    assert out.returncode == 0, out.stderr[-3000:]
    summary = report()
    for r in summary["ranks"]:
        assert r["steps"] == 30 and r["samples"] == 30 * 8
        assert r["phases"]["comm"] >= 0.05
        # the batch is a dict; 16 of 64 positions are padding, the mask in host memory
        assert (r["tokens"], r["tokens_nonpad"]) == (30 * 8 * 64, 30 * 8 * 48)


@pytest.mark.e2e
@distributed
def test_an_async_all_reduce_under_compute_is_overlapped_and_its_wait_exposed(run_fastmon, report, tmp_path):
    out = run_fastmon("run", "--headless", "--every-step", "--nproc-per-node", "2", SCRIPTS / "async_collective.py",
                      "--steps", "30", "--compute-ms", "20")
    assert out.returncode == 0, out.stderr[-3000:]
    own = {int(r): float(i) + float(w) for r, i, w in re.findall(r"rank (\d) issue ([\d.]+) s wait ([\d.]+) s",
                                                                 out.stdout)}
    recorded = comm_seconds(run_dirs(tmp_path)[-1])
    ranks = report()["ranks"]
    # the rank that issues last finds the other waiting: its collective is short, its issue's
    # call a larger part of it; the collective as the job ran it is overlapped
    overlapped = sum(r["comm_overlapped"] * r["duration_s"] for r in ranks)
    exposed = sum(r["phases"]["comm"] * r["duration_s"] for r in ranks)
    assert overlapped >= 0.8 * (overlapped + exposed), ranks
    for r in ranks:  # the exposed comm is the issue and the wait, as the script times them
        assert recorded[r["rank"]] == pytest.approx(own[r["rank"]], rel=0.5, abs=0.005), (recorded, own)


@pytest.mark.e2e
@pytest.mark.parametrize("count", ["all", "non_padding"])
def test_the_trainers_tokens_seen_are_fastmons_tokens(run_fastmon, report, count):
    from transformers.utils import is_torch_available

    if not is_torch_available():  # transformers 5 needs torch 2.6
        pytest.skip("this transformers does not run on this torch")
    # dynamic padding: untimed steps' non-padding tokens are the timed steps' share; --every-step counts each
    out = run_fastmon("run", "--headless", *(["--every-step"] if count == "non_padding" else []),
                      CLIENTS / "hf_trainer.py", "--tokens", count, timeout=280)
    assert out.returncode == 0, out.stderr[-3000:]
    (seen,) = map(int, re.findall(r"^tokens (\d+)$", out.stdout, re.M))
    summary = report()
    assert summary["tokens" if count == "all" else "tokens_nonpad"] == seen
    assert summary["tokens_per_s"] > summary["samples_per_s"]
