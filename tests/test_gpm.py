"""SM activity from NVML's GPM, read through a stand-in NVML (no GPU here): the sampler's
figures, the report's line and --json, and the dashboard's GPU panel. A GPU's own check is
benchmarks/gpu_check.py's."""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import sqlite3
import urllib.request
from types import SimpleNamespace

import pynvml
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT
from fastmon.compare import compare
from fastmon.compare import format_text as compare_text
from fastmon.headless import status_line
from fastmon.live_state import LiveView, RankView
from fastmon.prometheus import serve
from fastmon.records import RunRecord
from fastmon.report import format_text
from fastmon.samplers import GpuSampler
from fastmon.summary import summarize
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import ReplaySource
from fastmon.tui.widgets.run_header import RunHeader

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


def recorded_with(tmp_path, with_gpm: bool, util: int | None = None):
    """The H200 nanoGPT record, its GPU samples as the stand-in's sampler reads them (and
    NVML's utilization ``util`` where given)."""
    folder = tmp_path / GPU_RUN.name
    shutil.copytree(GPU_RUN, folder)
    sampler = GpuSampler(stand_in_nvml(["NVIDIA H200"], with_gpm={0} if with_gpm else set()))
    sampler.sample(set())
    gpm = {k: v for k, v in sampler.sample(set())[0].items() if k in ("gpm", "sm_active", "sm_occupancy",
                                                                       "tensor_active")}
    db = sqlite3.connect(folder / "run.sqlite")
    with db:
        for rowid, data in db.execute("SELECT rowid, data FROM samples WHERE source = 'gpu'").fetchall():
            devices = [dict(d, **gpm, **({"util": util} if util is not None else {})) for d in json.loads(data)]
            db.execute("UPDATE samples SET data = ? WHERE rowid = ?", (json.dumps(devices), rowid))
    db.close()
    return folder


def test_the_report_gives_sm_activity_beside_util_and_says_when_the_gpu_has_none(tmp_path):
    summary = summarize(recorded_with(tmp_path / "h200", with_gpm=True))
    device = summary["gpu"]["devices"][0]
    assert (device["sm_active_mean"], device["sm_occupancy_mean"], device["tensor_active_mean"]) == (41.0, 22.0, 30.0)
    assert device["gpm"] is True
    # over the same steps as the utilization beside it
    assert "busy 46% of the steps' time, SM active 41% (occupancy 22%, tensor pipes 30%)" in format_text(summary)
    without = summarize(recorded_with(tmp_path / "older", with_gpm=False))
    assert without["gpu"]["devices"][0]["sm_active_mean"] is None
    assert "SM active n/a (this GPU has no GPM)" in format_text(without)
    compared = compare_text(compare(tmp_path / "h200" / GPU_RUN.name, tmp_path / "older" / GPU_RUN.name))
    assert re.search(r"SM active in steps\s+41%\s+n/a", compared), compared
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
            assert "SM active 41%" in device_line and "SM active 41% (occupancy 22%" in over_the_run
        else:
            assert "SM active n/a (this GPU has no GPM)" in over_the_run


async def test_a_busy_gpu_whose_sms_are_mostly_idle_is_under_filled_on_every_screen(tmp_path):
    # NVML says a kernel ran 96% of the time; GPM says 41% of the SMs had work
    folder = recorded_with(tmp_path, with_gpm=True, util=96)
    summary = summarize(folder)
    assert summary["compute"]["bound"] == "under-filled" and summary["compute"]["sm_active_in_steps"] == 41.0
    assert summary["verdict"]["issue"] == "under-filled (SMs active 41%)"
    assert "verdict: under-filled (SMs active 41%)" in format_text(summary)
    app = FastmonApp(ReplaySource(folder))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("end")
        await pilot.pause(0.6)
        assert "under-filled (SMs active 41%)" in str(app.query_one(RunHeader).render())
    # live: the headless status line and Prometheus, from the same view of the run
    record = RunRecord(folder)
    rows = record.steps(0)
    view = LiveView(ranks={0: RankView(rows=tuple(rows[-200:]), steps=len(rows), samples=sum(r.samples for r in rows),
                                       wall=sum(r.wall for r in rows))},
                    facts=record.facts(), gpu=tuple(record.samples("gpu")), started=rows[0].t_end - 60, ended=rows[-1].t_end)
    line = status_line(view)
    assert "GPU 96% SM 41%" in line and "under-filled (SMs active 41%)" in line
    server, port, _ = serve(lambda: view, folder.name, "node0", 0)
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    scraped = {(sample.name, sample.labels.get("verdict") or sample.labels.get("gpu")): sample.value
               for family in text_string_to_metric_families(text) for sample in family.samples}
    assert scraped[("fastmon_bound", "under-filled")] == 1
    assert scraped[("fastmon_gpu_sm_active_ratio", "0")] == 0.41
    assert scraped[("fastmon_gpu_tensor_active_ratio", "0")] == 0.30
