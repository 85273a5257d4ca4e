"""Faults: a killed monitor, a killed trainer, a bug inside the probe."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import SCRIPTS, clean_env, fastmon_cmd, run_dirs, wait_for
from fastmon.probe.publisher import INTERVAL as PUBLISHER_INTERVAL


def fastmon_folders() -> list[str]:
    """Where fastmon's code lies, as installed (one folder per package: probe/ beside
    fastmon/ in a checkout): a frame from there is fastmon's, whatever the checkout's name."""
    import fastmon
    import fastmon.advisor
    import fastmon.common
    import fastmon.probe
    import fastmon.tui

    return [str(Path(p).resolve()) + "/" for package in (fastmon, fastmon.common, fastmon.probe, fastmon.advisor, fastmon.tui)
            for p in package.__path__]


def of_fastmon(frame_line: str) -> bool:
    """A traceback's '  File "PATH", line N' from fastmon's own code."""
    path = frame_line.split('"')[1]
    return any(str(Path(path).resolve()).startswith(folder) for folder in fastmon_folders())


def recorded_steps(tmp_path) -> int:
    runs = run_dirs(tmp_path)
    if not runs or not (runs[0] / "run.sqlite").exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{runs[0] / 'run.sqlite'}?mode=ro", uri=True)
        return db.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.e2e
@pytest.mark.parametrize("way", ["print", "buffer", "dunder", "fd", "child"])
def test_killing_the_monitor_leaves_training_running_with_all_its_output(tmp_path, way):
    """However the script writes (Python objects, the file descriptor, a child process that
    inherited it), a SIGKILLed monitor costs it nothing: the training finishes, and the run
    folder's output.log holds every line, once, in order, what was in flight included."""
    done = tmp_path / "done.txt"
    steps, lines = 150, (1 if way == "child" else 40)
    monitor = subprocess.Popen(
        fastmon_cmd("run", "--headless", SCRIPTS / "writes_every_way.py", "--steps", steps, "--step-ms", "20",
                    "--way", way, "--lines", lines, "--done-file", done),
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    wait_for(lambda: recorded_steps(tmp_path) >= 10, 60, "the first steps to be recorded")
    (trainer,) = psutil.Process(monitor.pid).children()
    channel_folder = Path(trainer.environ()["FASTMON_CHANNEL"]).parent
    monitor.kill()
    monitor.wait()
    assert trainer.is_running()
    wait_for(done.exists, 60, "the training to finish after the monitor died")
    assert done.read_text() == f"finished {steps} steps\n"
    trainer.wait(10)
    assert not channel_folder.exists()  # the trainer took away the socket folder its killed monitor left
    (run,) = run_dirs(tmp_path)
    printed = [line for line in (run / "output.log").read_text().splitlines() if line.startswith("line ")]
    assert printed == [f"line {step} {k}" for step in range(steps) for k in range(lines)]


@pytest.mark.e2e
def test_killing_the_trainer_leaves_a_readable_record(tmp_path):
    monitor = subprocess.Popen(
        fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "100000", "--step-ms", "10"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), text=True)
    wait_for(lambda: recorded_steps(tmp_path) >= 50, 60, "steps to be recorded")
    (trainer,) = psutil.Process(monitor.pid).children()
    time.sleep(0.5)
    trainer.kill()
    stdout, stderr = monitor.communicate(timeout=60)
    assert monitor.returncode == 128 + signal.SIGKILL
    printed = [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("step ")]
    steps = recorded_steps(tmp_path)
    # every step up to the last publisher batch (INTERVAL s of ~10 ms steps) is there
    assert steps >= printed[-1] + 1 - (PUBLISHER_INTERVAL / 0.010 + 5)
    out = subprocess.run(fastmon_cmd("report", "--json"), cwd=tmp_path, capture_output=True, text=True,
                         env=clean_env(), timeout=60)
    assert out.returncode == 0
    assert '"exit_code": 137' in out.stdout
    assert "exit code 137 (killed by SIGKILL)" in stderr  # the summary at the end says how


@pytest.fixture(scope="module")
def plain_weights() -> str:
    """What the script prints without fastmon: the same for every part broken."""
    plain = subprocess.run([sys.executable, SCRIPTS / "fault_injection.py"], capture_output=True, text=True,
                           timeout=120, env=clean_env())
    weights = [line for line in plain.stdout.splitlines() if line.startswith("weights")]
    assert weights, plain.stderr
    return weights[0]


@pytest.mark.e2e
@pytest.mark.parametrize("part", ["forward", "backward", "loader", "optimizer"])
def test_a_fault_inside_the_probe_is_reported_once_and_changes_nothing(tmp_path, part, plain_weights):
    watched = subprocess.run(fastmon_cmd("run", "--headless", SCRIPTS / "fault_injection.py", "--break-part", part),
                             cwd=tmp_path, capture_output=True, text=True, timeout=120, env=clean_env())
    assert watched.returncode == 0, watched.stderr
    assert plain_weights in watched.stdout.splitlines()
    assert watched.stderr.count("hit an internal error and are now off") == 1
    assert "injected fault" in watched.stderr
    report = subprocess.run(fastmon_cmd("report", "--json"), cwd=tmp_path, capture_output=True, text=True,
                            env=clean_env(), timeout=60)
    assert '"probe_faults": [' in report.stdout and "injected fault" in report.stdout


@pytest.mark.e2e
def test_probe_without_a_monitor_runs_the_script(tmp_path):
    # python -m fastmon.probe works alone (no channel): records are dropped and counted
    out = subprocess.run([sys.executable, "-m", "fastmon.probe", SCRIPTS / "exit_code.py", "--code", "5"],
                         capture_output=True, text=True, timeout=120, env=clean_env(), cwd=tmp_path)
    assert out.returncode == 5
    assert "name __main__" in out.stdout
    assert out.stderr == ""


@pytest.mark.e2e
@pytest.mark.parametrize("after_s", [2.0, 0.0], ids=["mid-run", "while-importing-torch"])
def test_ctrl_c_reaches_the_training_when_headless(tmp_path, after_s):
    """The headless monitor ignores Ctrl-C to record the end; the training must not inherit
    that: Ctrl-C (SIGINT to the trainer, as a terminal sends it) stops it as it would python,
    in the middle of the run and at its very start, while torch is still being imported."""
    monitor = subprocess.Popen(fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "1000"), cwd=tmp_path,
                               env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a terminal's defaults
    trainer = wait_for(lambda: next((c for c in psutil.Process(monitor.pid).children(recursive=True)
                                     if "fastmon.probe" in " ".join(c.cmdline())), None), 60, "the trainer")
    time.sleep(after_s)
    trainer.send_signal(signal.SIGINT)
    _, err = monitor.communicate(timeout=60)
    if after_s:
        assert monitor.returncode == 130, err[-3000:]
        assert "KeyboardInterrupt" in err
    else:  # it reached python, which stops as python stops: 130, or 1 when the interpreter's
        # own start-up is cut short (in site, in `-m`'s import of runpy, ...); or, as python
        # does too, goes on when the KeyboardInterrupt lands in a callback that CPython runs
        # with exceptions ignored (importlib's module-lock weakref callback)
        reached = "KeyboardInterrupt" in err or "Fatal Python error" in err
        stopped = monitor.returncode == 130 or (monitor.returncode == 1 and reached)
        went_on = monitor.returncode == 0 and "Exception ignored in" in err and reached
        assert stopped or went_on, err[-3000:]


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB filesystem of its own (tmpfs; needs root, as CI has)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk) -> None:
    with open(disk / "filler", "wb") as filler:
        try:
            while True:
                filler.write(bytes(65536))
                filler.flush()
        except OSError:
            pass


@pytest.mark.e2e
def test_a_full_disk_loses_no_training_and_counts_every_step_not_written(tmp_path, small_disk):
    monitor = subprocess.Popen(
        fastmon_cmd("run", "--headless", "--runs-dir", small_disk, SCRIPTS / "slow_steps.py", "--steps", "400",
                    "--step-ms", "10"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), text=True)
    runs = small_disk

    def recorded() -> int:
        try:
            (record,) = runs.glob("*/run.sqlite")
            return sqlite3.connect(f"file:{record}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM steps").fetchone()[0]
        except (ValueError, sqlite3.Error):
            return 0

    wait_for(lambda: recorded() >= 20, 60, "the first steps to be recorded")
    fill(small_disk)
    time.sleep(1.5)
    (small_disk / "filler").unlink()  # space comes back: recording resumes
    stdout, stderr = monitor.communicate(timeout=120)
    assert monitor.returncode == 0, stderr[-2000:]
    assert "step 399" in stdout  # the training went on to its end
    assert "cannot write" in stderr and "counted as dropped" in stderr and "recording resumes" in stderr
    assert "Traceback" not in stderr
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    out = subprocess.run(fastmon_cmd("report", run, "--json"), cwd=tmp_path, capture_output=True, text=True,
                         env=clean_env(), timeout=60)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert 20 <= summary["steps"] < 400
    assert summary["dropped"] == 400 - summary["steps"] > 0
    # the record names the full disk (issue 53: "did not reach the monitor (its channel fell behind)")
    assert "the run file could not be written (a full disk)" in summary["record_lacks"]["why"], summary["record_lacks"]


@pytest.mark.e2e
def test_a_helper_that_outlives_the_script_does_not_hold_fastmon(tmp_path):
    # python returns when the script ends; the helper's later output still reaches the terminal.
    go = tmp_path / "go"
    proc = subprocess.Popen(fastmon_cmd("run", "--headless", SCRIPTS / "leaves_helper.py", go), cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env())
    try:
        assert proc.wait(timeout=120) == 0
        helper = int(proc.stdout.readline().split()[1])
        assert psutil.pid_exists(helper)  # fastmon is back while the helper still runs
        go.touch()
        assert proc.stdout.read() == b"helper done\n"
    finally:
        go.touch()
        proc.kill()
    (run,) = run_dirs(tmp_path)
    assert (run / "output.log").read_text().startswith("helper ")


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", ["python", "fastmon"])
def test_a_closed_pipe_downstream_stops_the_script_as_under_python(tmp_path, launcher):
    # `... | head -n 3`: the script's next print meets the broken pipe, and ends with its exit code.
    done = tmp_path / "done"
    script = [SCRIPTS / "writes_every_way.py", "--steps", "2000", "--step-ms", "5", "--lines", "1", "--done-file", done]
    command = [sys.executable, *script] if launcher == "python" else fastmon_cmd("run", "--headless", *script)
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
    try:
        assert [proc.stdout.readline() for _ in range(3)] == [b"line 0 0\n", b"line 1 0\n", b"line 2 0\n"]
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 1
    finally:
        proc.kill()
    assert "BrokenPipeError" in stderr
    assert not done.exists()


@pytest.mark.e2e
@pytest.mark.parametrize("where", ["worker", "forward", "backward"])
def test_an_error_raised_through_fastmons_hooks_reads_as_under_python(tmp_path, where):
    script = [SCRIPTS / "raises_inside.py", "--where", where]
    bare = subprocess.run([sys.executable, *script], capture_output=True, text=True, timeout=120, env=clean_env())
    under = subprocess.run(fastmon_cmd("run", "--headless", *script), cwd=tmp_path, capture_output=True, text=True,
                           timeout=240, env=clean_env())
    assert bare.returncode == under.returncode == 1
    frames = [line for line in under.stderr.splitlines() if line.startswith('  File "')]
    assert frames and not [line for line in frames if of_fastmon(line)]
    if where == "forward":  # torch's module call takes another path when hooks are in: its frames differ
        mine = str(SCRIPTS / "raises_inside.py")
        assert [f for f in frames if mine in f] == [f for f in bare.stderr.splitlines() if mine in f]
    else:
        assert bare.stderr in under.stderr


def test_frames_are_judged_by_where_fastmon_is_installed_not_by_its_name():
    # a checkout cloned into a folder named fastmon: the user's own frames there are theirs
    assert not of_fastmon('  File "/home/me/fastmon/train.py", line 3, in <module>')
    assert of_fastmon(f'  File "{fastmon_folders()[0]}session.py", line 1, in start')
    assert of_fastmon(f'  File "{fastmon_folders()[1]}runtime.py", line 1, in close')


@pytest.mark.e2e
def test_a_disk_that_fills_while_the_script_prints_holds_back_no_line(tmp_path, small_disk):
    # 2 MB of disk, a script printing ~200 lines a step for 3 s: the record fills, the output goes on
    started = time.time()
    monitor = subprocess.run(fastmon_cmd("run", "--headless", "--runs-dir", small_disk, SCRIPTS / "prints_fast.py",
                                         "--seconds", "3"), cwd=tmp_path, capture_output=True, text=True,
                             timeout=120, env=clean_env())
    returned = time.time()
    assert monitor.returncode == 0, monitor.stderr[-3000:]
    last = monitor.stdout.splitlines()[-1]
    printed, ended = int(last.split()[1]), float(last.rsplit(" ", 1)[1])
    assert monitor.stdout.count("\nline ") + monitor.stdout.startswith("line ") == printed  # every line reached us
    assert returned - ended < 4.0 and ended - started < 20  # ended as python's would; nothing blocked it
    assert "Traceback" not in monitor.stderr
    said = [line for line in monitor.stderr.splitlines()
            if "output.log (No space left on device): the script's output is recorded up to byte" in line]
    # said once as it happens; the report repeats it as a note where the record could keep the notice
    assert [line for line in said if not line.startswith("  note: ")] == said[:1], said
    assert said[0].startswith("[fastmon] cannot write ") and len(said) <= 2, said
    assert "the record lacks:" in monitor.stderr or "none recorded:" in monitor.stderr


@pytest.mark.e2e
def test_a_disk_full_before_the_start_starts_nothing(tmp_path, small_disk):
    fill(small_disk)
    out = subprocess.run(fastmon_cmd("run", "--headless", "--runs-dir", small_disk, SCRIPTS / "slow_steps.py",
                                     "--steps", "3"), cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=clean_env())
    assert out.returncode == 73 and "nothing started" in out.stderr and "No space left" in out.stderr
    assert "step 0" not in out.stdout and "Traceback" not in out.stderr
    assert [p for p in small_disk.iterdir() if p.name != "filler"] == []


@pytest.mark.e2e
def test_a_run_folder_deleted_mid_run_is_said_once_and_the_training_goes_on(tmp_path):
    import shutil

    monitor = subprocess.Popen(fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "300",
                                           "--step-ms", "10"),
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(), text=True)
    wait_for(lambda: recorded_steps(tmp_path) >= 20, 60, "the first steps to be recorded")
    (run,) = run_dirs(tmp_path)
    shutil.rmtree(run)
    stdout, stderr = monitor.communicate(timeout=120)
    assert monitor.returncode == 0 and "step 299" in stdout
    assert stderr.count(f"the run folder {run.relative_to(tmp_path)} was deleted: nothing more is recorded") == 1
    assert f"no summary: {run.relative_to(tmp_path)} was deleted during the run" in stderr
    assert "Traceback" not in stderr


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["os_exit", "segfault"])
def test_an_abrupt_end_says_how_long_before_it_the_record_stops(tmp_path, how):
    out = subprocess.run(fastmon_cmd("run", "--headless", SCRIPTS / "abrupt_end.py", "--how", how), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env=clean_env())
    assert out.returncode == (0 if how == "os_exit" else 128 + signal.SIGSEGV), out.stderr[-2000:]
    assert "made 3000 steps" in out.stdout
    summary = json.loads(subprocess.run(fastmon_cmd("report", "--json"), cwd=tmp_path, capture_output=True,
                                        text=True, timeout=60, env=clean_env()).stdout)
    lacks = summary["record_lacks"]
    assert 0 < summary["steps"] <= 3000 and lacks is not None and 0 <= lacks["up_to_s"] <= 2 * PUBLISHER_INTERVAL
    assert "ended without its last send" in out.stderr and "record holds every step" not in out.stderr
    frames = [line for line in out.stderr.splitlines() if line.startswith('  File "')]
    assert not [line for line in frames if of_fastmon(line)]


@pytest.mark.e2e
def test_a_script_name_that_is_not_utf8_runs_as_python_runs_it(tmp_path):
    import os

    name = os.fsencode(tmp_path) + b"/caf\xe9.py"
    with open(name, "wb") as script:
        script.write(b"print('ran', 6 * 7)\n")
    env = dict(clean_env(), LC_ALL="C.UTF-8")
    bare = subprocess.run([sys.executable, name], capture_output=True, timeout=60, env=env)
    under = subprocess.run([*map(os.fsencode, fastmon_cmd("run", "--headless")), name], cwd=tmp_path,
                           capture_output=True, timeout=120, env=env)
    assert bare.returncode == under.returncode == 0 and bare.stdout == under.stdout == b"ran 42\n"
    assert b"Traceback" not in under.stderr


@pytest.mark.e2e
def test_a_report_piped_into_head_ends_quietly(tmp_path, run_fastmon):
    assert run_fastmon("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "3", "--step-ms", "1").returncode == 0
    piped = subprocess.run(f"{sys.executable} -m fastmon report | head -1", shell=True, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60, env=clean_env())
    assert piped.returncode == 0 and piped.stdout.startswith("fastmon report") and piped.stderr == ""
    # a reader gone before anything is written (`| true`): the write itself meets the closed pipe
    for reader in ("head -1", "true"):
        status = subprocess.run(f"{sys.executable} -m fastmon report | {reader}; exit ${{PIPESTATUS[0]}}", shell=True,
                                executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True, timeout=60,
                                env=clean_env())
        assert status.returncode == 0 and status.stderr == "", (reader, status.stderr)


@pytest.mark.e2e
def test_heavy_output_headless_keeps_the_monitor_small(tmp_path):
    # ~100+ MB/s of output for 6 s: it all passes through; the monitor holds a bounded part of it
    monitor = subprocess.Popen(fastmon_cmd("run", "--headless", SCRIPTS / "prints_fast.py", "--seconds", "6",
                                           "--lines-per-step", "2000", "--width", "500"),
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env())
    me = psutil.Process(monitor.pid)
    peak, received = 0, 0
    while monitor.poll() is None:
        received += len(monitor.stdout.read1(1 << 20))
        try:
            peak = max(peak, me.memory_info().rss)
        except psutil.Error:
            break
    received += len(monitor.stdout.read())
    assert monitor.returncode == 0
    assert received > 100 * 2**20  # it was heavy
    assert peak < 100 * 2**20, f"the monitor's RSS reached {peak / 2**20:.0f} MiB"


@pytest.mark.e2e
def test_a_worker_that_exits_ends_the_training_as_under_python_with_its_steps_recorded(tmp_path):
    script = SCRIPTS / "worker_exits.py"
    bare = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120, env=clean_env())
    under = subprocess.run(fastmon_cmd("run", "--headless", script), cwd=tmp_path, capture_output=True, text=True,
                           timeout=240, env=clean_env())
    assert bare.returncode == under.returncode == 1  # (torch words the worker's loss one of two ways, by timing)
    frames = [line for line in under.stderr.splitlines() if line.startswith('  File "')]
    assert not [line for line in frames if of_fastmon(line)] and "Exception ignored in atexit" not in under.stderr
    summary = json.loads(subprocess.run(fastmon_cmd("report", "--json"), cwd=tmp_path, capture_output=True,
                                        text=True, timeout=60, env=clean_env()).stdout)
    assert summary["steps"] >= 300 and summary["record_lacks"] is None  # it ended through python: all sent


@pytest.mark.e2e
def test_a_tmpdir_too_long_for_a_socket_runs(tmp_path):
    long_tmp = tmp_path / ("t" * 190)
    long_tmp.mkdir()
    out = subprocess.run(fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "20", "--step-ms", "5"),
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=clean_env(TMPDIR=str(long_tmp)))
    assert out.returncode == 0 and "step 19" in out.stdout and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "the record holds every step the probe made (20)" in out.stderr



@pytest.mark.e2e
def test_a_forward_that_raises_while_fastmon_looks_for_the_model_leaves_its_timing_whole(run_fastmon, report):
    # torch calls an always-called global hook without the keywords after a forward raised:
    # a hook that wanted them raised, torch warned on the script's stderr, and no forward
    # was timed again
    out = run_fastmon("run", "--headless", SCRIPTS / "forward_raises_once.py")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "UserWarning" not in out.stderr and "fastmon: the probe" not in out.stderr
    summary = report()
    assert summary["steps"] == 60 and summary["phases"]["forward"] > 0.05


@pytest.mark.e2e
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP])
def test_a_record_whose_monitor_died_says_it_is_partial_and_a_whole_one_never_does(tmp_path, how):
    # issue 53: monitor SIGKILLed 5 s into a 10 s run, the training made 7,537 steps, the
    # record held 1,395 and the report said "the record holds every step the probe made"
    monitor = subprocess.Popen(fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "60",
                                           "--step-ms", "50"),
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env())
    wait_for(lambda: recorded_steps(tmp_path) >= 5, 60, "the first steps to be recorded")
    (trainer,) = psutil.Process(monitor.pid).children()
    monitor.send_signal(how)
    monitor.wait(30)
    trainer.wait(60)
    report = subprocess.run(fastmon_cmd("report"), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env=clean_env())
    assert report.returncode == 0, report.stderr
    assert re.search(r"the record lacks: the monitor ended before the training did.*steps after \d\d:\d\d:\d\d "
                     r"are not in this record", report.stdout), report.stdout
    assert "holds every step" not in report.stdout
    (run,) = run_dirs(tmp_path)
    assert reads_back(run)["record_lacks"]["partial"] == "monitor_ended"
    whole = subprocess.run(fastmon_cmd("run", "--headless", SCRIPTS / "slow_steps.py", "--steps", "5", "--step-ms",
                                       "10"), cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env=clean_env())
    assert "the record holds every step the probe made (5)" in whole.stderr


def test_a_record_writer_that_blocks_never_holds_up_the_scripts_writes(tmp_path, monkeypatch):
    # output.log on a disk that stops taking writes (fsfreeze needs root: here every write
    # call into output.log waits until the test ends): the script's prints must go on, the
    # record lagging behind
    from fastmon.script_output import ScriptOutput

    thawed = threading.Event()

    def frozen(call):
        def wait_then(fd, *args, **kwargs):
            for target in (fd, kwargs.get("fd_out"), *args[:1]):
                if isinstance(target, int) and of_this_output_log(target):
                    thawed.wait(60)
            return call(fd, *args, **kwargs)
        return wait_then

    def of_this_output_log(fd: int) -> bool:  # (other threads of this process write too: never theirs)
        try:
            return os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "output.log")
        except OSError:
            return False

    for name in ("write", "pwrite", "splice"):
        monkeypatch.setattr(os, name, frozen(getattr(os, name)))
    output = ScriptOutput(tmp_path, lambda *_: None, lambda stream: None, passthrough=False)
    read, write = os.pipe()
    output.start({"stdout": read})
    printing = threading.Thread(target=lambda: [os.write(write, b"x" * 4095 + b"\n") for _ in range(512)])
    printing.start()
    printing.join(30)
    thawed.set()
    assert not printing.is_alive(), "the script's writes waited for the record's disk"
    os.close(write)
    output.wait_after_exit()
    output.close()


def test_a_chunk_stays_in_the_scripts_pipe_until_output_log_holds_it(tmp_path, monkeypatch):
    # A monitor SIGKILLed between reading a chunk and writing it lost that chunk (a CI run
    # lost "line 15 *" of 150 steps): until the log holds it, the chunk must still be in
    # the pipe, where the trainer drains it from once the monitor is gone.
    import fastmon.script_output as script_output
    from fastmon.probe.output import unread

    writing, thawed = threading.Event(), threading.Event()
    real_write = os.write

    def slow_log_write(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "output.log"):
            writing.set()
            thawed.wait(60)
        return real_write(fd, data)

    monkeypatch.setattr(script_output, "RECORD_WAIT_S", 60)
    monkeypatch.setattr(os, "write", slow_log_write)
    output = script_output.ScriptOutput(tmp_path, lambda *_: None, lambda stream: None, passthrough=False)
    read, write = os.pipe()
    output.start({"stdout": read})
    real_write(write, b"line 15 0\n")
    assert writing.wait(30)
    assert unread(read) == len(b"line 15 0\n"), "the chunk left the pipe before output.log held it"
    thawed.set()
    os.close(write)
    output.wait_after_exit()
    output.close()
    assert (tmp_path / "output.log").read_bytes() == b"line 15 0\n"


@pytest.mark.e2e
def test_a_training_that_execs_itself_is_said_and_its_record_called_partial(tmp_path):
    out = subprocess.run(fastmon_cmd("run", "--headless", SCRIPTS / "execs_itself.py"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["first part done", "resumed part done"]  # the exec ran as without fastmon
    assert "replaced itself at step 30 with os.exec" in out.stderr
    (run,) = run_dirs(tmp_path)
    lacks = reads_back(run)["record_lacks"]
    assert lacks["partial"] == "exec" and "not in this record" in lacks["why"]


def reads_back(run: Path) -> dict:
    """A record as fastmon's three readers take it: the report (its json returned), the
    replay's first and last screens, and the trace export."""
    from fastmon.tui.snapshot import ReplaySource

    report = subprocess.run(fastmon_cmd("report", str(run), "--json"), capture_output=True, text=True, timeout=60,
                            env=clean_env())
    assert report.returncode == 0, report.stderr
    replay = ReplaySource(run)
    assert replay.snapshot().steps >= 1
    replay.jump(replay.length - 1)
    replay.snapshot()
    export = subprocess.run(fastmon_cmd("export", str(run), "-o", str(run / "read-back.json")), capture_output=True,
                            text=True, timeout=120, env=clean_env())
    assert export.returncode == 0, export.stderr
    assert json.loads((run / "read-back.json").read_text())["traceEvents"]
    return json.loads(report.stdout)
