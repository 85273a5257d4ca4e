"""`fastmon run --headless` on real scripts: behaves like python, measures every step
(the phases of each slow step, of a random sample of fast ones)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import zipfile

import pytest

from conftest import EXAMPLES, SCRIPTS, advised_for_the_code, run_dirs
from fastmon.headless import status_line
from fastmon.common.phases import PHASES, STEP_FIELDS
from fastmon.probe.sampling import TIME_ALL_FIRST
from fastmon.session import RunOptions, Session
from fastmon.tui.app import FastmonApp
from fastmon.tui.snapshot import ReplaySource


def step_rows(tmp_path):
    (run,) = run_dirs(tmp_path)
    db = sqlite3.connect(run / "run.sqlite")
    return [dict(zip(STEP_FIELDS, row)) for row in db.execute("SELECT * FROM steps ORDER BY step")]


def timed(rows) -> list[dict]:
    return [row for row in rows if row["timed"]]


@pytest.mark.e2e
def test_starved_loader_is_data_wait(run_fastmon, report):
    out = run_fastmon("run", "--headless", EXAMPLES / "starved.py", "--epochs", "1", "--samples", "960")
    assert out.returncode == 0, out.stderr
    summary = report()
    assert summary["steps"] == 30
    assert summary["phases"]["data_wait"] > 0.6
    assert summary["samples_per_s"] > 0 and summary["steps_per_s"] > 0
    assert abs(sum(summary["phases"].values()) - 1) < 0.01
    assert set(summary["phases"]) == set(PHASES)
    assert summary["exit_code"] == 0
    assert summary["advice"][0]["id"] == "dataloader.num_workers"
    assert summary["applied"] == []  # headless defaults to --apply never
    # the script's own output passed through
    assert "epoch 0: loss" in out.stdout
    assert "[fastmon] recording to" in out.stderr and "data_wait" in out.stderr


@pytest.mark.e2e
def test_dataloader_workers_are_sampled_as_workers(run_fastmon, report, tmp_path):
    out = run_fastmon("run", "--headless", EXAMPLES / "starved.py", "--epochs", "1", "--samples", "3200",
                      "--num-workers", "2")
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(tmp_path)
    db = sqlite3.connect(run / "run.sqlite")
    samples = [json.loads(data) for (data,) in db.execute("SELECT data FROM samples WHERE source = 'host'")]
    workers = {p["pid"] for s in samples for p in s["processes"] if p["role"] == "worker"}
    trainers = {p["pid"] for s in samples for p in s["processes"] if p["role"] == "trainer"}
    assert len(workers) == 2 and len(trainers) == 1 and not workers & trainers
    memory = report()["memory"]
    # PSS: a forked worker shares its parent's pages, which RSS would count once per worker
    assert memory["workers_pss_peak"] > 0 and memory["trainer_rss_peak"] > 100 * 2**20
    entries = [p for s in samples for p in s["processes"] if p["role"] == "worker" and p.get("pss")]
    assert entries and all(p["pss"] < p["rss"] for p in entries)
    assert memory["workers_seen_max"] == 2
    assert "2 DataLoader workers" in out.stderr  # the summary at the end


@pytest.mark.e2e
def test_in_memory_data_is_not_data_wait(run_fastmon, report):
    out = run_fastmon("run", "--headless", EXAMPLES / "healthy.py", "--epochs", "1", "--samples", "4096")
    assert out.returncode == 0, out.stderr
    summary = report()
    assert summary["phases"]["data_wait"] < 0.2
    assert advised_for_the_code(summary["advice"]) == []
    if not summary["advice"]:  # a healthy run is told so, not left with a blank where the advice would be
        assert "advice: nothing to change — no problem fastmon knows was measured in this run" in out.stderr


@pytest.mark.e2e
def test_phases_add_up_to_each_step(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", EXAMPLES / "starved.py", "--epochs", "1", "--samples", "320")
    assert out.returncode == 0, out.stderr
    rows = step_rows(tmp_path)
    assert len(rows) == 10 and [r["step"] for r in rows] == list(range(10))
    assert len(timed(rows)) >= 3  # the discovery's, and a sample of the rest (64 ms steps)
    for row in timed(rows):
        assert sum(row[p] for p in PHASES) == pytest.approx(row["wall"], rel=0.02)
        assert row["samples"] == 32
        assert row["data_wait"] > 0.05  # 32 samples x 2 ms


@pytest.mark.e2e
def test_fast_steps_are_all_recorded_and_a_random_sample_timed(run_fastmon, tmp_path, report):
    # ~0.5 ms steps: the probe measures what a timed step costs (0.2-1 ms) and times one in
    # as many µs, so after the first 50 some 20-100 of 20,000 steps are timed
    out = run_fastmon("run", "--headless", SCRIPTS / "short_steps.py", "--steps", "20000")
    assert out.returncode == 0, out.stderr
    rows = step_rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(20_000))  # every step has its row
    sampled = timed(rows)
    assert all(row["timed"] for row in rows[:TIME_ALL_FIRST])  # then a sample
    later = sampled[TIME_ALL_FIRST:]
    assert 10 <= len(later) < len(rows) / 50
    assert len({b["step"] - a["step"] for a, b in zip(later, later[1:])}) >= 5  # no fixed stride
    for row in sampled:
        assert sum(row[p] for p in PHASES) == pytest.approx(row["wall"], rel=0.02)
    for row in rows:
        assert row["wall"] > 0 and row["samples"] == 16
        if not row["timed"]:
            assert all(row[p] is None for p in PHASES)
    summary = report()
    # the table is of the steady run: every step but the first and the one whose FLOPs were counted
    assert [u["why"] for u in summary["startup_steps"]][1:] == ["FLOP count"]
    assert summary["steps"] == 20_000 and summary["steady_steps"] == 19_998 and summary["timed_steps"] == len(sampled) - 2
    assert summary["duration_s"] == pytest.approx(sum(r["wall"] for r in rows), rel=1e-3)
    assert abs(sum(summary["phases"].values()) - 1) < 0.01
    # the report says what the run measured a timed step to cost, and the sample follows it
    # (within a factor: the price settles over the run's first episodes)
    price = summary["timing"]
    assert 200 <= price["timed_step_us"] <= 1000
    assert 0.4 < len(later) / (len(rows) / price["one_in"]) < 3
    assert price["measured"] >= len(later) / 2  # the episodes with room for their windows, said at the end
    assert (f"phases timed in {len(sampled) - 2} of the 19998 steps of the steady run, a random sample, each "
            f"standing for the steps up to the next (a timed step costs "
            f"~{price['timed_step_us'] / 1e3:.2f} ms here, measured on {price['measured']}: ") in out.stderr


@pytest.mark.e2e
def test_every_step_option_times_every_step(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", "--every-step", EXAMPLES / "healthy.py", "--epochs", "1",
                      "--samples", "8192", "--batch-size", "64")
    assert out.returncode == 0, out.stderr
    rows = step_rows(tmp_path)
    assert len(rows) == 128 and all(row["timed"] for row in rows)


@pytest.mark.e2e
async def test_training_in_torch_multiprocessing_children_is_named_with_what_to_run_instead(run_fastmon, report,
                                                                                             tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "mp_started.py")
    assert out.returncode == 0, out.stderr
    assert "process 0 done" in out.stdout and "process 1 done" in out.stdout
    summary = report()
    assert summary["steps"] == 0
    (spawned,) = summary["spawned_training"]
    assert spawned["nprocs"] == 2 and spawned["location"].endswith("mp_started.py:23")
    said = "the training runs in 2 processes started by torch.multiprocessing at"
    assert said in out.stderr and "fastmon run --nproc-per-node 2" in out.stderr  # as it starts, and in the report
    assert out.stderr.count(said) == 2
    app = FastmonApp(ReplaySource(run_dirs(tmp_path)[-1]))  # and on the dashboard, where it explains the empty charts
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await pilot.pause(0.3)
        shown = [str(toast.render()) for toast in app.screen.query("Toast")]
        assert any(t.startswith("T" + said[1:]) and "RANK / LOCAL_RANK / WORLD_SIZE" in t for t in shown)


def test_the_status_line_before_the_first_step_says_none_has_ended(tmp_path):
    session = Session(RunOptions(target=[str(SCRIPTS / "progress_bar.py")], runs_dir=str(tmp_path / "runs")))
    # the time beside it: two lines a few seconds apart are not one line twice
    assert re.fullmatch(r"\[fastmon\] 0:0\d step 0 \| no training step has ended yet \(a step ends at "
                        r"optimizer\.step\(\)\)", status_line(session.view))


def test_the_status_line_beside_a_stragglers_verdict_shows_the_stragglers_shares():
    # rank 0's step is mostly its wait, in the all-reduce, for rank 1, which waits for data
    from fastmon.common.phases import StepRow
    from fastmon.live_state import LiveView, RankView

    def rows(rank, **ms):
        out = []
        for step in range(60):
            values = dict.fromkeys(STEP_FIELDS, 0.0)
            values.update({p: v / 1e3 for p, v in ms.items()}, rank=rank, step=step, t_end=100 + step * 0.05,
                          wall=sum(ms.values()) / 1e3, samples=32, timed=1)
            out.append(StepRow(**values))
        return tuple(out)

    ranks = {0: rows(0, forward=5, backward=5, comm=40), 1: rows(1, data_wait=35, forward=5, backward=10)}
    view = LiveView(ranks={rank: RankView(rows=r, steps=60, samples=60 * 32, wall=3.0) for rank, r in ranks.items()},
                    started=99.0, ended=103.0)
    line = status_line(view)
    assert "straggler rank 1" in line and "data-bound 70% on rank 1" in line, line
    assert "rank 1: data 70% fwd 10% bwd 20%" in line and "comm" not in line, line


def test_the_status_line_keeps_the_trainers_memory_while_the_monitor_records_its_end():
    # the training exited: the next host sample has no trainer, and a status line comes
    # before the summary (a red CI run's line had no "RSS" there)
    from fastmon.common.phases import StepRow
    from fastmon.live_state import LiveState, RankState

    state = LiveState(started=99.0)
    state.ranks[0] = RankState()
    for step in range(20):
        values = dict.fromkeys(STEP_FIELDS, 0.0)
        values.update(rank=0, step=step, t_end=100 + step * 0.05, wall=0.05, forward=0.05, samples=32, timed=1)
        state.ranks[0].add(StepRow(**values), start_up=False)
    cores = {"cpu_per_core": [50.0, 50.0], "ram_used": 2**30, "ram_total": 2**33}
    state.add_host_sample({"processes": [{"pid": 7, "cpu": 99.0, "rss": 3 * 2**29, "role": "trainer"}], **cores},
                          [], 100.5)
    assert "| RSS 1.5 GiB |" in status_line(state.view())
    state.add_host_sample({"processes": [], **cores}, [], 101.0)
    assert "| RSS 1.5 GiB |" in status_line(state.view())


def test_headless_advice_that_changes_the_maths_says_how_auto_may_try_it():
    # under --apply auto it was left untried, unsaid: the user had to know --allow
    from types import SimpleNamespace

    from fastmon.headless import StatusPrinter
    from fastmon.live_state import LiveView

    threads = {"id": "torch.num_threads", "title": "Run torch on 1 thread", "evidence": "others hold 1.0 core",
               "status": "open", "apply": {"action": "num_threads", "changes_maths": True}}
    workers = {"id": "dataloader.num_workers", "title": "More workers", "evidence": "data_wait is 87%",
               "status": "open", "apply": {"action": "loader", "changes_maths": False}}

    def news(apply, allow=frozenset()):
        session = SimpleNamespace(view=LiveView(advice=(threads, workers)),
                                  options=SimpleNamespace(apply=apply, allow=allow))
        return StatusPrinter(session)._advice_news()

    said = " (it changes the maths: --allow torch.num_threads lets --apply auto try it)"
    assert news("auto") == ["[fastmon] advice torch.num_threads: Run torch on 1 thread — others hold 1.0 core" + said,
                            "[fastmon] advice dataloader.num_workers: More workers — data_wait is 87%"]
    assert not any(said in line for line in news("ask") + news("auto", frozenset({"torch.num_threads"})))


def test_a_status_line_waits_for_the_bar_being_written_and_starts_its_own_line(tmp_path, monkeypatch):
    # the status line read "the line has ended", a bar was written meanwhile, and the
    # status line landed glued to it
    from fastmon.script_output import ScriptOutput

    class Terminal:  # stderr, whose write of the script's chunk is held until ``go``
        def __init__(self):
            self.buffer, self.parts = self, []
            self.writing, self.go = threading.Event(), threading.Event()

        def write(self, data):
            if isinstance(data, bytes):
                self.writing.set()
                self.go.wait(10)
                data = data.decode()
            self.parts.append(data)

        def flush(self):
            pass

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr("fastmon.script_output.SAY_WAIT_S", 30.0)  # a loaded machine does not end the wait
    output = ScriptOutput(tmp_path, lambda *_: None, lambda stream: None, passthrough=True)
    read, write = os.pipe()
    output.start({"stderr": read})
    os.write(write, b"epoch 0:  50%|#####     ")
    assert terminal.writing.wait(10)
    saying = threading.Thread(target=output.say, args=(["[fastmon] 0:01 step 5"],))
    saying.start()
    saying.join(0.3)
    assert saying.is_alive()  # it waits for the chunk being written
    terminal.go.set()
    saying.join(10)
    os.close(write)
    output.wait_after_exit()
    output.close()
    assert "".join(terminal.parts) == "epoch 0:  50%|#####     \n[fastmon] 0:01 step 5\n"


@pytest.mark.e2e
def test_headless_status_lines_start_their_own_line_under_a_progress_bar(run_fastmon):
    # a status line every half second: several land within the script's four seconds of bars
    out = run_fastmon("run", "--headless", "--status-every", "0.5", SCRIPTS / "progress_bar.py")
    assert out.returncode == 0, out.stderr
    assert "epoch 1: 100%" in out.stderr  # tqdm's bar passes through
    before = re.findall(r"(?s)(.)\[fastmon\] [\d:]+ step \d+", out.stderr)  # every status line, the first step's too
    assert before and set(before) == {"\n"}  # not glued to the end of the bar


@pytest.mark.e2e
def test_manual_sgd_counts_a_step_per_backward(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "manual_sgd.py")
    assert out.returncode == 0, out.stderr
    assert "final loss" in out.stdout
    rows = step_rows(tmp_path)
    assert len(rows) == 40  # 40 backwards; the last step, with no next one to end it, ends with the script
    assert all(r["backward"] > 0 and r["forward"] == 0 for r in rows)  # plain tensors, no nn.Module


@pytest.mark.e2e
def test_lbfgs_closure_time_goes_to_forward_and_backward(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "lbfgs.py")
    assert out.returncode == 0, out.stderr
    rows = step_rows(tmp_path)
    assert len(rows) == 10
    for row in timed(rows):
        assert row["forward"] > 0 and row["backward"] > 0
        assert row["optimizer"] > 0
        assert row["micro_batches"] >= 1


@pytest.mark.e2e
def test_gradient_accumulation_makes_one_step_of_four_batches(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "accumulate.py")
    assert out.returncode == 0, out.stderr
    rows = step_rows(tmp_path)
    assert len(rows) == 16
    assert all(r["samples"] == 64 for r in rows)
    assert all(r["micro_batches"] == 4 for r in timed(rows))


@pytest.mark.e2e
def test_a_gans_two_optimizers_make_two_steps_and_each_batch_counts_once(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", "--every-step", SCRIPTS / "gan.py")
    assert out.returncode == 0, out.stderr
    assert "gan batches 40" in out.stdout
    rows = step_rows(tmp_path)
    assert len(rows) == 80  # each optimizer.step() ends a step, as Lightning's global_step counts
    assert sum(r["samples"] for r in rows) == 640  # the dataset, once: not the generator's input too
    generator_steps = rows[1::2]
    assert all(r["samples"] == 0 and r["data_wait"] == 0 and r["forward"] > 0 for r in generator_steps)
    # and on steps too short to time them all, the untimed ones are given their kind's
    # samples: two critic steps of 16 and a generator step, whose mean (10.7) is none's
    shutil.rmtree(run_dirs(tmp_path)[0])
    out = run_fastmon("run", "--headless", SCRIPTS / "gan.py", "--samples", "6400", "--critic-steps", "2")
    assert out.returncode == 0, out.stderr
    rows = step_rows(tmp_path)
    assert len(rows) == 600 and len(timed(rows)) < 300
    assert sum(r["samples"] for r in rows) == 6400


@pytest.mark.e2e
@pytest.mark.parametrize("teacher_every", ["1", "2"])
def test_a_batch_a_teacher_sees_before_the_student_trains_on_it_counts_once(run_fastmon, report, teacher_every):
    out = run_fastmon("run", "--headless", SCRIPTS / "distill.py", "--teacher-every", teacher_every)
    assert out.returncode == 0, out.stderr
    summary = report()
    assert summary["steps"] == 40 and summary["samples"] == 640


@pytest.mark.e2e
def test_custom_batch_function_is_data_wait(run_fastmon, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "custom_batches.py")
    assert out.returncode == 0, out.stderr
    summary = report()
    assert summary["phases"]["data_wait"] > 0.5
    assert summary["samples"] == 30 * 32  # the training's batches, with validation's DataLoader in between


@pytest.mark.e2e
def test_lightning_fit_runs_unchanged(run_fastmon, report, tmp_path):
    pytest.importorskip("pytorch_lightning")
    out = run_fastmon("run", "--headless", SCRIPTS / "lightning_fit.py")
    assert out.returncode == 0, out.stderr
    assert "lightning steps 40" in out.stdout
    rows = step_rows(tmp_path)
    assert len(rows) == 40
    assert all(r["samples"] == 32 for r in rows)
    assert sum(r["forward"] for r in timed(rows)) > 0 and sum(r["data_wait"] for r in timed(rows)) > 0
    # a conv built in the LightningModule's __init__: its advice is at that line (issue 56: none)
    advice = {a["id"]: a for a in report()["advice"]}
    assert advice["conv_bias_before_bn"]["location"].endswith("lightning_fit.py:17")


@pytest.mark.e2e
def test_script_sees_what_python_would_and_exit_code_passes(run_fastmon, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "exit_code.py", "--code", "3", "--steps", "4")
    assert out.returncode == 3
    assert f"argv ['{SCRIPTS / 'exit_code.py'}', '--code', '3', '--steps', '4']" in out.stdout
    assert "name __main__" in out.stdout and "file exit_code.py" in out.stdout and "path0 scripts" in out.stdout
    summary = report()
    assert summary["exit_code"] == 3 and summary["steps"] == 4


@pytest.mark.e2e
@pytest.mark.parametrize("packed", ["folder", "zip"])
def test_a_folder_or_zip_runs_by_its_main_as_with_python(run_fastmon, report, tmp_path, packed):
    (tmp_path / "app").mkdir()
    shutil.copy(SCRIPTS / "exit_code.py", tmp_path / "app" / "__main__.py")
    target = "app"
    if packed == "zip":
        with zipfile.ZipFile(tmp_path / "app.zip", "w") as archive:
            archive.write(tmp_path / "app" / "__main__.py", "__main__.py")
        target = "app.zip"
    python = subprocess.run([sys.executable, target, "--code", "3", "--steps", "2"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    out = run_fastmon("run", "--headless", target, "--code", "3", "--steps", "4")
    assert out.returncode == python.returncode == 3, out.stderr
    seen = [line for line in out.stdout.splitlines() if line.startswith(("name", "file", "path0"))]
    assert seen == [line for line in python.stdout.splitlines() if line.startswith(("name", "file", "path0"))]
    assert report()["steps"] == 4


@pytest.mark.e2e
def test_a_runs_folder_that_cannot_be_made_stops_before_training(run_fastmon, tmp_path):
    (tmp_path / "a_file").write_text("")
    out = run_fastmon("run", "--headless", "--runs-dir", "a_file/runs", SCRIPTS / "exit_code.py")
    assert out.returncode == 73
    assert "cannot record in 'a_file/runs'" in out.stderr and "nothing started" in out.stderr
    assert "argv" not in out.stdout and "Traceback" not in out.stderr


@pytest.mark.e2e
def test_a_folder_without_main_is_named(run_fastmon, tmp_path):
    (tmp_path / "empty").mkdir()
    out = run_fastmon("run", "--headless", "empty")
    assert out.returncode == 2
    assert "can't find '__main__' module in 'empty'" in out.stderr
    assert not (tmp_path / "fastmon-runs").exists()


@pytest.mark.e2e
def test_uncaught_exception(run_fastmon, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "crash.py")
    assert out.returncode == 1
    assert "ValueError: bad metric at step 6" in out.stderr
    assert 'crash.py", line 7, in broken_metric' in out.stderr
    assert "runpy" not in out.stderr and "fastmon/probe" not in out.stderr
    summary = report()
    assert summary["steps"] == 7 and summary["exit_code"] == 1


@pytest.mark.e2e
def test_missing_script(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", "no_such_script.py")
    assert out.returncode == 2
    assert "can't open file 'no_such_script.py'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "fastmon-runs").exists()


@pytest.mark.e2e
def test_syntax_error(run_fastmon, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\ndef f(:\n    pass\n")
    out = run_fastmon("run", "--headless", bad)
    assert out.returncode == 2
    assert "syntax error" in out.stderr and "line 2" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.e2e
def test_missing_module(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", "-m", "no_such_module_here")
    assert out.returncode == 2
    assert "no module named 'no_such_module_here'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not run_dirs(tmp_path)  # nothing was started, nothing recorded


@pytest.mark.e2e
def test_a_fastmon_option_after_the_script_gets_a_hint_not_a_report_of_zeros(run_fastmon):
    out = run_fastmon("run", EXAMPLES / "healthy.py", "--headless")
    assert out.returncode == 2  # the script's argparse refused it
    assert ("fastmon: --headless came after the script, so the script got it: fastmon's options go before "
            "SCRIPT (fastmon run --headless SCRIPT ARGS)") in out.stderr
    assert "no training step seen" in out.stderr and "data_wait" not in out.stderr


@pytest.mark.e2e
def test_headless_status_lines_say_elapsed_epoch_eta_and_memory_at_the_pace_asked(run_fastmon):
    # 8 epochs, ~3 s of steps: the FLOP count no longer stalls a step for 1.5 s to make room
    out = run_fastmon("run", "--headless", "--status-every", "0.5", EXAMPLES / "healthy.py", "--epochs", "8")
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if re.match(r"\[fastmon\] \d+:\d\d step [1-9]", line)]
    assert len(lines) >= 3, out.stderr
    assert any(re.search(r" epoch \d/8 ETA \d+:\d\d \|", line) for line in lines), lines
    assert all(re.search(r"\| RSS \d+\.\d GiB", line) for line in lines), lines


@pytest.mark.e2e
def test_module_mode(run_fastmon, tmp_path, report):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text((SCRIPTS / "exit_code.py").read_text())
    out = run_fastmon("run", "--headless", "-m", "mypkg.train", "--steps", "3")
    assert out.returncode == 0, out.stderr
    assert "name __main__" in out.stdout
    assert report()["steps"] == 3


@pytest.mark.e2e
def test_report_of_a_missing_run(run_fastmon, tmp_path):
    out = run_fastmon("report", "nowhere")
    assert out.returncode == 66
    assert "nowhere does not exist (give a run folder, as under fastmon-runs/, or latest)" in out.stderr
    (tmp_path / "empty").mkdir()
    out = run_fastmon("report", tmp_path / "empty")
    assert out.returncode == 66 and "empty is not a fastmon run folder (no run.sqlite)" in out.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("content", [b"", b"not a database, a text file someone named run.sqlite\n" * 20])
@pytest.mark.parametrize("command", ["report", "replay"])
def test_an_unreadable_record_is_named_not_a_traceback(run_fastmon, tmp_path, command, content):
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "run.sqlite").write_bytes(content)
    out = run_fastmon(command, tmp_path / "odd")
    assert out.returncode == 65
    assert "cannot read" in out.stderr and "run.sqlite" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.e2e
def test_unknown_option_is_a_usage_error(run_fastmon):
    out = run_fastmon("run", "--frobnicate", "train.py")
    assert out.returncode == 2
    assert "unknown option '--frobnicate'" in out.stderr


@pytest.mark.e2e
def test_code_level_causes_are_named_with_their_line(run_fastmon, report, tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "numpy_and_spike.py")
    assert out.returncode == 0, out.stderr
    advice = {a["id"]: a for a in report()["advice"]}
    assert advice["tensor_copy"]["location"].endswith("numpy_and_spike.py:11")
    # gradient norms are sampled (from step 50, every 50 or more steps: on these tiny steps
    # the norm's cost spaces them out): the first sample after the blow-up at 160 sees it
    assert "grad_clipping" in advice
    found = re.search(r"gradient norm nan at step (\d+)", advice["grad_clipping"]["evidence"])
    assert found and int(found[1]) > 160, advice["grad_clipping"]["evidence"]
    # ... in whichever step falls there: a sample does not make its step timed
    rows = {row["step"]: row for row in step_rows(tmp_path)}
    assert not (rows[100]["timed"] and rows[int(found[1])]["timed"])


@pytest.mark.e2e
def test_without_a_terminal_the_dashboard_falls_back_to_headless(run_fastmon, report):
    out = run_fastmon("run", SCRIPTS / "exit_code.py", "--steps", "3")
    assert out.returncode == 0, out.stderr
    assert "no terminal for the dashboard: running headless" in out.stderr
    assert report()["steps"] == 3


@pytest.mark.e2e
def test_model_copies_and_a_new_model_mid_run(run_fastmon, tmp_path):
    """Copies of the model (deepcopy, pickle, torch.save, torch.jit.script) are the user's
    model alone, and a model created mid-run gets its forwards timed too."""
    plain = subprocess.run([sys.executable, SCRIPTS / "model_lifecycle.py"], capture_output=True, text=True,
                           timeout=120, check=True)
    out = run_fastmon("run", "--headless", SCRIPTS / "model_lifecycle.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout == plain.stdout
    assert "global hooks" not in out.stderr  # torch's warning about the probe's own discovery hooks
    rows = step_rows(tmp_path)
    assert len(rows) == 200  # 10 epochs of 20 batches
    first_model, new_model = timed(rows[:40]), timed(rows[40:])
    assert all(row["forward"] > 0 for row in first_model)
    # The new model's first timed step without another root's forward goes unseen, which
    # starts a discovery that finds it (its first step also holds the old model's forward
    # on the probe input, so the miss shows at its second).
    assert len(new_model) >= 5 and all(row["forward"] > 0 for row in new_model[2:])
    for row in timed(rows):
        assert sum(row[p] for p in PHASES) == pytest.approx(row["wall"], rel=0.02)


@pytest.mark.e2e
def test_another_threads_optimizer_steps_are_not_the_runs(run_fastmon, tmp_path, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "background_optimizer.py")
    assert out.returncode == 0, out.stderr
    side_steps = int(out.stdout.split()[-1])
    assert side_steps > 100  # the other thread stepped throughout
    rows = step_rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(3000))
    assert len(timed(rows)) < 1000  # most steps untimed: the short way was taken
    assert report()["steps"] == 3000


@pytest.mark.e2e
def test_a_call_replaced_mid_run_is_used_and_timed(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "compile_mid_run.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "calls through the new call 8000"
    plain = subprocess.run([sys.executable, SCRIPTS / "compile_mid_run.py"], capture_output=True, text=True,
                           timeout=120, check=True)
    assert out.stdout == plain.stdout
    rows = step_rows(tmp_path)
    assert len(rows) == 8400
    after = timed(rows[450:])  # arming the next timed step wraps the new call (one in 200-1000 is timed)
    assert len(after) >= 3 and all(row["forward"] > 0 for row in after)


@pytest.mark.e2e
def test_a_deleted_optimizer_and_model_are_freed(run_fastmon):
    out = run_fastmon("run", "--headless", SCRIPTS / "optimizer_freed.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"trial {trial}: optimizer freed True, model freed True" for trial in (0, 1)]


@pytest.mark.e2e
def test_the_optimizer_and_the_loaders_iterator_keep_pythons_fast_paths(run_fastmon, tmp_path):
    # What the probe keeps on them must not make CPython build their instance dicts: every
    # method call on them at every step would lose its specialization (README: "Never an
    # object's __dict__").
    script = SCRIPTS / "instance_dicts.py"
    bare = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = run_fastmon("run", "--headless", script)
    assert out.returncode == 0, out.stderr
    assert "optimizer dict built" in bare.stdout
    assert out.stdout.splitlines() == bare.stdout.splitlines()


@pytest.mark.e2e
def test_the_demo_shows_a_starved_run_and_the_advisor_fixing_it(run_fastmon, report):
    # The README's main command, headless: the starved example with --apply auto. Its
    # dataset takes 0.4 s to open in each worker, at every epoch until the workers persist.
    out = run_fastmon("demo", "--headless", timeout=400)
    assert out.returncode == 0, out.stderr
    summary = report()
    assert summary["exit_code"] == 0
    applied = {a["id"]: a for a in summary["applied"]}
    workers, persistent = applied["dataloader.num_workers"], applied["dataloader.persistent_workers"]
    assert workers["kept"] and workers["speedup"] > 1.5 and workers["params"]["num_workers"] > 0
    assert persistent["kept"] and persistent["speedup"] > 1.1
    assert "persistent_workers=True" in out.stderr
    # each epoch's new workers are workers, even in the sample taken before the probe named them
    assert summary["memory"]["other_processes_max"] == 0 and summary["memory"]["workers_seen_max"] >= 2
    # the run after the fix, with the starved run before it beside it. The demo's model is
    # tiny, so waiting may stay most of a step after the fix: a far shorter wait, not a share.
    before, after = summary["changes"]["before"], summary["changes"]["after"]
    assert after["phase_ms"]["data_wait"]["median"] < before["phase_ms"]["data_wait"]["median"] / 5
    assert after["samples_per_s"] > 5 * before["samples_per_s"]
    assert after["step_ms"]["median"] < before["step_ms"]["median"] / 5
    assert "before and after the changes fastmon made" in out.stderr


@pytest.mark.e2e
def test_a_character_cut_across_two_reads_is_recorded_whole(run_fastmon, tmp_path):
    out = run_fastmon("run", "--headless", SCRIPTS / "split_utf8.py")
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(tmp_path)
    db = sqlite3.connect(run / "run.sqlite")
    printed = "".join(text for (text,) in db.execute("SELECT text FROM log WHERE stream = 'stdout' ORDER BY t"))
    assert printed == "café\nnaïve\n日本\n"


def test_advice_never_points_into_an_installed_library_wherever_it_was_installed(tmp_path):
    import site

    from fastmon.probe.location import is_user_file

    user_site = site.getusersitepackages()  # pip install --user torch
    assert not is_user_file(f"{user_site}/torch/nn/modules/module.py")
    assert not is_user_file("/opt/vendor/lib/python3.11/dist-packages/torch/optim/optimizer.py")
    assert not is_user_file("/srv/env/lib/python3.11/site-packages/transformers/trainer.py")
    script = tmp_path / "train.py"
    assert is_user_file(str(script))


def test_a_recompiled_modules_advice_points_at_the_users_line_not_dynamos_frame(tmp_path):
    # torch.compile(model): the frame dynamo recompiles is its own external_utils.py wrapper;
    # the advice pointed there (issue 56), not at the guarded line the reason names
    import torch._dynamo.external_utils as dynamos

    from fastmon.probe.compiling import recompiled_at

    script = str(tmp_path / "recompile_loop.py")
    reason = f"0/1: L['x'].size()[0] == 32  # return self.net(x)  # {script}:14 in forward"
    assert recompiled_at(reason, dynamos.__file__, 67, 60).endswith("recompile_loop.py:14")
    assert recompiled_at(reason, script, 11, 9).endswith("recompile_loop.py:11")  # the user's own frame first
    assert recompiled_at("0/1: a guard failed", dynamos.__file__, 67, 60) is None  # then the torch.compile call


def test_the_status_line_says_the_loaders_slowest_stage_while_the_steps_wait_for_data():
    from fastmon.common.phases import StepRow
    from fastmon.live_state import LiveState, RankState

    state = LiveState(started=99.0)
    state.ranks[0] = RankState()
    for step in range(20):
        values = dict.fromkeys(STEP_FIELDS, 0.0)
        values.update(rank=0, step=step, t_end=100 + step * 0.05, wall=0.05, data_wait=0.04, forward=0.01, samples=8,
                      timed=1)
        state.ranks[0].add(StepRow(**values), start_up=False)
    state.facts["pipeline_stages"] = {"workers": 0, "stages": [
        {"name": "SlowBlur", "where": "p.py:3", "samples": 80, "cpu_ms": 4.9, "wall_ms": 5.0, "waiting": False}]}
    assert "| loader's slowest: SlowBlur 5.00 ms a sample |" in status_line(state.view())
    for rank_state in state.ranks.values():  # the same steps, computing rather than waiting
        rank_state.rows = type(rank_state.rows)(r._replace(data_wait=0.0, forward=0.05) for r in rank_state.rows)
    assert "loader's slowest" not in status_line(state.view())
