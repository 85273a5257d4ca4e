"""`fastmon export`: a real run's record as a Chrome trace that Perfetto and
chrome://tracing accept, holding every step."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest

from conftest import ROOT, SCRIPTS


@pytest.mark.e2e
def test_every_step_is_a_slice_and_the_timed_ones_carry_their_phases(run_fastmon, report, tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "exit_code.py", "--steps", "300")
    assert out.returncode == 0, out.stderr
    out = run_fastmon("export")
    assert out.returncode == 0, out.stderr
    assert "ui.perfetto.dev" in out.stdout
    (trace_file,) = (tmp_path / "fastmon-runs").glob("*/trace.json")
    events = json.loads(trace_file.read_text())["traceEvents"]

    steps = [e for e in events if e["ph"] == "X"]
    summary = report()
    assert [e["name"] for e in steps] == [f"step {n}" for n in range(summary["steps"])]
    assert abs(sum(e["dur"] for e in steps) / 1e6 - summary["duration_s"]) < 1e-3
    for slice_ in steps:
        assert abs(slice_["dur"] / 1e3 - slice_["args"]["wall_ms"]) <= 2e-3  # rounded to the µs at each end
    # one after another on the rank's track, none starting inside the one before, in whole
    # µs (which every viewer reads back exactly)
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) for e in steps)
    assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in zip(steps, steps[1:]))

    timed = [e for e in steps if e["args"]["timed"]]
    startup = {f"step {u['step']}" for u in summary["startup_steps"]}  # the first: not of the steady run
    assert summary["timed_steps"] == len([e for e in timed if e["name"] not in startup]) < len(steps)
    for slice_ in timed:
        phases = sum(slice_["args"][p] for p in summary["phases"])
        assert abs(phases - slice_["args"]["wall_ms"]) <= 0.02 * slice_["args"]["wall_ms"]
    assert len([e for e in events if e["ph"] == "C" and e["name"] == "phase ms"]) == len(timed)

    names = {e["args"].get("name") for e in events if e["ph"] == "M"}
    assert {"rank 0", "steps (host)", "host (fastmon samples)"} <= names
    assert any(e["ph"] == "C" and e["name"].startswith("machine CPU") for e in events)


@pytest.mark.e2e
def test_advice_and_the_changes_applied_are_marked(run_fastmon, tmp_path):
    run = tmp_path / "starved"
    shutil.copytree(ROOT / "tests" / "data" / "starved-run", run)
    out = run_fastmon("export", run, "-o", "starved.json.gz")
    assert out.returncode == 0, out.stderr
    events = json.loads(gzip.decompress((tmp_path / "starved.json.gz").read_bytes()))["traceEvents"]
    marks = {e["name"] for e in events if e["ph"] == "i"}
    assert {"applied: num_workers=2", "applied: num_workers=4", "advice: dataloader.num_workers",
            "experiment 1: dataloader.num_workers: 2.4x samples/s, kept"} <= marks


@pytest.mark.e2e
def test_gpu_samples_and_device_times_become_counters_of_one_quantity_each(run_fastmon, tmp_path):
    # The recorded CPU run, with what a CUDA run's record adds (no GPU here: rows as the
    # session writes them, benchmarks/gpu_check.py covers a real device).
    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "starved-run", run)
    with sqlite3.connect(run / "run.sqlite") as db:
        (t,) = db.execute("SELECT min(t) FROM samples").fetchone()
        gpu = [{"index": 0, "util": 55, "mem_used": 3 * 2**30, "power_w": None, "sm_clock": 1400, "temp_c": 60}]
        db.execute("INSERT INTO samples VALUES (?, 'gpu', ?)", (t, json.dumps(gpu)))
        db.execute("INSERT INTO device_steps VALUES (0, 5, 0.010, 0.004, 0.005, 0.001, 0.0002)")
    assert run_fastmon("export", run).returncode == 0
    counters = {e["name"]: e["args"] for e in json.loads((run / "trace.json").read_text())["traceEvents"]
                if e["ph"] == "C"}
    assert counters["GPU 0 util %"] == {"util %": 55}
    assert counters["GPU 0 memory used GiB"] == {"memory used GiB": 3.0}
    assert "GPU 0 power W" not in counters  # not read on that GPU: no track, not a zero
    assert counters["device step ms (CUDA events)"] == {"ms": 10.0}
    assert counters["device phases ms"] == {"forward": 4.0, "backward": 5.0, "optimizer": 1.0}


@pytest.mark.e2e
def test_a_missing_run_is_named(run_fastmon):
    out = run_fastmon("export", "nowhere")
    assert out.returncode == 66
    assert "nowhere does not exist (give a run folder, as under fastmon-runs/, or latest)" in out.stderr
