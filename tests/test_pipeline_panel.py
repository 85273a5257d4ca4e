"""The data-pipeline view (`l`), driven with Pilot: over a real run live and its replay, over
a record with no pipeline timed, and with every part the pipeline's table may carry."""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest
from textual.app import App, ComposeResult

from conftest import ROOT, SCRIPTS
from fastmon.session import RunOptions, Session
from fastmon.summary import summarize
from fastmon.tui.app import FastmonApp
from fastmon.tui.screens.help_screen import help_text
from fastmon.tui.snapshot import LiveSource, ReplaySource, Snapshot
from fastmon.tui.widgets.pipeline_panel import WAITS, PipelinePanel, ms

RECORDED = ROOT / "tests" / "data" / "starved-run"  # recorded before the pipeline was timed


def panel_lines(app) -> list[str]:
    return app.query_one(PipelinePanel).render().plain.splitlines()


def stage_row(lines: list[str], name: str) -> str:
    return next(line for line in lines if line.startswith(name))


def shown_figures(stage: dict) -> re.Pattern:
    """The stage's CPU / wall ms as the panel writes them."""
    return re.compile(rf"\s{re.escape(ms(stage['cpu_ms']))} /\s+{re.escape(ms(stage['wall_ms']))}\s")


async def wait_until(pilot, predicate, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out waiting in the dashboard")
        await pilot.pause(0.1)


@pytest.mark.e2e
async def test_a_real_run_s_slowest_stage_comes_first_and_the_one_that_waits_is_marked(tmp_path):
    # The dataset's read sleeps 2 ms a sample on the training thread: "the rest of
    # __getitem__" waits; the transforms and the collate compute. ~5 s of batches: the
    # monitor reads the pipeline every 2 s while it runs.
    session = Session(RunOptions(target=[str(SCRIPTS / "slow_transform.py"), "--workers", "0", "--sleepy",
                                         "--batches", "300"], runs_dir=str(tmp_path / "runs")))
    session.start()
    app = FastmonApp(LiveSource(session), session=session)
    try:
        async with app.run_test(size=(160, 48)) as pilot:
            assert not app.query_one(PipelinePanel).display  # the screen a run opens on: GPU and host
            await pilot.press("l")
            assert panel_lines(app)[0].startswith("no data pipeline timed yet: ")  # before the first batches
            await wait_until(pilot, lambda: len(panel_lines(app)) > 2)
            live = panel_lines(app)
            assert "in the training thread" in live[0]
            assert live[1].startswith("the rest of __getitem__  slow_transform.py:") and live[1].endswith(WAITS)
            for name in ("Scale", "Clamp", "collate_fn"):
                assert not stage_row(live, name).endswith(WAITS), name
            await wait_until(pilot, lambda: app.snapshot.status != "running")
            await pilot.press("q")
    finally:
        session.terminate()
        session.wait()
    # its replay: the report's table, row for row, the slowest first
    stages = summarize(session.run_dir)["pipeline"]["stages"]
    assert stages[0]["name"] == "the rest of __getitem__" and stages[0]["waiting"]
    app = FastmonApp(ReplaySource(session.run_dir))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.press("l")
        await pilot.pause(0.3)
        header, *rows = panel_lines(app)
        assert "the run's totals" in header
        assert len(rows) == len(stages)
        for row, stage in zip(rows, stages):
            assert row.startswith(stage["name"]) and (stage["where"] or "") in row, (row, stage)
            assert shown_figures(stage).search(row), (row, stage)
            assert row.endswith(WAITS) == stage["waiting"], (row, stage)
        await pilot.press("q")


@pytest.mark.parametrize("size", [(160, 48), (80, 24)])
async def test_a_record_with_no_pipeline_says_so_in_the_panels_place(tmp_path, size):
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    app = FastmonApp(ReplaySource(run))
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        panel, panels, chart = app.query_one(PipelinePanel), app.query_one("#panels"), app.query_one("#breakdown")
        was = (panels if size[0] >= 120 else chart).region  # what it stands in for
        await pilot.press("l")
        await pilot.pause(0.1)
        assert panel.display and app.screen.region.contains_region(panel.region)
        if size[0] >= 120:  # the GPU and host panels' place, their size: nothing else moves
            assert panel.region == was and not panels.display
        else:  # at 80 columns, the chart's room, under the shares bar
            assert not chart.display and panel.region.height == was.height
        text = " ".join(panel_lines(app))
        assert text.startswith("no data pipeline timed in this run: ")
        await pilot.press("l")
        await pilot.pause(0.1)
        assert not panel.display and (panels if size[0] >= 120 else chart).region == was  # back as it was
        await pilot.press("q")
    assert "`l`" in help_text(replay=True) and "`l`" in help_text(replay=False)


class Alone(App):
    CSS_PATH = ROOT / "tui" / "fastmon.tcss"

    def compose(self) -> ComposeResult:
        yield PipelinePanel(id="pipeline")


# fastmon.pipeline.pipeline_summary's table with every part it may carry: two workers, the
# training process's per-batch stages, and a row a worker
FULL = {
    "stages": [
        {"name": "SlowBlur", "where": "slow_transform.py:32", "samples": 480, "cpu_ms": 2.02, "wall_ms": 2.04,
         "waiting": False},
        {"name": "ReadImage", "where": "folder_dataset.py:118", "samples": 480, "cpu_ms": 0.05, "wall_ms": 1.61,
         "waiting": True},
        {"name": "collate_fn", "where": None, "samples": 60, "cpu_ms": 0.39, "wall_ms": 0.40, "waiting": False},
    ],
    "batch_stages": [{"name": "taking a batch from a worker", "batches": 60, "cpu_ms": 0.08, "wall_ms": 6.5},
                     {"name": "pin_memory thread", "batches": 60, "cpu_ms": 0.21, "wall_ms": 0.22}],
    "workers": 2, "processes": 2,
    "worker_rows": [{"pid": 4242, "ms_a_sample": 4.9, "fetch_cpu_share": 0.51, "busy": 0.97, "slower": True},
                    {"pid": 4243, "ms_a_sample": 2.5, "fetch_cpu_share": 0.99, "busy": 0.98, "slower": False}],
}


@pytest.mark.parametrize("width", [120, 60])
async def test_every_part_of_the_table_is_drawn_and_an_absent_part_is_no_error(width):
    app = Alone()
    async with app.run_test(size=(width, 20)) as pilot:
        app.screen.add_class("pipeline")  # as `l` does
        panel = app.query_one(PipelinePanel)
        panel.show(Snapshot(status="running", pipeline=FULL))
        await pilot.pause()
        lines = panel.render().plain.splitlines()
        assert "in 2 DataLoader workers" in lines[0]
        assert lines[1].startswith("SlowBlur") and shown_figures(FULL["stages"][0]).search(lines[1])
        assert stage_row(lines, "ReadImage").endswith(WAITS)
        assert all(len(line) <= panel.content_size.width for line in lines)  # a row a line, none cut
        # where a file:line does not fit it goes whole, never half a line number
        assert "slow_transform.py:32" in lines[1] if width >= 120 else ":" not in lines[1]
        assert any(line.startswith("ms a batch on the training process") for line in lines)
        assert stage_row(lines, "taking a batch from a worker")  # its bar mostly shaded: the wait for it
        assert any(line.startswith("worker 4242: 4.900 ms a sample") and line.endswith("slower than the others")
                   for line in lines)
        assert not stage_row(lines, "worker 4243").endswith("slower than the others")
        # the table as an older monitor wrote it: no per-batch stages, no worker rows
        panel.show(Snapshot(status="running", pipeline={"stages": FULL["stages"][:1], "workers": 0}))
        await pilot.pause()
        lines = panel.render().plain.splitlines()
        assert "in the training thread" in lines[0] and len(lines) == 2
        panel.show(Snapshot(status="running", pipeline={"stages": [], "batch_stages": FULL["batch_stages"],
                                                        "workers": 2}))
        await pilot.pause()
        assert panel.render().plain.startswith("ms a batch on the training process")
