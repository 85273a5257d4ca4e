"""Inside the data pipeline: each transform of a dataset's Compose, the rest of its
__getitem__ and the collate, timed where the batches are made (the training thread or the
DataLoader workers), in CPU and wall ms a sample; a stage that waits is told from one that
computes."""

from __future__ import annotations

import re

import pytest

from conftest import SCRIPTS


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_the_slow_transform_is_named_with_its_line_and_its_cpu_cost(run_fastmon, report, workers):
    out = run_fastmon("run", "--headless", SCRIPTS / "slow_transform.py", "--workers", workers)
    assert out.returncode == 0, out.stderr
    alone = float(re.search(r"alone ([\d.]+) ms", out.stdout)[1])
    pipeline = report()["pipeline"]
    slowest = pipeline["stages"][0]
    assert (slowest["name"], slowest["where"]) == ("SlowBlur", "slow_transform.py:32")
    assert slowest["cpu_ms"] == pytest.approx(alone, rel=0.25) and not slowest["waiting"]
    assert {s["name"] for s in pipeline["stages"]} == {"SlowBlur", "Scale", "Clamp", "collate_fn",
                                                        "the rest of __getitem__"}
    assert pipeline["workers"] == workers
    assert "SlowBlur (slow_transform.py:32): " in out.stderr  # the report's line


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
    assert advice["location"] == "slow_transform.py:32" and "SlowBlur" in advice["title"]
    assert "after the copy to the GPU" in advice["fix"]
    assert summary["verdict"]["issue"].startswith("data-bound") and "SlowBlur" in summary["verdict"]["next"]


class Resize:
    size = 224

    def __call__(self, x):
        return x * 2


def test_a_timed_transform_is_its_transform_to_every_caller_and_to_pickle():
    import pickle

    from fastmon.probe.pipeline_stages import PipelinePart, TimedStage

    class Dataset:
        transform = type("Compose", (), {"transforms": [Resize(), abs]})()

    PipelinePart.watch(None, Dataset)
    steps = Dataset.transform.transforms
    assert all(isinstance(step, TimedStage) for step in steps)
    assert steps[0](3) == 6 and steps[1](-2) == 2 and steps[0].size == 224  # same results, same attributes
    assert repr(steps[0]) == repr(steps[0].inner)
    assert isinstance(pickle.loads(pickle.dumps(steps[0])), Resize)  # a spawned worker gets the transform itself
    PipelinePart.watch(None, Dataset)
    assert not isinstance(Dataset.transform.transforms[0].inner, TimedStage)  # wrapped once
