"""The dashboard, driven with Pilot: against a real training child, and over a recorded run."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import struct
import subprocess
import termios
import time
from collections import Counter
from types import SimpleNamespace

import pytest
from textual.app import App, ComposeResult
from textual.containers import Horizontal

from conftest import EXAMPLES, ROOT, clean_env, fastmon_cmd, run_dirs
from fastmon.session import RunOptions, Session
from fastmon.common.phases import PHASES
from fastmon.report import gpu_run_line
from fastmon.summary import summarize
from fastmon.tui.app import BUSY_REDRAW_EVERY, REDRAW_EVERY, FastmonApp
from fastmon.tui.messages import RunEnded
from fastmon.tui.colors import PHASE_COLORS
from fastmon.tui.screens.advice_screen import AdviceScreen
from fastmon.tui.screens.applied_screen import AppliedScreen
from fastmon.tui.screens.help_screen import HelpScreen
from fastmon.tui.screens.quit_screen import QuitScreen
from fastmon.tui.snapshot import LiveSource, ReplaySource, Snapshot
from fastmon.tui.widgets.advice_list import AdviceList
from fastmon.tui.widgets.gpu_panel import PLOT_EVERY, PLOT_MAX_GPUS, GpuPanel
from fastmon.tui.widgets.log_pane import LiveLine, LogPane
from fastmon.tui.widgets.outcome import Outcome
from fastmon.tui.widgets.run_header import RunHeader
from fastmon.tui.widgets.shares_bar import SharesBar
from fastmon.tui.widgets.step_breakdown import AXIS_WIDTH, CUT, EIGHTHS, StepBreakdown

RECORDED = ROOT / "tests" / "data" / "starved-run"
# fastmon's records of nanoGPT eager and compiled and a transformers Trainer run on an H200
# (copies of ../shared/gpu-runs/2026-12-04), and this repo's recorded starved run
RECORDED_RUNS = sorted((ROOT / "tests" / "data").iterdir())


def text_of(widget) -> str:
    return str(widget.render())


def chart_cells(breakdown) -> Counter:
    """The step breakdown's filled cells as drawn, by colour."""
    cells = Counter()
    for y in range(breakdown.content_size.height):
        for segment in breakdown.render_line(y):
            if segment.style is not None and segment.style.color is not None:
                cells[segment.style.color.name] += sum(ch in EIGHTHS[1:] for ch in segment.text)
    return cells


def notifications_of(app) -> str:
    return "\n".join(notification.message for notification in app._notifications)


async def wait_until(pilot, predicate, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("timed out waiting in the dashboard")
        await pilot.pause(0.1)


@pytest.fixture
def live_session(tmp_path):
    # long enough to outlast a test on a loaded machine (a trial speeds it up): each stops it
    options = RunOptions(target=[str(EXAMPLES / "starved.py"), "--epochs", "8", "--samples", "3200"],
                         apply="ask", runs_dir=str(tmp_path / "runs"))
    session = Session(options)
    session.start()
    yield session
    session.terminate()
    session.wait()


@pytest.mark.e2e
async def test_live_dashboard_follows_a_real_run_and_its_keys_work(live_session):
    app = FastmonApp(LiveSource(live_session), session=live_session)
    async with app.run_test(size=(160, 48)) as pilot:
        header = app.query_one(RunHeader)
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.steps >= 8)
        first = app.snapshot.steps
        await wait_until(pilot, lambda: app.snapshot.steps > first + 3)
        assert f"step {app.snapshot.steps}" in text_of(header)
        assert "running" in text_of(header)
        # the breakdown draws the steps, mostly in data_wait's colour
        await wait_until(pilot, lambda: sum(chart_cells(app.query_one(StepBreakdown)).values()) > 0)
        cells = chart_cells(app.query_one(StepBreakdown))
        assert cells.most_common(1)[0][0] == PHASE_COLORS["data_wait"]
        assert "STARVED" in str(app.query_one(SharesBar).render())
        gpu_text = text_of(app.query_one("#gpu-text")).replace("\n", " ")  # (a long line wraps)
        if not app.snapshot.gpu:
            assert "no GPU" in gpu_text or "NVML" in gpu_text
        # advice appears; `a` applies it as an experiment
        advice = app.query_one(AdviceList)
        ids = lambda: [advice.get_option_at_index(i).id for i in range(advice.option_count)]  # noqa: E731
        await wait_until(pilot, lambda: "dataloader.num_workers" in ids())
        # the most valuable first: more workers, or, where another job holds a core, the
        # thread count (fixed before the rest); the user moves to the one to apply
        assert ids()[0] in ("dataloader.num_workers", "torch.num_threads"), ids()
        advice.highlighted = ids().index("dataloader.num_workers")
        assert advice.selected_id == "dataloader.num_workers"
        await pilot.press("a")
        await wait_until(pilot, lambda: next(a for a in live_session.view.advice
                                             if a["id"] == "dataloader.num_workers")["status"] != "open")
        await wait_until(pilot, lambda: "Applying dataloader.num_workers" in notifications_of(app))
        # the change reads as an experiment: what is tried, how far the measurement is, against what
        await wait_until(pilot, lambda: "trying num_workers=" in text_of(app.query_one(Outcome)))
        assert "baseline" in text_of(app.query_one(Outcome))
        # p pauses the charts, not the training, and says so where the state is
        await pilot.press("p")
        assert app.paused
        assert "charts paused (p resumes)" in text_of(header)
        frozen = app.snapshot.steps
        await pilot.pause(1.0)
        assert app.snapshot.steps == frozen and live_session.view.rank(0).steps > frozen
        await pilot.press("p")
        assert not app.paused
        # ? help, c applied changes, enter detail: each a screen that escape closes; the
        # dashboard behind goes on
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))  # a busy machine is slow to show it
        behind = text_of(header)
        await wait_until(pilot, lambda: text_of(header) != behind)
        await pilot.press("escape")
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, AppliedScreen))
        await pilot.press("escape")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, AdviceScreen))
        await pilot.press("escape")
        # q asks; q again detaches (the training keeps going)
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("q")
    assert app.return_value == "detach"
    assert live_session.proc.poll() is None


@pytest.mark.e2e
@pytest.mark.parametrize("ask, stop", [("q", "ctrl+c"), ("ctrl+c", "ctrl+c")])
async def test_quit_can_stop_the_training(live_session, ask, stop):
    # Ctrl-C twice once opened a second dialog: the app's priority binding came first
    app = FastmonApp(LiveSource(live_session), session=live_session)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.steps >= 3)
        await pilot.press(ask)
        await wait_until(pilot, lambda: isinstance(app.screen, QuitScreen))  # a busy machine is slow to show it
        await pilot.press(stop)
        await wait_until(pilot, lambda: live_session.view.status != "running")
        assert len(app.screen_stack) == 1
    # Ctrl-C: KeyboardInterrupt, as python reports it; SIGTERM where the tests run with Ctrl-C
    # ignored (under nohup), which the training inherits (the next test)
    assert live_session.view.exit_code == (143 if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else 130)
    assert app.return_value is None


@pytest.mark.e2e
def test_a_stop_reaches_a_training_that_inherited_ctrl_c_ignored(tmp_path):
    # started under nohup, the training ignores SIGINT as python would: the dashboard's stop
    # once left it running, unsaid
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        session = Session(RunOptions(target=[str(ROOT / "tests" / "scripts" / "profiled_loop.py"), "--steps",
                                             "100000000"], runs_dir=str(tmp_path)))
        session.start()
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        deadline = time.monotonic() + 60
        while not session.view.ranks and time.monotonic() < deadline:
            time.sleep(0.1)
        session.interrupt()
        session.proc.wait(timeout=60)
        session.wait()
    finally:
        session.terminate()
        session.terminate()  # the second kills it, should the test fail
    assert session.view.exit_code == 143
    assert any("the training ignores Ctrl-C" in e.get("message", "") for e in session.view.events_of("notice"))


def dashboard_on(tmp_path, script: str, *args: str) -> tuple[Session, FastmonApp]:
    """A real run of tests/scripts/SCRIPT, started, and the dashboard that follows it."""
    session = Session(RunOptions(target=[str(ROOT / "tests" / "scripts" / script), *args],
                                 runs_dir=str(tmp_path / "runs")))
    session.start()
    return session, FastmonApp(LiveSource(session), session=session)


@pytest.mark.e2e
async def test_a_progress_bar_is_drawn_on_one_line_as_in_a_terminal(tmp_path):
    session, app = dashboard_on(tmp_path, "progress_bar.py")
    async with app.run_test(size=(160, 48)) as pilot:
        live = app.query_one(LiveLine)
        await wait_until(pilot, lambda: "epoch 0:" in str(live.render()) and "%|" in str(live.render()))
        await wait_until(pilot, lambda: app.snapshot.status != "running")
        # stdout and stderr come through two pipes: "done" and the bar's last newline in
        # either order; on a busy machine the dashboard redraws once a second
        log_lines = lambda: [str(line.text) for line in app.query_one(LogPane).lines]  # noqa: E731
        await wait_until(pilot, lambda: "done" in log_lines()[-2:], timeout=10)
        lines = log_lines()
        assert [line.split("|")[0].strip() for line in lines if "%|" in line] == ["epoch 0: 100%", "epoch 1: 100%"]
        assert not live.display  # nothing being drawn any more
        await pilot.press("q")


@pytest.mark.e2e
async def test_the_dashboard_stays_after_the_end_and_shows_the_exit_code(tmp_path):
    session, app = dashboard_on(tmp_path, "crash.py")
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: session.view.status == "crashed" and app.snapshot.status == "crashed")
        await pilot.pause(0.5)
        assert "crashed, exit code 1" in text_of(app.query_one(RunHeader))
        log = "\n".join(str(line.text) for line in app.query_one("#log").lines)
        assert "ValueError: bad metric at step 6" in log
        await pilot.press("q")
    assert app.return_value is None


@pytest.mark.e2e
async def test_a_busy_machine_slows_the_redraw_to_once_a_second(tmp_path):
    session, app = dashboard_on(tmp_path, "busy_cores.py", "--seconds", "10")
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            # From the first steps on, the workers spin on every core. Before them the pace
            # is whatever the machine is doing (torch's import alone, or the test before
            # winding down, can read busy for a moment on 2 cores).
            await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.steps > 0)
            await wait_until(pilot, lambda: app.redraw_every == BUSY_REDRAW_EVERY
                             and "redrawn once a second: the cores are busy" in text_of(app.query_one(RunHeader)))
            await wait_until(pilot, lambda: app.snapshot.status == "finished")
            assert app.redraw_every == REDRAW_EVERY
            await pilot.press("q")
    finally:
        session.terminate()
        session.wait()


async def test_replay_shows_the_numbers_of_the_report(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    report = summarize(run)
    app = FastmonApp(ReplaySource(run))
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await pilot.pause(0.3)
        header = text_of(app.query_one(RunHeader))
        assert f"step {report['steps']}" in header
        assert f"{report['steps_per_s']:,.2f} steps/s" in header
        assert f"{report['samples_per_s']:,.1f} samples/s" in header
        assert {p: round(v, 5) for p, v in app.snapshot.recent.shares.items()} == pytest.approx(
            current_phases(report), abs=2e-5)
        await pilot.press("home")
        assert app.source.position == 1
        await pilot.press("right")
        assert app.source.position == 2
        await pilot.press("end")
        assert app.source.position == report["steps"]
        # e writes the run's trace into its folder, and says where
        await pilot.press("e")
        trace_file = run / "trace.json"
        await wait_until(pilot, lambda: any("Trace written" in text_of(toast) for toast in app.query("Toast")))
        steps = [e for e in json.loads(trace_file.read_text())["traceEvents"] if e["ph"] == "X"]
        assert len(steps) == report["steps"]
        await pilot.press("q")


def current_phases(report: dict) -> dict:
    """The report's figures of the run as it is now: after the last change it kept, or the steady run."""
    return (report["changes"] or {}).get("after", report)["phases"]


@pytest.mark.e2e
async def test_the_finished_dashboard_shows_the_report_s_figures(tmp_path):
    # the demo's starved loader, fixed live: the screen at the end is the report's "after"
    options = RunOptions(target=[str(EXAMPLES / "starved.py"), "--epochs", "4"], apply="auto",
                         runs_dir=str(tmp_path / "runs"))
    session = Session(options)
    session.start()
    try:
        app = FastmonApp(LiveSource(session), session=session)
        async with app.run_test(size=(200, 60)) as pilot:
            await wait_until(pilot, lambda: app.snapshot is not None and app.snapshot.status == "finished")
            await pilot.pause(0.5)
            header = text_of(app.query_one(RunHeader))
            shown = {p: round(v, 5) for p, v in app.snapshot.recent.shares.items()}
            verdict, outcome = app.snapshot.verdict, text_of(app.query_one(Outcome))
            starved = "STARVED" in text_of(app.query_one(SharesBar))
            await pilot.press("q")
    finally:
        session.terminate()
        session.wait()
    report = summarize(session.run_dir)
    assert report["applied"] and report["changes"]  # a fix stayed in effect
    assert f"run {report['steps_per_s']:,.2f} steps/s, {report['samples_per_s']:,.1f} samples/s" in header
    assert shown == pytest.approx(current_phases(report), abs=2e-5)
    # one verdict: the end screen's, the replay's last step's, the report's and the json's
    assert verdict.as_dict() == report["verdict"] == ReplaySource(session.run_dir).snapshot().verdict.as_dict()
    assert f"{verdict.issue} — {verdict.why} — next: {verdict.next}" in outcome
    assert verdict.issue in header and starved == ("data-bound" in verdict.issue)
    text = subprocess.run(fastmon_cmd("report", session.run_dir), capture_output=True, text=True, env=clean_env(),
                          timeout=60).stdout
    after = report["changes"]["after"]  # the verdict is of the steps after the changes, and says so
    assert (f"  verdict (steps {after['from_step']}-{after['to_step']}, after fastmon's changes): {verdict.issue} — "
            f"{verdict.why} — next: {verdict.next}") in text


@pytest.mark.parametrize("recorded", RECORDED_RUNS, ids=lambda p: p.name)
async def test_the_replay_at_its_end_shows_the_report_s_figures(tmp_path, recorded):
    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    report = summarize(run)
    app = FastmonApp(ReplaySource(run))
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause(0.3)
        header = text_of(app.query_one(RunHeader))
        assert f"run {report['steps_per_s']:,.2f} steps/s, {report['samples_per_s']:,.1f} samples/s" in header
        shown = {p: round(v, 5) for p, v in app.snapshot.recent.shares.items()}
        assert shown == pytest.approx(current_phases(report), abs=2e-5)
        gpu_text = text_of(app.query_one("#gpu-text")).replace("\n", " ")  # (a long line wraps)
        for device in (report["gpu"].get("devices") or []):
            assert gpu_run_line(device) in gpu_text
        assert app.snapshot.verdict.as_dict() == report["verdict"]  # advice of an older record derived again
        assert report["advice_rederived"] and f"next: {report['verdict']['next']}" in text_of(app.query_one(Outcome))
        await pilot.press("q")


class PanelsOnly(App):
    CSS_PATH = ROOT / "tui" / "fastmon.tcss"

    def compose(self) -> ComposeResult:
        with Horizontal(id="panels"):
            yield GpuPanel(id="gpu-panel")


def gpu_snapshot(count: int) -> SimpleNamespace:
    # NVML samples as the session records them (no GPU here; benchmarks/gpu_check.py reads real ones)
    gpus = [{"index": i, "name": "NVIDIA H200", "util": 40 + i, "mem_used": 20 * 2**30, "mem_total": 141 * 2**30,
             "power_w": 300.0, "sm_clock": 1980, "temp_c": 50, "process_mem": 18 * 2**30} for i in range(count)]
    history = {i: {"util": [40.0] * 30, "mem": [14.0] * 30} for i in range(count)}
    return SimpleNamespace(gpu=gpus, gpu_note="", gpu_history=history, gpu_run=[],
                           torch_memory={"allocated": 2**34, "reserved": 2**35, "peak": 2**35})


@pytest.mark.parametrize("count", [1, 8])
async def test_every_gpu_of_a_node_has_its_row(count):
    app = PanelsOnly()
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.query_one(GpuPanel)
        panel.show(gpu_snapshot(count))
        await pilot.pause()
        rows = app.query_one("#gpu-text")
        lines = text_of(rows).splitlines()
        if count <= PLOT_MAX_GPUS:  # nvitop's two rows a GPU, with bars; then torch's allocator
            assert rows.region.height == 2 * count + 1
            assert lines[0].startswith("GPU0 NVIDIA H200  50°C  300 W  SM 1980 MHz  this run 18.0 GiB")
            assert lines[1].startswith("util ▕") and "  40%  mem ▕" in lines[1] and "20.0/141.0 GiB" in lines[1]
        else:  # a row a GPU
            assert rows.region.height == count + 1
            assert lines[count - 1] == f"GPU{count - 1} util {39 + count}% · mem 20.0/141 GiB · 300 W · 50°C"
        assert panel.content_region.contains_region(rows.region)  # none cut off by the panel
        # a plot of 8 GPUs would be a line high: the rows are the view then
        assert app.query_one("#gpu-plot").display == (count <= PLOT_MAX_GPUS)


async def test_what_nvml_did_not_give_reads_n_a_not_none_or_zero():
    app = PanelsOnly()
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.query_one(GpuPanel)
        snap = gpu_snapshot(1)
        snap.gpu[0].update(power_w=None, sm_clock=None, temp_c=None, process_mem=None)
        panel.show(snap)
        await pilot.pause()
        row = text_of(app.query_one("#gpu-text")).splitlines()[0]
        assert "None" not in row and " 0 W" not in row
        assert "n/a  n/a  SM n/a  this run n/a GiB" in row


async def test_the_gpu_plot_draws_at_most_every_few_seconds_and_always_the_latest_samples():
    app = PanelsOnly()
    async with app.run_test(size=(160, 48)) as pilot:
        panel = app.query_one(GpuPanel)
        plot = app.query_one("#gpu-plot")
        snap = gpu_snapshot(1)
        panel.show(snap)
        await pilot.pause()
        assert "GPU0 util 40%" in text_of(plot)
        for util in (41, 42, 43):  # the sampler's next samples, faster than the plot's pace
            snap.gpu[0]["util"] = util
            snap.gpu_history = {0: {"util": [40.0] * 30 + [float(util)], "mem": [14.0] * 31}}
            panel.show(snap)
            await pilot.pause(0.1)
        assert "  43%  mem" in text_of(app.query_one("#gpu-text"))  # the rows follow every sample
        assert "GPU0 util 40%" in text_of(plot)  # the plot waits its turn
        await pilot.pause(PLOT_EVERY)
        assert "GPU0 util 43%" in text_of(plot)  # and then draws the latest, with no sample after it


class Alone(App):
    """One widget, with the dashboard's stylesheet."""

    CSS_PATH = ROOT / "tui" / "fastmon.tcss"

    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


async def test_an_epoch_start_stall_does_not_flatten_the_steps_around_it():
    # 3 ms steps, mostly forward and data, and one column where the workers started (900 ms)
    app = Alone(StepBreakdown(id="breakdown"))
    async with app.run_test(size=(100, 24)) as pilot:
        breakdown = app.query_one(StepBreakdown)
        bucket = dict.fromkeys(PHASES, 0.0) | {"data_wait": 1.0, "forward": 2.0}
        buckets = [dict(bucket) for _ in range(60)]
        buckets[30]["data_wait"] = 900.0
        breakdown.show(SimpleNamespace(buckets=buckets, bucket_steps=1, bucket_first=list(range(60)), last_step=59,
                                       marks=[], windows=[]))
        await pilot.pause()
        lines = [line.text for line in map(breakdown.render_line, range(breakdown.content_size.height))]
        assert "▲ 1 cut off, the tallest 902.0 ms" in lines[0]
        assert lines[1].startswith("    3.0┤")  # scaled to the steps, not to the stall
        assert lines[1][AXIS_WIDTH + 30] == CUT and lines[1].count(CUT) == 1
        cells = chart_cells(breakdown)
        assert cells[PHASE_COLORS["forward"]] > cells[PHASE_COLORS["data_wait"]] / 2  # the steps are drawn


async def test_the_header_says_while_torch_profiler_captures():
    app = Alone(RunHeader(id="header"))
    async with app.run_test(size=(160, 10)) as pilot:
        header = app.query_one(RunHeader)
        snap = Snapshot(title="train.py", status="running", steps=120, run={"steps_per_s": 10.0})
        header.show(snap)
        await pilot.pause()
        assert "torch.profiler" not in text_of(header)
        snap.capturing = True
        header.show(snap)
        await pilot.pause()
        assert "torch.profiler capturing: these steps run slower" in text_of(header)


@pytest.mark.parametrize("gone", [LogPane, LiveLine])
async def test_the_end_of_the_run_during_teardown_is_no_crash(tmp_path, gone):
    # The run's end (or a redraw tick) can arrive while the app closes and its widgets go,
    # one by one (seen in CI after q, s): nothing to draw then, and no traceback.
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    app = FastmonApp(ReplaySource(run))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        await app.query_one(RunHeader).remove()
        await app.query_one(gone).remove()
        app.redraw()
        app.post_message(RunEnded(0))
        await pilot.pause(0.3)
        await pilot.press("q")
    assert app.return_value is None


def test_the_shares_after_a_fix_describe_the_run_as_it_is_now():
    # The demo's end once said "STARVED: 72%" after the fix: the recent window reached back,
    # past the change, for enough timed steps (after it, one step in ~50 is timed).
    from fastmon.common.phases import STEP_FIELDS, StepRow
    from fastmon.summary import rates
    from fastmon.tui.snapshot import build

    def row(step, data_wait, compute, timed):
        values = dict.fromkeys(STEP_FIELDS, 0)
        values.update(step=step, data_wait=data_wait, forward=compute, wall=data_wait + compute, samples=32,
                      timed=int(timed))
        return StepRow(**values)

    rows = [row(s, 0.060, 0.010, True) for s in range(50)]  # starved, every step timed
    rows += [row(s, 0.001, 0.010, s % 50 == 0) for s in range(50, 400)]  # fixed at step 50
    snap = build(title="t", status="finished", exit_code=0, elapsed=1.0, steps=400, run=rates(400, 12800, 5.0), rows=rows,
                 rank_rows={0: rows}, facts={}, argv=[], host={}, gpu_samples=[], gpu_note="", advice=[],
                 applied=[{"step": 50, "kept": True}], dropped=0)
    assert snap.recent.share("data_wait") < 0.1


def test_the_scripts_colours_are_drawn_not_printed_as_escapes():
    from fastmon.tui.widgets.log_pane import styled

    # what a coloured logger (rich, loguru, transformers') writes
    line = styled("stdout", "\x1b[32mINFO\x1b[0m step 5 \x1b[1;31mloss nan\x1b[0m")
    assert line.plain == "INFO step 5 loss nan"
    coloured = {line.plain[span.start:span.end]: span.style for span in line.spans}
    assert coloured["INFO"].color.number == 2  # green
    assert coloured["loss nan"].color.number == 1 and coloured["loss nan"].bold  # bold red
    assert styled("stderr", "\x1b[33mwarn\x1b[0m").plain == "warn"


def test_stderr_is_red_only_where_it_reads_as_an_error():
    from fastmon.tui.widgets.log_pane import styled

    # tqdm, logging and warnings write to stderr too: red there made every run look broken
    for calm in ("epoch 1: 100%|██████████| 50/50", "UserWarning: Failed to initialize NumPy", "INFO loss 0.3"):
        assert not styled("stderr", calm).style, calm
    for error in ("Traceback (most recent call last):", "ValueError: shapes differ",
                  "torch.OutOfMemoryError: CUDA out of memory"):
        assert styled("stderr", error).style == "red", error
    assert not styled("stdout", "ValueError: printed, not raised").style


@pytest.mark.e2e
async def test_the_demos_dashboard_ends_showing_the_fix_its_gain_and_the_code(tmp_path):
    # The README's main command as a user sees it, at 110x35: fastmon demo (apply auto).
    from fastmon.examples import starved

    options = RunOptions(target=[starved.__file__, "--epochs", "8"], apply="auto", runs_dir=str(tmp_path / "runs"))
    session = Session(options)
    session.start()
    try:
        app = FastmonApp(LiveSource(session), session=session)
        async with app.run_test(size=(110, 35)) as pilot:
            outcome = app.query_one(Outcome)
            await wait_until(pilot, lambda: "trying num_workers=" in text_of(outcome), timeout=120)
            await wait_until(pilot, lambda: app.snapshot.status == "finished", timeout=400)
            await pilot.pause(0.5)
            shown = text_of(outcome)
            assert "✔ fixed num_workers=" in shown and "x samples/s [" in shown  # the gain and its noise band
            assert "keep it: DataLoader(..., num_workers=" in shown and "persistent_workers=True" in shown
            assert "data wait" in shown and " → " in shown
            assert outcome.region.height > len(shown.splitlines())  # all of it on screen (and its rule)
            await pilot.press("q")
    finally:
        session.terminate()
        session.wait()


class Terminal:
    """A pseudo-terminal of 120x40 for a real ``fastmon run``: what it shows, as bytes."""

    def __init__(self) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.shown = bytearray()

    def read_for(self, seconds: float) -> bool:
        """Reads what is shown for ``seconds``; False once the program has closed the terminal."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    return False
                if not chunk:
                    return False
                self.shown.extend(chunk)
        return True

    def read_until(self, text: bytes, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while text not in self.shown and time.monotonic() < end and self.read_for(0.2):
            pass
        return text in self.shown


def detach(terminal) -> None:
    """Once the dashboard draws: q opens the quit dialog, q again detaches."""
    terminal.read_for(3.0)
    os.write(terminal.master, b"q")
    assert terminal.read_until(b"Detach, let it finish", 20)
    terminal.read_for(1.0)
    os.write(terminal.master, b"q")


@pytest.mark.e2e
def test_detaching_in_a_terminal_leaves_the_training_running_with_its_status_lines(tmp_path):
    # the dashboard in a real (pseudo) terminal: q asks, q again detaches; the training
    # finishes headless, its output and fastmon's status lines go on in the terminal
    done = tmp_path / "done"
    terminal = Terminal()
    script = ROOT / "tests" / "scripts" / "slow_steps.py"
    proc = subprocess.Popen(fastmon_cmd("run", "--runs-dir", tmp_path / "runs", script, "--steps", 500, "--step-ms", 20,
                                        "--done-file", done),
                            stdin=terminal.slave, stdout=terminal.slave, stderr=terminal.slave, cwd=tmp_path,
                            env=clean_env(TERM="xterm-256color"), start_new_session=True)
    os.close(terminal.slave)
    try:
        detach(terminal)
        while proc.poll() is None and terminal.read_for(0.5):
            pass
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    terminal.read_for(0.5)
    shown = terminal.shown.decode("utf-8", "replace")
    assert "[fastmon] detached: the training goes on, recorded in " in shown, shown[-2000:]
    after = shown.split("[fastmon] detached: the training goes on")[1]
    assert re.search(r"\[fastmon\] [\d:]+ step \d+ \| [\d.]+ steps/s", after)  # the headless status lines
    assert "step 499" in after  # the script's output, passed through
    assert done.read_text() == "finished 500 steps\n"


@pytest.mark.e2e
def test_ctrl_c_after_detaching_stops_the_training_with_its_summary(tmp_path):
    # after Detach the terminal is the training's again: Ctrl-C there stops it as in a
    # headless run (exit 130, the summary, no traceback), and the record knows its end
    terminal = Terminal()
    script = ROOT / "tests" / "scripts" / "slow_steps.py"

    def own_terminal():  # a session whose controlling terminal is the pty: Ctrl-C there is SIGINT
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a user's terminal (pytest may run where it is ignored)

    proc = subprocess.Popen(fastmon_cmd("run", "--runs-dir", tmp_path / "runs", script, "--steps", 3000,
                                        "--step-ms", 20),
                            stdin=terminal.slave, stdout=terminal.slave, stderr=terminal.slave, cwd=tmp_path,
                            env=clean_env(TERM="xterm-256color"), preexec_fn=own_terminal)
    os.close(terminal.slave)
    try:
        detach(terminal)
        assert terminal.read_until(b"(Ctrl-C stops it)", 20)
        terminal.read_for(2.0)
        os.write(terminal.master, b"\x03")
        while proc.poll() is None and terminal.read_for(0.5):
            pass
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    terminal.read_for(0.5)
    after = terminal.shown.decode("utf-8", "replace").split("(Ctrl-C stops it)")[1]
    assert "fastmon report" in after and "exit code 130 (killed by SIGINT)" in after, after[-2000:]
    assert "Traceback" not in after.split("KeyboardInterrupt")[-1]  # the script's own, as python prints it
    (run,) = (tmp_path / "runs").iterdir()
    meta = dict(sqlite3.connect(run / "run.sqlite").execute("SELECT key, value FROM meta"))
    assert meta["exit_code"] == "130" and meta["ended"] != "null"


def architecture_code_blocks(heading: str) -> list[str]:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


async def test_the_worked_example_adds_a_panel_with_one_file_and_one_line(tmp_path, monkeypatch):
    """ARCHITECTURE.md's example, as written there: its module, and its line in place of
    the app's own LEFT line."""
    import importlib.util
    import sys

    import fastmon.tui.app as app_module

    module_code, line = architecture_code_blocks("A new panel, a worked example")
    (tmp_path / "step_count.py").write_text(module_code)
    spec = importlib.util.spec_from_file_location("fastmon.tui.widgets.step_count", tmp_path / "step_count.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    app_source = (ROOT / "tui" / "app.py").read_text()
    name, value = line.strip().split(" = ", 1)
    assert re.search(rf"^{name} = ", app_source, re.M)  # the line the example replaces is there
    monkeypatch.setattr(app_module, name, eval(value))
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    app = FastmonApp(ReplaySource(run))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        panel = app.query_one("#step-count")
        assert app.snapshot.steps > 1 and text_of(panel) == f"step {app.snapshot.steps:,}"
        await pilot.press("home")
        await pilot.pause(0.5)
        assert text_of(panel) == "step 1"  # redrawn as the steps changed
        await pilot.press("q")


async def test_every_key_is_in_the_footer_or_the_help_with_one_meaning(tmp_path):
    from textual.widgets import Markdown

    from fastmon.tui.screens.help_screen import help_text

    live_help, replay_help = help_text(replay=False), help_text(replay=True)
    for binding in FastmonApp.BINDINGS:
        for key in binding.key.split(","):
            if len(key) == 1:  # a letter: told in the footer or in `?`
                assert binding.show or f"`{key}`" in live_help, key
    assert "`a`" not in replay_help and "`d`" not in replay_help and "`a`" in live_help
    letters = {key for b in FastmonApp.BINDINGS for key in b.key.split(",") if len(key) == 1}
    assert not {b.key for b in QuitScreen.BINDINGS if len(b.key) == 1} & (letters - {"q"})  # q: quit, and again
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    app = FastmonApp(ReplaySource(run))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        shown = app.screen.query_one(Markdown).source
        assert shown == replay_help
        await pilot.press("escape")
        await pilot.press("q")


@pytest.mark.e2e
def test_a_replay_says_the_epoch_of_the_step_it_shows(run_fastmon, tmp_path):
    # the record's last facts said "epoch 3/3" at step 1 as at the end
    out = run_fastmon("run", "--headless", EXAMPLES / "starved.py", "--epochs", "3", "--samples", "640",
                      "--load-ms", "0.2", "--open-ms", "0")
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(tmp_path)
    source = ReplaySource(run)
    source.jump(1)
    assert (source.snapshot().epoch, source.snapshot().epochs_total) == (1, 3)
    source.jump(25)  # 20 steps an epoch
    assert source.snapshot().epoch == 2
    source.jump(source.length)
    assert source.snapshot().epoch == 3


@pytest.mark.e2e
async def test_watch_follows_a_headless_run_live_and_quitting_it_leaves_the_run_going(tmp_path):
    from conftest import SCRIPTS
    from fastmon.common.run_status import RunStatus
    from fastmon.tui.snapshot import FollowSource

    monitor = subprocess.Popen(fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "100000",
                                           "--step-ms", "20"),
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (run_dirs(tmp_path) and FollowSource(run_dirs(tmp_path)[0]).length):
            await asyncio.sleep(0.2)
        source = FollowSource(run_dirs(tmp_path)[0])
        assert source.following
        app = FastmonApp(source)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(1.0)
            first = app.snapshot.steps
            assert app.snapshot.status == RunStatus.RUNNING
            await pilot.pause(3.0)
            assert app.snapshot.steps > first  # followed as it records
            await pilot.press("q")
        assert monitor.poll() is None  # quitting the watch leaves the run going
    finally:
        monitor.terminate()
        monitor.wait(60)
    assert not FollowSource(run_dirs(tmp_path)[0]).following  # ended: the next watch opens its replay
