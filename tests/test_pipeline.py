"""Inside the data pipeline: each transform of a dataset's Compose, the rest of its
__getitem__ and the collate, timed where the batches are made (the training thread or the
DataLoader workers), in CPU and wall ms a sample; a stage that waits is told from one that
computes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import SCRIPTS, clean_env

# where the slow transform is, as the report names it (the script's lines move as it grows)
SLOW_BLUR = "slow_transform.py:" + str(next(n for n, line in enumerate(
    (SCRIPTS / "slow_transform.py").read_text().splitlines(), 1) if line.startswith("class SlowBlur")))


@pytest.mark.e2e
@pytest.mark.parametrize("workers,start", [(0, None), (1, None), (2, "spawn")])
def test_the_slow_transform_is_named_with_its_line_and_its_cpu_cost(run_fastmon, report, workers, start):
    more = ("--start", start) if start else ()
    out = run_fastmon("run", "--headless", SCRIPTS / "slow_transform.py", "--workers", workers, *more)
    assert out.returncode == 0, out.stderr
    alone = float(re.search(r"alone ([\d.]+) ms", out.stdout)[1])
    pipeline = report()["pipeline"]
    slowest = pipeline["stages"][0]
    assert (slowest["name"], slowest["where"]) == ("SlowBlur", SLOW_BLUR)
    assert slowest["cpu_ms"] == pytest.approx(alone, rel=0.25) and not slowest["waiting"]
    assert {s["name"] for s in pipeline["stages"]} == {"SlowBlur", "Scale", "Clamp", "collate_fn",
                                                        "the rest of __getitem__"}
    assert pipeline["workers"] == workers
    assert f"SlowBlur ({SLOW_BLUR}): " in out.stderr  # the report's line
    if workers:  # each worker process: how much of its fetching computes, how busy its core
        assert len(pipeline["worker_rows"]) == workers
        assert all(row["fetch_cpu_share"] > 0.5 for row in pipeline["worker_rows"]), pipeline["worker_rows"]
        handoff = {s["name"]: s for s in pipeline["batch_stages"]}["taking a batch from a worker"]
        assert 0 < handoff["cpu_ms"] < 20 and handoff["batches"] > 0


@pytest.mark.e2e
def test_two_workers_computing_on_two_cores_are_called_core_bound(run_fastmon, report):
    # a validation loader after it, of the same dataset class with other transforms and
    # workers of its own: the table is the training loader's, its workers only
    out = run_fastmon("run", "--headless", SCRIPTS / "slow_transform.py", "--workers", "2", "--batches", "200",
                      "--validate")
    assert out.returncode == 0, out.stderr
    advice = {a["id"]: a for a in report()["advice"]}["dataloader.num_workers"]
    assert "the workers fill the cores" in advice["title"] and advice["kind"] == "suggestion", advice
    assert re.search(r"the 2 workers keep [\d.]+ of 2 cores busy \(fetching, they compute \d+% of the time\)",
                     advice["evidence"])
    pipeline = report()["pipeline"]
    assert pipeline["dataset"] == "Images/Scale/SlowBlur/Clamp" and pipeline["others"] == ["Images/Clamp/Scale"]
    assert pipeline["workers"] == 2 == len(pipeline["worker_rows"]) and pipeline["processes"] == 2
    assert "data pipeline of Images (the training loader's)" in out.stderr


@pytest.mark.e2e
def test_a_read_that_waits_is_called_waiting_not_cpu(run_fastmon, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "slow_transform.py", "--workers", "1", "--sleepy")
    assert out.returncode == 0, out.stderr
    slowest = report()["pipeline"]["stages"][0]
    assert slowest["name"] == "the rest of __getitem__" and slowest["waiting"], slowest
    assert slowest["wall_ms"] > 1.5 and slowest["cpu_ms"] < 0.5


@pytest.mark.e2e
def test_a_data_bound_run_is_told_which_stage_to_make_cheaper(run_fastmon, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "slow_transform.py", "--batches", "300")
    assert out.returncode == 0, out.stderr
    summary = report()
    advice = {a["id"]: a for a in summary["advice"]}["data.slow_stage"]
    assert advice["location"] == SLOW_BLUR and "SlowBlur" in advice["title"]
    assert "after the copy to the GPU" in advice["fix"]
    assert summary["verdict"]["issue"].startswith("data-bound") and "SlowBlur" in summary["verdict"]["next"]


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [0, 2])
def test_reads_and_decodes_are_stages_and_every_sample_and_its_order_stay_as_without_fastmon(
        run_fastmon, report, tmp_path, workers):
    import os

    import torch
    from PIL import Image

    folder = tmp_path / "images"  # made here: the training process opens none before its DataLoader
    folder.mkdir()
    noise = torch.Generator().manual_seed(0)
    for i in range(96):
        data = torch.randint(0, 256, (64, 64, 3), dtype=torch.uint8, generator=noise).numpy()
        Image.fromarray(data).save(os.path.join(folder, f"{i:04d}.jpg"), quality=90)
    script = (SCRIPTS / "image_folder.py", "--workers", str(workers), "--folder", str(folder))
    bare = subprocess.run([sys.executable, *script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=clean_env())
    probed = run_fastmon("run", "--headless", *script)
    assert bare.returncode == 0 == probed.returncode, probed.stderr
    assert probed.stdout.count("batch ") == 24 and probed.stdout == bare.stdout  # each batch's samples, pixels, order
    stages = {s["name"]: s for s in report()["pipeline"]["stages"]}
    assert {"image decode (PIL)", "image open (PIL)"} <= stages.keys(), stages
    assert stages["image decode (PIL)"]["cpu_ms"] > 0.01  # a 64x64 JPEG: ~0.1 ms here


class Resize:
    size = 224

    def __call__(self, x):
        return x * 2


def test_a_timed_transform_is_its_transform_to_every_caller_and_to_pickle():
    import pickle

    from fastmon.probe.pipeline_stages import TimedStage, wrap_transforms

    class Dataset:
        transform = type("Compose", (), {"transforms": [Resize(), abs]})()

    wrap_transforms(Dataset)
    steps = Dataset.transform.transforms
    assert all(isinstance(step, TimedStage) for step in steps)
    assert steps[0](3) == 6 and steps[1](-2) == 2 and steps[0].size == 224  # same results, same attributes
    assert repr(steps[0]) == repr(steps[0].inner)
    assert isinstance(pickle.loads(pickle.dumps(steps[0])), Resize)  # a spawned worker gets the transform itself
    wrap_transforms(Dataset)
    assert not isinstance(Dataset.transform.transforms[0].inner, TimedStage)  # wrapped once


@pytest.mark.e2e
def test_a_loader_late_in_bursts_gets_a_deeper_prefetch_measured_live(run_fastmon, report):
    # 2 workers keep up but for one 60 ms read in 64 samples: alone, prefetch_factor=4 ran
    # 1.20x prefetch_factor=2 here, 8 no faster than 4 (two interleaved triples)
    out = run_fastmon("run", "--headless", "--apply", "auto", SCRIPTS / "bursty_reads.py", "--batches", "1600")
    assert out.returncode == 0, out.stderr
    summary = report()
    trial = {a["id"]: a for a in summary["applied"]}["dataloader.prefetch_factor"]
    assert trial["verdict"] == "faster" and trial["kept"] and trial["params"]["prefetch_factor"] > 2, trial
    assert trial["speedup_interval"][0] > 1.0
    assert trial["tried"][0]["params"] == {"prefetch_factor": 4}  # the search doubles from the current 2
    assert f"prefetch_factor={trial['params']['prefetch_factor']}" in out.stderr  # the line to make it permanent
    # changed in the running iterator (an iterable dataset's: the worker count is not changed
    # live there): no worker started again, the same two worker processes made every batch
    assert summary["pipeline"]["processes"] == 2 == summary["pipeline"]["workers"], summary["pipeline"]
    assert "dataloader.num_workers" not in {a["id"] for a in summary["applied"]}


@pytest.mark.e2e
@pytest.mark.parametrize("how", [("--workers", "0"), ("--iterable", "--workers", "2")])
def test_a_hugging_face_datasets_transform_is_a_stage(run_fastmon, report, how):
    # set_transform (map-style, called on each batch through __getitems__) and
    # IterableDataset.map (in each worker): ~0.25 ms of CPU an example either way
    out = run_fastmon("run", "--headless", SCRIPTS / "hf_transform.py", *how)
    assert out.returncode == 0, out.stderr
    stages = {s["name"]: s for s in report()["pipeline"]["stages"]}
    name, line = ("tokenize", 16) if "--iterable" in how else ("<lambda>", 30)
    assert stages[name]["where"] == f"hf_transform.py:{line}", stages
    assert stages[name]["cpu_ms"] == pytest.approx(0.25, rel=0.25)
    assert "the rest of items and collate" in stages


def test_a_stage_off_the_cpu_waiting_for_a_core_is_not_called_waiting(tmp_path):
    from fastmon.pipeline import pipeline_lines, pipeline_summary

    def worker(pid, delay_share):
        (tmp_path / "pipeline").mkdir(exist_ok=True)
        stages = {"__getitem__": {"samples": 100, "cpu_ns": 100_000_000, "wall_ns": 300_000_000, "where": "d.py:3"},
                  "collate_fn": {"samples": 100, "cpu_ns": 1_000_000, "wall_ns": 1_000_000, "where": None}}
        off = 200_000_000
        (tmp_path / "pipeline" / f"0-{pid}.json").write_text(json.dumps(
            {"pid": pid, "cpu_s": 1.0, "began": 1.0, "wall_s": 2.0, "stages": stages, "batch_stages": {},
             "off_cpu_ns": off, "run_delay_ns": int(off * delay_share) if delay_share is not None else None}))

    # 1 ms CPU and 3 ms wall a sample: off the CPU two thirds of the time
    worker(1, 0.9)  # a full machine: runnable, waiting for a core
    assert not pipeline_summary(tmp_path, None)["stages"][0]["waiting"]
    worker(1, 0.05)  # asleep: a read
    table = pipeline_summary(tmp_path, None)
    assert table["stages"][0]["waiting"] and table["core_wait"] == 0.05
    worker(2, None)  # a kernel that does not say: wall against CPU alone, and the line says so
    table = pipeline_summary(tmp_path, None)
    assert table["core_wait"] is None and table["stages"][0]["waiting"]
    assert "or for a core: this kernel does not tell" in "\n".join(pipeline_lines(table))


def test_a_librarys_transform_is_placed_by_its_path_in_site_packages_a_scripts_by_its_name():
    import torch

    from fastmon.probe.pipeline_stages import where_defined

    assert where_defined(torch.nn.Identity()).startswith("torch/nn/modules/linear.py:")  # timm's and torchvision's
    assert where_defined(Resize()).startswith("test_pipeline.py:")  # transforms.py are two files


class Augmented:  # a sample's random augmentation, drawn from its worker's own generator
    def __len__(self):
        return 96

    def __getitem__(self, i):
        import torch

        return torch.rand(4) + i


@pytest.mark.e2e
def test_prefetch_changed_in_place_changes_no_sample_nor_random_draw():
    import torch
    from torch.utils.data import DataLoader

    from fastmon.probe.loader_hooks import prefetch_in_place

    def batches(changes: dict) -> list:
        torch.manual_seed(0)
        it = iter(DataLoader(Augmented(), batch_size=4, num_workers=2))
        out = []
        for n, batch in enumerate(it):
            out.append(batch)
            if n in changes:
                prefetch_in_place(it, changes[n])  # deeper at 3, back to shallower at 10 (never raises)
        return out, torch.rand(1)  # the main process's generator: untouched

    bare, deeper = batches({}), batches({3: 8, 10: 2})
    assert len(bare[0]) == len(deeper[0]) == 24
    assert all(torch.equal(a, b) for a, b in zip(bare[0], deeper[0])) and torch.equal(bare[1], deeper[1])


def test_a_dataset_whose_attributes_raise_is_timed_under_its_class_never_failing_the_batch():
    from fastmon.probe.pipeline_stages import dataset_key, wrap_transforms

    class Metadata:  # torchvision-style: its three transforms set, unknown names looked up in a dict
        transform = type("Compose", (), {"transforms": [abs]})()
        target_transform = transforms = None

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return {"classes": 10}[name]  # KeyError for anything else (_format_kwargs, before)

    wrap_transforms(Metadata())
    assert dataset_key(Metadata()) == "Metadata/abs"

    class Raising(Metadata):
        transform = property(lambda self: 1 / 0)

    assert dataset_key(Raising()) == "Raising"  # the class alone, the batch goes on


def test_the_training_process_s_run_delay_counts_beside_its_workers(tmp_path):
    from fastmon.pipeline import pipeline_summary

    (tmp_path / "pipeline").mkdir()
    stages = {"__getitem__": {"samples": 100, "cpu_ns": 100_000_000, "wall_ns": 300_000_000, "where": None}}
    (tmp_path / "pipeline" / "0-1.json").write_text(json.dumps(
        {"pid": 1, "cpu_s": 1.0, "began": 1.0, "wall_s": 2.0, "datasets": {"D": stages}, "batch_stages": {},
         "off_cpu_ns": 200_000_000, "run_delay_ns": 180_000_000}))
    # the training process times the hand-off only (no fetch of its own): its delays say nothing
    fact = {"datasets": {}, "batch_stages": {"taking a batch from a worker": {"batches": 5, "cpu_ns": 5, "wall_ns": 9}}}
    table = pipeline_summary(tmp_path, {"pipeline": fact})
    assert table["core_wait"] == 0.9 and not table["stages"][0]["waiting"]


def test_a_forked_worker_never_times_as_the_trainer_even_without_a_run_folder(monkeypatch):
    import fastmon.probe.pipeline_stages as stages

    monkeypatch.delenv("FASTMON_RUN_DIR", raising=False)  # python -m fastmon.probe alone
    monkeypatch.setattr(stages, "_main_timing", lambda: True)  # the trainer's clock, copied by fork
    monkeypatch.setattr(stages, "_worker_path", None)
    stages._as_worker(None)
    assert stages._main_timing is None and stages._worker_path is None  # its batches go untimed
