"""The dashboard at the sizes people use (80x24, 110x35, 160x48, 200x60), over the recorded
runs: what must be on screen is there and right, and a picture of each is kept."""

from __future__ import annotations

import re
import shutil
from types import SimpleNamespace

import pytest
from textual.app import App, ComposeResult

from conftest import ROOT
from fastmon.advisor.verdict import verdict
from fastmon.common.phases import PHASE_LABELS, PHASES
from fastmon.tui.app import FastmonApp
from fastmon.tui.colors import PHASE_COLORS
from fastmon.tui.snapshot import ReplaySource
from fastmon.tui.widgets.advice_list import AdviceList
from fastmon.tui.widgets.gpu_line import GpuLine
from fastmon.tui.widgets.outcome import Outcome
from fastmon.tui.widgets.run_header import RunHeader
from fastmon.tui.widgets.shares_bar import SharesBar

DATA = ROOT / "tests" / "data"
DEMO = DATA / "starved-run"  # the demo's run, recorded: starved, then fixed live
GPU_RUN = DATA / "h200-nanogpt-eager-1"  # nanoGPT on an H200
SIZES = [(80, 24), (110, 35), (160, 48), (200, 60)]


def replay(tmp_path, run):
    folder = tmp_path / run.name
    shutil.copytree(run, folder)
    return FastmonApp(ReplaySource(folder)), folder


def text_of(widget) -> str:
    return str(widget.render())


def visible(app, widget) -> bool:
    return widget.display and widget.region.height > 0 and app.screen.region.contains_region(widget.region)


async def settle(pilot) -> None:
    await pilot.pause(0.6)  # two redraw ticks after the first layout


async def test_at_80x24_the_shares_bar_matches_its_legend_and_names_all_eight_phases(tmp_path):
    app, _ = replay(tmp_path, DEMO)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        bar = app.query_one(SharesBar)
        assert visible(app, bar)
        drawn = bar.render()
        first, *legend = drawn.split()
        width = bar.content_size.width
        assert first.cell_len == width
        cells = {phase: 0 for phase in PHASES}
        by_colour = {colour: phase for phase, colour in PHASE_COLORS.items()}
        for span in first.spans:
            cells[by_colour[str(span.style)]] += span.end - span.start
        legend_text = "\n".join(line.plain for line in legend)
        for phase in PHASES:
            shown = int(legend_text.split(f"■ {PHASE_LABELS[phase]} ")[1].split("%")[0])
            assert abs(cells[phase] - bar.shares[phase] * width) <= 1, phase  # within a cell of its share
            assert abs(shown - round(bar.shares[phase] * 100)) <= 1, phase  # and of the legend's figure
        assert cells["data_wait"] >= 0.8 * width  # the demo's run is starved
        assert bar.region.height == 1 + len(legend)  # no legend line cut


async def test_at_110x35_a_gpu_replay_shows_util_and_memory_in_one_line(tmp_path):
    app, _ = replay(tmp_path, GPU_RUN)
    async with app.run_test(size=(110, 35)) as pilot:
        await settle(pilot)
        line = app.query_one(GpuLine)
        assert visible(app, line)
        text = text_of(line)
        assert text.startswith("GPU0 util ") and "% · mem " in text and "/140 GiB · " in text and "°C" in text
        # the replay ends on the training's last sample (38%), not the idle GPU after the exit
        assert text.startswith("GPU0 util 38%")


async def test_without_a_gpu_one_line_says_why_and_no_panel_is_spent_on_it(tmp_path):
    app, _ = replay(tmp_path, DEMO)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert not app.query_one("#gpu-panel").display
        line = app.query_one(GpuLine)
        assert visible(app, line) and line.region.height == 1 and "NVML" in text_of(line)
        assert app.query_one("#host-panel").region.width == app.query_one("#panels").region.width  # all the row


@pytest.mark.parametrize("size", SIZES)
async def test_the_header_keeps_the_state_and_the_end_shows_the_fix_and_its_code(tmp_path, size):
    app, _ = replay(tmp_path, DEMO)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        header = app.query_one(RunHeader)
        assert "finished, exit code 0" in text_of(header).splitlines()[0]  # a long command line is cut, not this
        outcome = app.query_one(Outcome)
        assert visible(app, outcome)
        shown = text_of(outcome)
        assert "✔ fixed num_workers=2: 2.4x samples/s (386.5 → 928.0 samples/s)" in shown
        assert "keep it: DataLoader(..., num_workers=2)  # examples/starved.py:53" in shown


async def test_replay_moves_a_step_per_arrow_and_offers_no_apply(tmp_path):
    app, _ = replay(tmp_path, GPU_RUN)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        source = app.source
        for key, position in (("home", 1), ("right", 2), ("shift+right", 12), ("pagedown", 112), ("left", 111),
                              ("pageup", 11)):
            await pilot.press(key)
            assert source.position == position, key
        await pilot.pause(0.1)
        header = text_of(app.query_one(RunHeader))
        step = source.table.steps[10]
        # the step by its number, as the report and the chart's axis name it; the scrubber by its place
        assert f" step {step}: {source.record.steps_upto(0, step, 1)[0].wall * 1e3:,.1f} ms" in header
        assert "replay, 11 of 301 steps" in header and " 11 of 301 steps " in text_of(app.query_one("#position"))
        advice = app.query_one(AdviceList)
        assert advice.option_count and all("[a: apply]" not in str(advice.get_option_at_index(i).prompt)
                                           for i in range(advice.option_count))


async def test_s_saves_the_screen_as_an_svg_in_the_run_folder(tmp_path):
    app, folder = replay(tmp_path, DEMO)
    async with app.run_test(size=(110, 35), notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await pilot.pause(0.2)
        (svg,) = folder.glob("screen-*.svg")
        assert svg.read_text().lstrip().startswith("<svg") and "fastmon" in svg.read_text()
        assert any(f"Screen saved: {svg}" in n.message for n in app._notifications)


async def test_p_pauses_the_charts_and_says_so(tmp_path):
    app, _ = replay(tmp_path, DEMO)
    async with app.run_test(size=(110, 35)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        assert "charts paused (p resumes)" in text_of(app.query_one(RunHeader))
        await pilot.press("p")
        assert "charts paused" not in text_of(app.query_one(RunHeader))


class OutcomeAlone(App):
    CSS_PATH = ROOT / "tui" / "fastmon.tcss"

    def compose(self) -> ComposeResult:
        yield Outcome(id="outcome")


def snapshot(**fields) -> SimpleNamespace:
    base = dict(experiment=None, outcome=None, applied=[], advice=[], steps=400, status="running", verdict=None)
    return SimpleNamespace(**{**base, **fields})


async def test_a_change_under_way_reads_as_an_experiment():
    app = OutcomeAlone()
    async with app.run_test(size=(120, 10)):
        outcome = app.query_one(Outcome)
        outcome.show(snapshot(experiment={"id": "dataloader.num_workers", "params": {"num_workers": 4},
                                          "candidate": 2, "candidates": 3, "state": "measuring",
                                          "baseline": 389.2, "steps": 12, "needed": 16, "now": 1020.4,
                                          "from_step": 30}))
        assert text_of(outcome) == ("▶ trying num_workers=4 (2 of 3): 12 of 16 steps · baseline 389 samples/s · "
                                    "now 1,020 samples/s")


async def test_the_outcome_line_is_the_verdict_issue_why_next():
    app = OutcomeAlone()
    async with app.run_test(size=(160, 10)):
        outcome = app.query_one(Outcome)
        settled = verdict(("compute-bound", "the GPU is busy 96% of the steps' time"), {}, [
            {"id": "lr_schedule", "kind": "suggestion", "status": "open", "title": "t", "fix": "f"}], [])
        outcome.show(snapshot(verdict=settled, status="finished", outcome={"before_after": None, "permanent": []}))
        assert text_of(outcome) == "✔ compute-bound — the GPU is busy 96% of the steps' time — next: nothing to change"
        starved = verdict(("data-bound", "60% of the step waits for the next batch"), {"data_wait": 0.6}, [
            {"id": "dataloader.num_workers", "kind": "problem", "status": "open", "est_gain": 2.0,
             "title": "Load data in parallel: more DataLoader workers", "fix": "DataLoader(..., num_workers=N)"}], [])
        outcome.show(snapshot(verdict=starved))
        assert text_of(outcome) == ("● data-bound 60% — 60% of the step waits for the next batch — next: Load data in "
                                    "parallel: more DataLoader workers: DataLoader(..., num_workers=N)")


@pytest.mark.parametrize("run, size", [(DEMO, size) for size in SIZES] + [(GPU_RUN, (110, 35)), (GPU_RUN, (160, 48))],
                         ids=lambda v: v.name if hasattr(v, "name") else "x".join(map(str, v)))
def test_screen_snapshot(snap_compare, tmp_path, run, size):
    app, _ = replay(tmp_path, run)
    assert snap_compare(app, terminal_size=size, run_before=settle)


CUT_FIGURE = re.compile(r"\d[\d.,]*(\s?[A-Za-z%°/]{1,4})?…")  # "SM 1980 M…", "busy 46…", "3.1/140.4 G…"


@pytest.mark.parametrize("run", [DEMO, GPU_RUN], ids=lambda v: v.name)
@pytest.mark.parametrize("size", [(80, 24), (100, 30), (120, 40), (160, 48), (200, 60)],
                         ids=lambda v: "x".join(map(str, v)))
async def test_no_figure_is_cut_at_any_size(tmp_path, run, size):
    from fastmon.tui.widgets.log_pane import LogPane

    app, _ = replay(tmp_path, run)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for widget in app.screen.walk_children():
            if not widget.display or widget.children or isinstance(widget, LogPane) or not widget.region.area:
                continue  # (the script's own output is shown as it printed it)
            for y in range(widget.region.height):
                line = widget.render_line(y).text
                assert not CUT_FIGURE.search(line), (type(widget).__name__, line)
        header = text_of(app.query_one(RunHeader)).splitlines()
        assert len(header) == 2 and all(len(line) <= size[0] for line in header) and "…" not in header[1]
        assert app.snapshot.verdict.issue in header[1]


async def test_a_redraw_tick_after_the_app_closed_is_ignored(tmp_path):
    # A timer's last tick can land after the screens are gone (seen once in CI).
    app, _ = replay(tmp_path, DEMO)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
    assert not app.screen_stack
    app.redraw()


def test_a_chart_cell_takes_the_colour_of_the_phase_that_fills_most_of_it():
    from fastmon.tui.widgets.step_breakdown import filling_most

    # cumulative heights in eighths of a cell: data 1, h2d 0, forward 6, backward 1 (8 in all)
    column = [1, 1, 7, 8, 8, 8, 8, 8]
    assert PHASES[filling_most(column, 0)] == "forward"  # not data_wait, though it is at the bottom
    assert PHASES[filling_most([4, 4, 8, 8, 8, 8, 8, 8], 0)] == "data_wait"  # a tie: the lower one
    assert PHASES[filling_most([2, 2, 3, 20, 20, 20, 20, 20], 8)] == "backward"


async def test_the_chart_marks_where_a_change_landed(tmp_path):
    app, _ = replay(tmp_path, DEMO)  # num_workers=2 applied at step 25 (the report's "at step 25")
    async with app.run_test(size=(110, 35)) as pilot:
        await settle(pilot)
        from fastmon.tui.widgets.step_breakdown import AXIS_WIDTH, StepBreakdown

        chart = app.query_one(StepBreakdown)
        lines = [line.text for line in map(chart.render_line, range(chart.content_size.height))]
        axis, ticks = lines[-2], lines[-1]
        column = axis.index("┴") - AXIS_WIDTH
        assert ticks[AXIS_WIDTH + column:].startswith("▲ num_workers=2")
        assert chart.bucket_first[column] <= 25 < chart.bucket_first[column + 1]
        assert ticks.startswith(" " * AXIS_WIDTH + "step 0") and ticks.rstrip().endswith("99")


async def test_in_replay_the_output_pane_follows_the_selected_step(tmp_path):
    import re

    from fastmon.tui.widgets.log_pane import LogPane

    app, _ = replay(tmp_path, GPU_RUN)  # nanoGPT prints "iter N: loss ..." every 10 steps

    def last_iter() -> int | None:
        text = "\n".join("".join(segment.text for segment in strip) for strip in app.query_one(LogPane).lines)
        found = re.findall(r"^iter (\d+):", text, re.M)
        return int(found[-1]) if found else None

    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert last_iter() == 300  # the end: all of it
        await pilot.press("home")
        await pilot.pause(0.1)
        assert last_iter() in (None, 0)
        await pilot.press("pagedown")
        await pilot.pause(0.1)
        assert app.source.position == 101 and 90 <= last_iter() <= 101
        await pilot.press("pageup")  # back: the pane is drawn again up to the step
        await pilot.pause(0.1)
        assert last_iter() in (None, 0)
        await pilot.press("end")
        await pilot.pause(0.1)
        assert last_iter() == 300


async def test_the_loss_the_script_printed_is_shown_and_drawn(tmp_path):
    app, _ = replay(tmp_path, GPU_RUN)  # nanoGPT's last line: "iter 300: loss 4.1758, ..."
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert " · loss 4.176 · " in text_of(app.query_one(RunHeader))
        host = text_of(app.query_one("#host-panel"))
        assert "loss, printed  " in host and host.split("loss, printed  ")[1].split("\n")[0].endswith(" 4.176")
        await pilot.press("home")
        await pilot.pause(0.1)
        assert " · loss 4.261 · " in text_of(app.query_one(RunHeader))  # what it had printed by its first step


async def test_the_steps_an_experiment_measured_are_drawn_under_the_chart():
    from fastmon.tui.widgets.step_breakdown import AXIS_WIDTH, StepBreakdown

    class ChartAlone(App):
        CSS_PATH = ROOT / "tui" / "fastmon.tcss"

        def compose(self) -> ComposeResult:
            yield StepBreakdown(id="breakdown")

    app = ChartAlone()
    async with app.run_test(size=(100, 20)):
        chart = app.query_one(StepBreakdown)
        buckets = [dict.fromkeys(PHASES, 0.0) | {"forward": 3.0} for _ in range(50)]  # 2 steps a column: 0-99
        chart.show(SimpleNamespace(buckets=buckets, bucket_steps=2, bucket_first=list(range(0, 100, 2)),
                                   last_step=99, marks=[(40, "num_workers=2")], windows=[(20, 39), (44, 59)]))
        lines = [line.text for line in map(chart.render_line, range(chart.content_size.height))]
        axis = lines[-2][AXIS_WIDTH:]
        assert axis[10:20] == "━" * 10 and axis[20] == "┴" and axis[21] == "─" and axis[22:30] == "━" * 8
        assert axis[:10] == "─" * 10 and axis[30:].rstrip() == "─" * 20


async def test_the_quit_dialogs_buttons_show_their_keys(tmp_path):
    # the labels are markup: "[d]" was read as a style and vanished from the buttons
    from textual.widgets import Button

    from fastmon.tui.screens.quit_screen import QuitScreen

    app, _ = replay(tmp_path, GPU_RUN)
    async with app.run_test(size=(110, 35)) as pilot:
        await settle(pilot)
        app.push_screen(QuitScreen())
        await pilot.pause(0.2)
        labels = [str(button.label) for button in app.screen.query(Button)]
    assert labels == ["Stop training [ctrl+c]", "Detach, let it finish [q]", "Stay [esc]"]


async def test_the_s_key_saves_the_screen_in_the_run_folder_readable_by_its_owner_alone(tmp_path):
    import os

    app, folder = replay(tmp_path, DEMO)
    async with app.run_test(size=(110, 35)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await pilot.pause(0.3)
    (svg,) = folder.glob("screen-*.svg")
    assert svg.read_text().startswith("<svg") and os.stat(svg).st_mode & 0o777 == 0o600
