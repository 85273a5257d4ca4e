"""A long run's record read column by column describes the same run as its rows do."""

from __future__ import annotations

import random
import shutil
import sqlite3

import pytest

from conftest import ROOT
from fastmon.advisor.window import BRACKETED_FROM, quantile, quantiles
from fastmon.common.phases import STEP_FIELDS
from fastmon.records import RunRecord
from fastmon.step_table import StepTable
from fastmon.summary import rates
from fastmon.tui.snapshot import ReplaySource

SAMPLES = STEP_FIELDS.index("samples")
RECORDED_RUNS = sorted((ROOT / "tests" / "data").iterdir())


@pytest.fixture(params=RECORDED_RUNS, ids=lambda p: p.name)
def uneven_run(request, tmp_path):
    """A recorded run whose batches differ now and then and whose step numbers have gaps."""
    run = tmp_path / request.param.name
    shutil.copytree(request.param, run)
    db = sqlite3.connect(run / "run.sqlite")
    db.execute("UPDATE steps SET samples = 7 WHERE step % 13 = 5")
    db.execute("UPDATE steps SET samples = NULL WHERE step % 17 = 3")
    db.execute("DELETE FROM steps WHERE step % 19 = 11 AND step > 0")
    db.commit()
    db.close()
    return run


def test_windows_of_the_columns_equal_those_of_the_rows(uneven_run):
    record = RunRecord(uneven_run)
    for rank in record.ranks():
        rows = record.steps(rank)
        columns, by_rows = StepTable.read(record, rank), StepTable.from_rows(rows)
        assert list(columns.steps) == list(by_rows.steps)
        assert [columns.samples[p] for p in range(len(rows))] == [r[SAMPLES] or 0 for r in rows]
        n = len(rows)
        step = STEP_FIELDS.index("step")
        left_out = {rows[0][step], rows[n // 2][step], rows[-1][step] + 1}
        odd = [p for p in range(n) if columns.samples[p] != columns.samples.usual][:2]  # windows that end there
        for start, stop in ((0, None), (0, n // 3), (n // 3, n), (n - 1, n), (5, 5), (0, odd[0]), tuple(odd)):
            for dropped in (frozenset(), left_out):
                window = columns.window(start, stop, dropped)
                assert window == by_rows.window(start, stop, dropped), (start, stop)
                assert window.samples == sum(r[SAMPLES] or 0 for r in rows[start:stop] if r[step] not in dropped)


def test_the_replay_s_rates_at_any_step_are_those_of_the_steps_up_to_it(uneven_run):
    replay = ReplaySource(uneven_run)
    rows = replay.record.steps(replay.ranks[0])
    for position in (1, 2, len(rows) // 2, len(rows)):
        replay.jump(position)
        upto = StepTable.from_rows(rows[:position])
        steady = upto.window(left_out=replay.left_out)
        steady = steady if steady.steps else upto.window()
        assert replay.snapshot().run == rates(steady.steps, steady.samples, steady.wall)


@pytest.mark.parametrize("values", [
    [random.Random(1).random() for _ in range(BRACKETED_FROM * 2)],
    [float(random.Random(2).randint(0, 3)) for _ in range(BRACKETED_FROM)],  # ties across the bracket
    sorted((random.Random(3).expovariate(1) for _ in range(BRACKETED_FROM + 1)), reverse=True),
    [1.0] * (BRACKETED_FROM - 1) + [1e9],
], ids=["uniform", "ties", "descending", "one-outlier"])
def test_quantiles_of_a_long_list_are_exact(values):
    qs = (0.0, 0.5, 0.9, 1.0)
    assert quantiles(values, qs) == [quantile(values, q) for q in qs]


@pytest.mark.parametrize("recorded", RECORDED_RUNS, ids=lambda p: p.name)
def test_the_column_index_reads_as_the_rows_and_any_later_change_drops_it(recorded, tmp_path):
    from fastmon.records import write_column_index

    run = tmp_path / "run"
    shutil.copytree(recorded, run)
    db = sqlite3.connect(run / "run.sqlite")
    db.execute("UPDATE steps SET samples = 7 WHERE step % 13 = 5")  # batches that differ now and then
    db.commit()
    write_column_index(db)  # as the recorder does at the run's end
    indexed = {rank: StepTable.read(RunRecord(run), rank) for rank in RunRecord(run).ranks()}
    assert db.execute("SELECT COUNT(*) FROM step_columns").fetchone()[0] == len(indexed)
    db.execute("UPDATE steps SET wall = wall WHERE step = 3")  # any change, even to the same value
    db.commit()
    assert db.execute("SELECT COUNT(*) FROM step_columns").fetchone()[0] == 0  # dropped: the rows are read again
    scanned = {rank: StepTable.read(RunRecord(run), rank) for rank in RunRecord(run).ranks()}
    for rank, table in indexed.items():
        other = scanned[rank]
        assert (list(table.steps), table.walls, table.timed) == (list(other.steps), other.walls, other.timed)
        assert [table.samples[p] for p in range(len(table))] == [other.samples[p] for p in range(len(other))]
        assert table.window() == other.window()
