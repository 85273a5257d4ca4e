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
