"""fastmon.attach(): a job fastmon did not start, watched from inside (docs/attach.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from conftest import SCRIPTS, clean_env, fastmon_cmd, run_dirs


def python(tmp_path, *args, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env=clean_env(), stdin=subprocess.DEVNULL)


@pytest.mark.e2e
def test_an_attached_script_is_recorded_and_runs_as_without_fastmon(tmp_path, report):
    out = python(tmp_path, SCRIPTS / "attached.py", "--steps", "40", "--exit-code", "3")
    assert out.returncode == 3, out.stderr  # its exit code, its output: unchanged
    assert out.stdout == "done\n"
    (run,) = run_dirs(tmp_path)  # the second attach() made no second record
    assert f"[fastmon] attached: recording to {run}" in out.stderr
    summary = report()
    assert summary["steps"] == 40
    assert summary["attached"] == "finished" and summary["exit_code"] is None
    text = subprocess.run(fastmon_cmd("report"), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=clean_env()).stdout
    assert "exit code not seen (fastmon.attach" in text


@pytest.mark.e2e
def test_an_attached_job_killed_midway_is_called_crashed(tmp_path, report):
    out = python(tmp_path, SCRIPTS / "attached.py", "--steps", "200", "--step-ms", "5", "--kill-at", "60")
    assert out.returncode == -9
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and report()["attached"] == "running":
        time.sleep(0.2)
    summary = report()
    assert summary["attached"] == "crashed" and 0 < summary["steps"] <= 60
    text = subprocess.run(fastmon_cmd("report"), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=clean_env()).stdout
    assert "crashed: a rank ended without saying goodbye" in text


@pytest.mark.e2e
def test_attach_where_nothing_can_be_recorded_says_so_in_one_line_and_runs_on(tmp_path):
    out = python(tmp_path, SCRIPTS / "attached.py", "--steps", "20", "--runs-dir", "/dev/null/runs")
    assert out.returncode == 0 and out.stdout == "done\n"
    lines = [line for line in out.stderr.splitlines() if "fastmon" in line]
    assert len(lines) == 1 and "cannot record in '/dev/null/runs'" in lines[0], out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.e2e
def test_attach_under_fastmon_run_does_nothing(tmp_path, run_fastmon, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "attached.py", "--steps", "30")
    assert out.returncode == 0, out.stderr
    assert "attached: recording" not in out.stderr
    assert len(run_dirs(tmp_path)) == 1
    summary = report()
    assert summary["steps"] == 30 and summary["attached"] is None and summary["exit_code"] == 0


@pytest.mark.e2e
@pytest.mark.parametrize("launch", [
    ["-m", "torch.distributed.run", "--nproc-per-node", "2"],
    ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
     "--mixed_precision", "no", "--dynamo_backend", "no"]], ids=["torchrun", "accelerate"])
def test_every_rank_that_attaches_is_in_one_record(tmp_path, report, launch):
    out = subprocess.run([sys.executable, *launch, str(SCRIPTS / "attached.py"), "--steps", "50"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=240, env=clean_env(), stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["done", "done"]
    assert out.stderr.count("attached: recording to") == 1  # one monitor for the node
    (run,) = run_dirs(tmp_path)
    summary = report()
    assert [(rank["rank"], rank["steps"]) for rank in summary["ranks"]] == [(0, 50), (1, 50)]


@pytest.mark.e2e
async def test_watch_follows_an_attached_run(tmp_path):
    from fastmon.common.run_status import RunStatus
    from fastmon.tui.app import FastmonApp
    from fastmon.tui.snapshot import FollowSource

    job = subprocess.Popen([sys.executable, str(SCRIPTS / "attached.py"), "--steps", "100000", "--step-ms", "20"],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (run_dirs(tmp_path) and FollowSource(run_dirs(tmp_path)[0]).length):
            await asyncio.sleep(0.2)
        source = FollowSource(run_dirs(tmp_path)[0])
        assert source.following
        refused = source.commands.apply("dataloader.num_workers")  # attach's default: apply="never"
        assert 'attach(apply="ask")' in refused
        app = FastmonApp(source)
        async with app.run_test(size=(160, 48)) as pilot:
            await pilot.pause(1.0)
            first = app.snapshot.steps
            assert app.snapshot.status == RunStatus.RUNNING
            await pilot.pause(2.0)
            assert app.snapshot.steps > first
            await pilot.press("q")
        assert job.poll() is None  # quitting the watch leaves the job going
    finally:
        job.terminate()
        job.wait(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and FollowSource(run_dirs(tmp_path)[0]).following:
        await asyncio.sleep(0.2)
    assert not FollowSource(run_dirs(tmp_path)[0]).following  # its monitor closed the record


def test_attach_refuses_a_setting_it_cannot_honour():
    import fastmon

    with pytest.raises(ValueError, match="apply='always'"):
        fastmon.attach(apply="always")
    with pytest.raises(ValueError, match="unknown tracker 'bogus'"):
        fastmon.attach(log_to=("bogus",))
    with pytest.raises(ValueError, match="unknown tracker 'tensorboardd'"):
        fastmon.attach(log_to="tensorboardd")


@pytest.mark.e2e
def test_a_notebook_that_attaches_records_the_steps_of_its_cells(tmp_path, report):
    import shutil

    from conftest import EXAMPLES

    shutil.copy(EXAMPLES / "attach_notebook.ipynb", tmp_path)
    out = subprocess.run(  # what `jupyter nbconvert --execute` runs
        [sys.executable, "-c", "import nbclient, nbformat\n"
         "nb = nbformat.read('attach_notebook.ipynb', as_version=4)\n"
         "nbclient.NotebookClient(nb, kernel_name='python3', resources={'metadata': {'path': '.'}}).execute()\n"
         "print(''.join(o.get('text', '') for c in nb.cells if c.cell_type == 'code' for o in c.outputs))"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240, env=clean_env(), stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(tmp_path)
    assert str(run) in out.stdout and "trained" in out.stdout
    deadline = time.monotonic() + 30  # the kernel has shut down: its monitor closes the record
    while time.monotonic() < deadline and report()["attached"] == "running":
        time.sleep(0.2)
    summary = report()
    assert summary["attached"] == "finished"
    assert summary["steps"] == 80  # two epochs of 40 batches, in the cell that trained
    assert summary["script"] == "notebook"
