"""torch.profiler captures on request: `fastmon run --profile-at STEP` (headless here) and
the dashboard's `t` key, live and in replay."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import ROOT, SCRIPTS, clean_env, run_dirs
from fastmon.session import PROFILE_STEPS, RunOptions, Session
from fastmon.tui.app import FastmonApp
from fastmon.tui.screens.profile_screen import ProfileScreen
from fastmon.tui.snapshot import LiveSource, ReplaySource

SCRIPT = SCRIPTS / "profiled_loop.py"


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.read_text().splitlines(), 1) if text in line)


@pytest.mark.e2e
def test_a_capture_writes_its_trace_and_torchs_findings_and_changes_nothing(run_fastmon, report, tmp_path):
    bare = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120,
                          env=clean_env())
    out = run_fastmon("run", "--headless", "--profile-at", 48, "--profile-steps", 3, SCRIPT)  # over step 50, a settings poll
    assert out.returncode == 0, out.stderr
    assert out.stdout == bare.stdout  # the same result to the last digit
    assert "torch.profiler, steps 48-50, rank 0" in out.stderr  # in the summary (and live on a longer run)
    summary = report()
    assert summary["steps"] == 200
    [capture] = summary["profiles"]
    assert (capture["first"], capture["last"]) == (48, 50)
    assert capture["file"] == str(run_dirs(tmp_path)[-1] / "profile-step48.pt.trace.json.gz")
    trace = json.load(gzip.open(capture["file"]))
    assert "aten::addmm" in {e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
    assert capture["top_cpu"][0]["name"].startswith("aten::")
    where = {found["name"]: found["where"] for found in capture["patterns"]}
    assert where["Gradient Set To Zero Instead of None Pattern"].endswith(
        f"profiled_loop.py:{line_of('zero_grad(set_to_none=False)')}")  # the user's line, not the probe's
    assert where["Optimizer Single Tensor Pattern"].endswith(f"profiled_loop.py:{line_of('optimizer.step()')}")
    # fastmon's own capture is not a profiler "left on"
    assert "profiler.left_on" not in {a["id"] for a in summary["advice"]}


@pytest.mark.e2e
def test_the_scripts_own_profiler_is_left_alone(run_fastmon, report):
    out = run_fastmon("run", "--headless", "--profile-at", 40, SCRIPT, "--own-profiler")
    assert out.returncode == 0, out.stderr
    assert "own profiler saw addmm: True" in out.stdout
    [capture] = report()["profiles"]
    assert capture["first"] == 40 and "already running" in capture["error"]


@pytest.mark.e2e
def test_a_profiler_left_on_is_named_at_the_line_that_made_it(run_fastmon, report):
    planted = ROOT / "benchmarks" / "advice_corpus" / "planted.py"
    out = run_fastmon("run", "--headless", planted, "--mistake", "profiler")
    assert out.returncode == 0, out.stderr
    left_on = {a["id"]: a for a in report()["advice"]}["profiler.left_on"]
    made = next(i for i, line in enumerate(planted.read_text().splitlines(), 1) if "profiler.profile()" in line)
    assert left_on["location"].endswith(f"planted.py:{made}")


@pytest.mark.e2e
async def test_t_captures_the_next_steps_live_and_shows_them_again_in_replay(tmp_path):
    session = Session(RunOptions(target=[str(SCRIPT), "--steps", "1000000"], runs_dir=str(tmp_path)))
    session.start()
    try:
        app = FastmonApp(LiveSource(session), session=session)
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            while not session.view.ranks:
                await pilot.pause(0.1)
            await pilot.press("t")
            for _ in range(300):
                # the screen is the app's as soon as it is pushed; its captures mount after
                if isinstance(app.screen, ProfileScreen) and app.screen.query(".capture"):
                    break
                await pilot.pause(0.1)
            shown = "\n".join(str(capture.render()) for capture in app.screen.query(".capture"))
            # on a busy machine, a 5-step capture's top operator is whichever one the scheduler
            # paused longest (seen: aten::addmm, aten::_log_softmax_backward_data; autograd's
            # engine ops count too, as in torch's own table): the line names operators
            assert "torch.profiler, steps" in shown
            assert re.search(r"top operators by self CPU time: \w+::\S+.* \d+% \(\d+ calls\)", shown), shown
            assert "Gradient Set To Zero Instead of None Pattern" in shown
            # the captured steps ran slower, and those until its tables were done: recorded, but out
            # of what the advisor and experiments measure
            [captured] = session.view.captured
            first = int(shown.split("torch.profiler, steps ")[1].split("-")[0])
            assert captured.start == first and len(captured) >= PROFILE_STEPS
            await pilot.pause(1.0)  # the rows of the last of them come in the probe's next send
            assert set(captured) <= {row.step for row in session.view.rank(0).rows}
            assert not set(captured) & {row.step for row in session.view.measured_rows()}
            await pilot.press("escape")
            assert not isinstance(app.screen, ProfileScreen)
            await pilot.press("q")
            await pilot.press("ctrl+c")  # in the quit dialog: stop
        assert session.wait() != 0  # stopped with Ctrl-C
    finally:
        session.terminate()
    replay = FastmonApp(ReplaySource(session.run_dir))
    async with replay.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.3)
        await pilot.press("t")
        await pilot.pause(0.3)
        assert isinstance(replay.screen, ProfileScreen)
        assert "\n".join(str(c.render()) for c in replay.screen.query(".capture")) == shown


@pytest.mark.e2e
def test_a_capture_the_run_never_reached_is_said_so(run_fastmon, report):
    out = run_fastmon("run", "--headless", "--profile-at", 100, SCRIPT, "--steps", 30)
    assert out.returncode == 0, out.stderr
    assert "torch.profiler: no capture; --profile-at 100, and the run ended after 30 steps" in out.stderr
    assert report()["profiles"] == []


def test_the_operator_table_agrees_with_torchs_own():
    # fastmon works it out from the raw events (key_averages() costs seconds of the training
    # process's GIL on a big capture): the same operators and self times (the calls may count
    # an operator that calls itself on another overload twice, as the raw events do)
    import torch
    from torch import nn

    from fastmon.probe.profiling import top_ops

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 14 * 14, 10))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(4, 3, 16, 16)
    # no stacks: key_averages() then reads every Python frame's name, and torch 2.13 sometimes
    # reads one that is not UTF-8 (UnicodeDecodeError in its _parse_kineto_results)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        for _ in range(3):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    ours = top_ops(profiler)["top_cpu"]
    theirs = sorted((e for e in profiler.key_averages() if "::" in e.key), key=lambda e: e.self_cpu_time_total,
                    reverse=True)[:len(ours)]
    assert [op["name"] for op in ours[:5]] == [e.key for e in theirs[:5]]
    for op, event in zip(ours, theirs):
        assert op["self_us"] == pytest.approx(event.self_cpu_time_total, rel=0.01, abs=1.0)


def test_a_torch_whose_events_cannot_say_python_frame_gets_the_same_operator_table():
    # torch 2.11's _KinetoEvent has no is_python_function: the H200 capture died on it
    # (AttributeError); the frames are then told from operators by their names
    import torch
    from torch import nn

    from fastmon.probe.profiling import top_ops

    class Torch211Event:
        def __init__(self, event):
            self._event = event

        def __getattr__(self, name):
            if name == "is_python_function":
                raise AttributeError(f"'_KinetoEvent' object has no attribute {name!r}")
            return getattr(self._event, name)

    class Torch211Capture:
        def __init__(self, profiler):
            events = [Torch211Event(e) for e in profiler.profiler.kineto_results.events()]
            self.profiler = SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events))

    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as profiler:
        for _ in range(3):
            model(torch.randn(16, 64)).square().mean().backward()
    assert top_ops(Torch211Capture(profiler)) == top_ops(profiler)
