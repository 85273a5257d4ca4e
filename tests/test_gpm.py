"""SM activity from NVML's GPM, read through a stand-in NVML (no GPU here): the sampler's
figures, the report's line and --json, and the dashboard's GPU panel. A GPU's own check is
benchmarks/gpu_check.py's."""

from __future__ import annotations

import ctypes
import json
import shutil
import sqlite3
from types import SimpleNamespace

import pynvml

from conftest import ROOT
from fastmon.report import format_text
from fastmon.samplers import GpuSampler
from fastmon.summary import summarize
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import ReplaySource

GPU_RUN = ROOT / "tests" / "data" / "h200-nanogpt-eager-1"
# what the stand-in's GPM reads between two samples: % of the period
SM_ACTIVE, SM_OCCUPANCY, TENSOR_ACTIVE = 41.0, 22.0, 30.0


def stand_in_nvml(names: list[str], with_gpm: set[int]) -> SimpleNamespace:
    """pynvml's calls fastmon makes, for GPUs named ``names``; those in ``with_gpm`` have
    GPM (Hopper and later). pynvml's own structures and constants."""
    readings = {pynvml.NVML_GPM_METRIC_SM_UTIL: SM_ACTIVE, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: SM_OCCUPANCY,
                pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: TENSOR_ACTIVE}

    def gpm_support(handle):
        if handle not in with_gpm:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(isSupportedDevice=1)

    def metrics_get(request):
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        assert ctypes.addressof(request.sample1.contents) != ctypes.addressof(request.sample2.contents)
        for i in range(request.numMetrics):
            request.metrics[i].value = readings[request.metrics[i].metricId]
            request.metrics[i].nvmlReturn = pynvml.NVML_SUCCESS
        return request

    return SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(names), nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlSystemGetDriverVersion=lambda: "570.1", nvmlDeviceGetName=lambda h: names[h],
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=97),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=2**33, total=2**37),
        nvmlDeviceGetPowerUsage=lambda h: 300_000, nvmlDeviceGetClockInfo=lambda h, which: 1980,
        nvmlDeviceGetTemperature=lambda h, which: 50, nvmlDeviceGetComputeRunningProcesses=lambda h: [],
        NVML_CLOCK_SM=pynvml.NVML_CLOCK_SM, NVML_CLOCK_MEM=pynvml.NVML_CLOCK_MEM,
        NVML_TEMPERATURE_GPU=pynvml.NVML_TEMPERATURE_GPU, NVML_SUCCESS=pynvml.NVML_SUCCESS,
        NVML_GPM_METRICS_GET_VERSION=pynvml.NVML_GPM_METRICS_GET_VERSION,
        NVML_GPM_METRIC_SM_UTIL=pynvml.NVML_GPM_METRIC_SM_UTIL,
        NVML_GPM_METRIC_SM_OCCUPANCY=pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
        NVML_GPM_METRIC_ANY_TENSOR_UTIL=pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        c_nvmlGpmMetricsGet_t=pynvml.c_nvmlGpmMetricsGet_t,
        nvmlGpmQueryDeviceSupport=gpm_support,
        nvmlGpmSampleAlloc=lambda: ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t()),
        nvmlGpmSampleGet=lambda handle, sample: sample, nvmlGpmMetricsGet=metrics_get)


def test_sm_activity_is_read_where_the_gpu_has_gpm_and_said_missing_elsewhere():
    sampler = GpuSampler(stand_in_nvml(["NVIDIA H200", "Tesla V100-SXM2-32GB"], with_gpm={0}))
    first = sampler.sample(set())
    assert first[0]["gpm"] and "sm_active" not in first[0]  # one sample is no period yet
    hopper, volta = sampler.sample(set())
    assert (hopper["sm_active"], hopper["sm_occupancy"], hopper["tensor_active"]) == (41.0, 22.0, 30.0)
    assert hopper["util"] == 97  # beside util, not instead of it
    assert volta["gpm"] is False and "sm_active" not in volta


def recorded_with(tmp_path, with_gpm: bool):
    """The H200 nanoGPT record, its GPU samples as the stand-in's sampler reads them."""
    folder = tmp_path / GPU_RUN.name
    shutil.copytree(GPU_RUN, folder)
    sampler = GpuSampler(stand_in_nvml(["NVIDIA H200"], with_gpm={0} if with_gpm else set()))
    sampler.sample(set())
    gpm = {k: v for k, v in sampler.sample(set())[0].items() if k in ("gpm", "sm_active", "sm_occupancy",
                                                                       "tensor_active")}
    db = sqlite3.connect(folder / "run.sqlite")
    with db:
        for rowid, data in db.execute("SELECT rowid, data FROM samples WHERE source = 'gpu'").fetchall():
            devices = [dict(d, **gpm) for d in json.loads(data)]
            db.execute("UPDATE samples SET data = ? WHERE rowid = ?", (json.dumps(devices), rowid))
    db.close()
    return folder


def test_the_report_gives_sm_activity_beside_util_and_says_when_the_gpu_has_none(tmp_path):
    summary = summarize(recorded_with(tmp_path / "h200", with_gpm=True))
    device = summary["gpu"]["devices"][0]
    assert (device["sm_active_mean"], device["sm_occupancy_mean"], device["tensor_active_mean"]) == (41.0, 22.0, 30.0)
    assert device["gpm"] is True
    assert "SM active 41% mean (occupancy 22%, tensor pipes 30%)" in format_text(summary)
    without = summarize(recorded_with(tmp_path / "older", with_gpm=False))
    assert without["gpu"]["devices"][0]["sm_active_mean"] is None
    assert "SM active n/a (this GPU has no GPM)" in format_text(without)
    # a record from before fastmon asked says nothing of it
    assert "SM active" not in format_text(summarize(GPU_RUN))


async def test_the_gpu_panel_shows_sm_activity_live_and_over_the_run(tmp_path):
    for with_gpm in (True, False):
        app = FastmonApp(ReplaySource(recorded_with(tmp_path / str(with_gpm), with_gpm)))
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(0.6)
            text = str(app.query_one("#gpu-text").render())
        device_line, over_the_run = text.splitlines()[0], " ".join(text.split())  # wrapped lines as one
        if with_gpm:
            assert "SM active 41%" in device_line and "SM active 41% mean (occupancy 22%" in over_the_run
        else:
            assert "SM active n/a (this GPU has no GPM)" in over_the_run
