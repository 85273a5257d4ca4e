"""Run folders: private to their owner, made in one step, named for any script python runs."""

from __future__ import annotations

import os
import stat
import subprocess
import threading

import pytest

from conftest import clean_env, fastmon_cmd, run_dirs
from fastmon.records import new_run_dir

TINY = "import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), 0.1)\n" \
       "for _ in range(5):\n    m(torch.randn(4, 2)).sum().backward(); o.step(); o.zero_grad()\nprint('secret 42')\n"


@pytest.mark.e2e
def test_a_run_folder_and_its_files_are_the_owners_alone_whatever_the_umask(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TINY)
    out = subprocess.run(fastmon_cmd("run", "--headless", script), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=clean_env(), preexec_fn=lambda: os.umask(0o022))
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(tmp_path)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    for path in run.iterdir():
        assert not stat.S_IMODE(path.stat().st_mode) & 0o077, path


def test_runs_started_in_the_same_second_each_get_their_own_folder(tmp_path):
    made, errors = [], []
    together = threading.Barrier(60)

    def start():
        together.wait()
        try:
            made.append(new_run_dir(tmp_path / "runs", "train"))
        except Exception as exc:  # a FileExistsError here was a traceback for the user
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(60)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(made)) == 60


@pytest.mark.e2e
def test_a_script_name_as_long_as_python_takes_runs(tmp_path):
    script = tmp_path / ("t" * 240 + ".py")
    script.write_text(TINY)
    out = subprocess.run(fastmon_cmd("run", "--headless", script), cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=clean_env())
    assert out.returncode == 0, out.stderr
    assert "secret 42" in out.stdout
    (run,) = run_dirs(tmp_path)
    assert run.name.endswith("t" * 80)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A real run folder, recorded once for the damage tests to copy."""
    where = tmp_path_factory.mktemp("recorded")
    script = where / "train.py"
    script.write_text(TINY)
    out = subprocess.run(fastmon_cmd("run", "--headless", script), cwd=where, capture_output=True, text=True,
                         timeout=120, env=clean_env())
    assert out.returncode == 0, out.stderr
    (run,) = run_dirs(where)
    return run


DAMAGE = {
    "meta": "UPDATE meta SET value = '{not json' WHERE key = 'script'",
    "facts": "UPDATE facts SET value = 'nan nan' WHERE rowid = (SELECT MIN(rowid) FROM facts)",
    "samples": "UPDATE samples SET data = '' WHERE rowid = (SELECT MIN(rowid) FROM samples)",
    "wall": "UPDATE steps SET wall = NULL WHERE step = 2",
    # values of the right type, out of any range fastmon writes: each named
    "huge wall": "UPDATE steps SET wall = 1e308 WHERE step = 2",
    "negative wall": "UPDATE steps SET wall = -5 WHERE step = 2",
    "negative samples": "UPDATE steps SET samples = -3 WHERE step = 2",
    "end time": "UPDATE steps SET t_end = 1e300 WHERE step = 2",
}
NAMED = {"huge wall": "a wall time of 1e+308 s", "negative wall": "a wall time of -5 s", "negative samples": "-3 samples",
         "end time": "an end time of 1e+300"}


@pytest.mark.e2e
@pytest.mark.parametrize("command,damage", [(c, d) for c in ("report", "export", "replay", "compare")
                                            for d in sorted(DAMAGE)])
def test_a_damaged_value_in_a_record_is_named_with_65_everywhere(recorded, tmp_path, command, damage):
    import shutil
    import sqlite3

    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    db = sqlite3.connect(run / "run.sqlite")
    db.execute(DAMAGE[damage])
    db.commit()
    db.close()
    runs = (recorded, run) if command == "compare" else (run,)
    out = subprocess.run(fastmon_cmd(command, *runs), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env=clean_env(), stdin=subprocess.DEVNULL)
    assert out.returncode == 65, (out.returncode, out.stderr[-2000:])
    assert "cannot read" in out.stderr and "damaged" in out.stderr
    assert NAMED.get(damage, "") in out.stderr
    assert "Traceback" not in out.stderr
    assert not list(run.glob("trace.json*"))  # no trace cut off where the damage was


@pytest.mark.e2e
def test_a_record_says_its_layout_version(recorded):
    import sqlite3

    from fastmon.records import RECORD_VERSION

    with sqlite3.connect(recorded / "run.sqlite") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == RECORD_VERSION >= 1


@pytest.mark.e2e
def test_a_record_of_a_newer_layout_is_refused_with_its_version(tmp_path):
    import shutil
    import sqlite3

    from conftest import ROOT

    run = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "data" / "h200-nanogpt-eager-1", run)
    with sqlite3.connect(run / "run.sqlite") as db:
        db.execute("PRAGMA user_version = 99")
    for command in ("report", "replay", "export"):
        out = subprocess.run(fastmon_cmd(command, run), cwd=tmp_path, capture_output=True, text=True, timeout=60,
                             env=clean_env(), stdin=subprocess.DEVNULL)
        assert out.returncode == 65 and "layout is version 99, newer than this fastmon reads" in out.stderr, \
            (command, out.stderr[-500:])
        assert "Traceback" not in out.stderr and "damaged" not in out.stderr


@pytest.mark.e2e
def test_an_older_layout_is_read_by_column_name(tmp_path):
    """Columns in another order, one missing: read by name, the missing one as n/a."""
    import json
    import shutil
    import sqlite3

    from conftest import ROOT

    original = ROOT / "tests" / "data" / "h200-nanogpt-eager-1"
    run = tmp_path / "run"
    shutil.copytree(original, run)
    with sqlite3.connect(run / "run.sqlite") as db:
        columns = [name for _, name, *_ in db.execute("PRAGMA table_info(steps)") if name != "mem_reserved"][::-1]
        db.execute(f"CREATE TABLE old_steps AS SELECT {', '.join(columns)} FROM steps")
        db.execute("DROP TABLE steps")
        db.execute("ALTER TABLE old_steps RENAME TO steps")
        db.execute("PRAGMA user_version = 0")

    def report(where):
        out = subprocess.run(fastmon_cmd("report", where, "--json"), capture_output=True, text=True, timeout=60,
                             env=clean_env())
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    before, after = report(original), report(run)
    assert after["step_ms"] == before["step_ms"] and after["phases"] == before["phases"]
    assert after["memory"]["torch_peak_allocated"] == before["memory"]["torch_peak_allocated"] > 0
    assert after["memory"]["torch_peak_reserved"] == 0  # the column it lacked
