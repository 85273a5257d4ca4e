"""The monitor's psutil sampler, on real processes."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from fastmon.samplers import HostSampler


@pytest.mark.e2e
def test_a_process_that_exited_is_left_out_not_read_as_0_bytes():
    # The ended dashboard read "trainer: RSS 0 MiB" and its RSS line fell to 0: the last
    # sample caught the trainer after its exit, before the monitor reaped it.
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        sampler = HostSampler(child.pid)
        (alive,) = sampler.sample()["processes"]
        assert alive["pid"] == child.pid and alive["rss"] > 0
        child.stdin.close()
        deadline = time.monotonic() + 30
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sampler.sample()["processes"] == []
    finally:
        child.wait()


def test_another_jobs_load_is_read_from_the_latest_samples_when_the_steps_span_too_few():
    # Steps of 1 ms: a window of 200 steps spans 0.2 s, less than a sample's 0.5 s. The
    # torch.num_threads rule needs 3 samples: with the window's own, a busy neighbour went
    # unseen until after an anomaly trial had run on threads waiting for a core.
    from fastmon.session import LOAD_SAMPLES, cpu_during

    importing = [(t, 1.0, 0.0, 0.0, 1.1) for t in (-1.0, -0.5)]  # before the first step: the run's own churn
    readings = importing + [(t, 1.0, 0.0, 0.0, 2.0) for t in (0.0, 0.5, 1.0, 1.5)]  # trainer 1 core, machine 2
    seen = cpu_during(readings, (1.6, 1.8), since=0.0)
    assert seen == {"trainer": 1.0, "workers": 0.0, "children": 0.0, "others": 1.0, "samples": LOAD_SAMPLES}
    assert cpu_during(readings, (0.0, 1.5), since=0.0)["samples"] == 4  # a span that holds enough keeps its own
    assert cpu_during(readings, (0.1, 0.2), since=0.6)["samples"] == 2  # nothing from before the steps


def test_the_trainings_own_starting_workers_are_not_another_job():
    # Spawned workers restarting each epoch import torch for seconds before the sampler
    # knows them as workers: counted as another job, they made torch.num_threads fire on
    # a quiet machine (planted.py --mistake spawned).
    from fastmon.live_state import cpu_use
    from fastmon.session import cpu_during

    sample = {"cpu_per_core": [100.0, 100.0],
              "processes": [{"role": "trainer", "cpu": 20.0}, {"role": "starting", "cpu": 90.0},
                            {"role": "other", "cpu": 85.0}]}
    readings = [(t, *cpu_use(sample)) for t in (0.0, 0.5, 1.0)]
    assert cpu_during(readings, (0.0, 1.0), since=0.0)["others"] == pytest.approx(0.05)
