"""The run record: one SQLite file (WAL) per run, written by a background thread and
committed at least every ``FLUSH_EVERY`` seconds, so a killed run loses at most that."""

from __future__ import annotations

import array
import json
import os
import queue
import sqlite3
import tempfile
import threading
from datetime import datetime
from pathlib import Path

from fastmon.common.phases import PHASES, STEP_FIELDS, StepRow
from fastmon.common.verdicts import STATUSES, advice_status

FLUSH_EVERY = 0.5
RECORD_FILE = "run.sqlite"
# The record's layout, in SQLite's user_version. 1: the tables of SCHEMA, read by column
# name; records made before it was set read 0 and are read as 1 (their columns by name too).
# A new column is read as NULL from an older record; a change older code would misread
# raises the version, and older code refuses the record with its version named.
RECORD_VERSION = 1
REQUIRED_STEP_COLUMNS = ("rank", "step", "t_end", "wall", "timed")
DEFAULT_RUNS_DIR = "fastmon-runs"

DEVICE_FIELDS = ("rank", "step", "device_step", "device_forward", "device_backward", "device_optimizer",
                 "device_idle_before_forward")

_REAL_FIELDS = {"t_end", "wall", *PHASES, "comm_overlapped", "comm_in_forward"}

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS steps({", ".join(f"{f} {'REAL' if f in _REAL_FIELDS else 'INTEGER'}" for f in STEP_FIELDS)},
                                 PRIMARY KEY(rank, step));
CREATE INDEX IF NOT EXISTS steps_timed ON steps(rank, step) WHERE timed=1;
CREATE TABLE IF NOT EXISTS device_steps({", ".join(DEVICE_FIELDS)});
CREATE TABLE IF NOT EXISTS samples(t REAL, source TEXT, data TEXT);
CREATE TABLE IF NOT EXISTS facts(t REAL, rank INTEGER, key TEXT, value TEXT);
CREATE TABLE IF NOT EXISTS events(t REAL, rank INTEGER, step INTEGER, kind TEXT, data TEXT);
CREATE TABLE IF NOT EXISTS advice(id TEXT PRIMARY KEY, t REAL, data TEXT);
CREATE TABLE IF NOT EXISTS applied(exp INTEGER PRIMARY KEY, t REAL, data TEXT);
CREATE TABLE IF NOT EXISTS log(t REAL, stream TEXT, text TEXT);
"""
# Written at the run's end (write_column_index); any change to the steps after it drops it
COLUMN_INDEX = """
CREATE TABLE IF NOT EXISTS step_columns(rank INTEGER PRIMARY KEY, first INTEGER, last INTEGER, walls BLOB,
                                        samples TEXT);
CREATE TRIGGER IF NOT EXISTS step_columns_insert AFTER INSERT ON steps BEGIN DELETE FROM step_columns; END;
CREATE TRIGGER IF NOT EXISTS step_columns_update AFTER UPDATE ON steps BEGIN DELETE FROM step_columns; END;
CREATE TRIGGER IF NOT EXISTS step_columns_delete AFTER DELETE ON steps BEGIN DELETE FROM step_columns; END;
"""

_INSERT = {
    "steps": f"INSERT OR REPLACE INTO steps VALUES ({', '.join('?' * len(STEP_FIELDS))})",
    "device_steps": f"INSERT INTO device_steps VALUES ({', '.join('?' * len(DEVICE_FIELDS))})",
    "samples": "INSERT INTO samples VALUES (?, ?, ?)",
    "facts": "INSERT INTO facts VALUES (?, ?, ?, ?)",
    "events": "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
    "advice": "INSERT OR REPLACE INTO advice VALUES (?, ?, ?)",
    "applied": "INSERT OR REPLACE INTO applied VALUES (?, ?, ?)",
    "log": "INSERT INTO log VALUES (?, ?, ?)",
    "meta": "INSERT OR REPLACE INTO meta VALUES (?, ?)",
}


NAME_KEPT = 80  # characters of the script's name in its run folder's (a file name has at most 255 bytes)


START_BYTES = 512 * 1024  # written and freed before a run starts: a record's start and its reserve


def check_can_record(runs_dir) -> None:
    """OSError where the runs folder cannot be made, or cannot take a record's start: real
    blocks, synced (a full disk refuses them). Checked before a training starts."""
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=runs_dir) as probe_file:
        probe_file.write(bytes(START_BYTES))
        probe_file.flush()
        os.fsync(probe_file.fileno())


def new_run_dir(runs_dir: str | os.PathLike, name: str) -> Path:
    """A new folder of its own, readable by its owner alone (what the script prints is in
    it), made in one step: runs started in the same second each get theirs."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    Path(runs_dir).mkdir(parents=True, exist_ok=True)
    # a name that is not UTF-8 (bytes the file system holds, as python runs them) stays readable
    readable = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    base = Path(runs_dir) / f"{stamp}-{readable.encode()[:NAME_KEPT].decode(errors='ignore')}"
    path, n = base, 1
    while True:
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")
    path.chmod(0o700)  # whatever the umask
    return path


def resolve_run(spec: str, runs_dir: str | os.PathLike = DEFAULT_RUNS_DIR) -> Path:
    """A run folder from a path, a run file, or ``latest``."""
    if spec == "latest":
        root = Path(runs_dir)
        runs = sorted(p for p in root.glob("*") if (p / RECORD_FILE).exists()) if root.is_dir() else []
        if not runs:
            raise FileNotFoundError(f"no runs under {root}/")
        return max(runs, key=lambda p: (p / RECORD_FILE).stat().st_mtime)
    path = Path(spec)
    if path.is_file() and path.name == RECORD_FILE:
        path = path.parent
    if not path.exists():
        raise FileNotFoundError(f"{spec} does not exist (give a run folder, as under {runs_dir}/, or latest)")
    if not (path / RECORD_FILE).exists():
        raise FileNotFoundError(f"{spec} is not a fastmon run folder (no {RECORD_FILE})")
    return path


RESERVE_BYTES = 256 * 1024  # kept aside in the run folder: the run's ending is written on a full disk too
KEPT_ON_FAILURE = ("meta", "facts", "events", "advice", "applied")  # few, and what the report needs
RETRY_ROWS = 10_000  # of those, at most this many held for the next try
LOG_PENDING = 8 * 2**20  # bytes of the script's output waiting to go into the log table, at most


class Recorder:
    """Writes rows on its own thread, in batches every ``FLUSH_EVERY`` seconds; ``put``
    never blocks the caller. A batch that cannot be written (a full disk) is dropped, its
    steps counted in ``dropped_steps``, but for the few rows the report needs, tried again;
    ``on_error`` hears of the first failure and of the recovery (None)."""

    def __init__(self, run_dir: Path, on_error=None) -> None:
        self.path = Path(run_dir) / RECORD_FILE
        self._reserve = Path(run_dir) / ".reserve"
        self.on_error = on_error or (lambda message: None)
        self.dropped_steps = 0
        self.error: str | None = None  # the write error in force
        self.gone = False  # the run folder was deleted: nothing more is written
        self._log_pending = 0
        self.log_dropped_bytes = 0
        self._retry: dict[str, list] = {}
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastmon-recorder", daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def put(self, table: str, row: tuple) -> None:
        self._queue.put((table, row))

    def put_log(self, row: tuple) -> None:
        """A row of the script's output (time, stream, text); past LOG_PENDING bytes
        waiting, dropped and counted: output.log holds all of it."""
        size = len(row[2])
        if self._log_pending + size > LOG_PENDING or self.gone:
            self.log_dropped_bytes += size
            return
        self._log_pending += size
        self._queue.put(("log", row))

    def meta(self, key: str, value) -> None:
        self.put("meta", (key, json.dumps(value, default=str)))

    def _open(self) -> sqlite3.Connection:
        os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))  # SQLite gives its -wal and -shm this mode
        db = sqlite3.connect(self.path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
        db.execute(f"PRAGMA user_version = {RECORD_VERSION}")
        db.commit()
        return db

    def _run(self) -> None:
        try:
            db = self._open()
        except (sqlite3.Error, OSError) as exc:  # a disk full since the check before the start
            self.error = str(exc)
            self._ready.set()
            self.on_error(f"cannot write {self.path} ({exc}): nothing is recorded; the training goes on")
            while not self._closed.wait(FLUSH_EVERY):
                self._discard()
            self._discard()
            return
        try:
            with open(self._reserve, "wb") as reserve:
                reserve.write(bytes(RESERVE_BYTES))
        except OSError:
            pass
        self._ready.set()
        while True:
            closing = self._closed.wait(FLUSH_EVERY)
            self._flush(db)
            if closing:
                if self.error is not None and self._reserve.exists():
                    self._reserve.unlink()  # the space kept for the run's ending
                    self._flush(db)
                break
        if self.error is None and not self.gone:
            try:
                write_column_index(db)
            except (sqlite3.Error, OSError):
                pass  # the readers scan the rows, as for a record of a run killed before its end
        try:
            self._reserve.unlink(missing_ok=True)
            db.close()
        except (sqlite3.Error, OSError):
            pass

    def _discard(self) -> None:
        """What was put, counted and let go: the record cannot be written."""
        while True:
            try:
                table, row = self._queue.get_nowait()
            except queue.Empty:
                return
            self.dropped_steps += table == "steps"

    def _flush(self, db) -> None:
        by_table = self._retry
        self._retry = {}
        while True:
            try:
                table, row = self._queue.get_nowait()
            except queue.Empty:
                break
            by_table.setdefault(table, []).append(row)
        self._log_pending -= sum(len(row[2]) for row in by_table.get("log", ()))
        if self.gone or not self.path.exists():  # SQLite would go on writing into the deleted file
            self.dropped_steps += len(by_table.get("steps", ()))
            if not self.gone:
                self.gone = True
                self.on_error(f"the run folder {self.path.parent} was deleted: nothing more is recorded; "
                              "the training goes on")
            return
        try:
            for table, rows in by_table.items():
                db.executemany(_INSERT[table], rows)
            db.commit()
        except (sqlite3.Error, OSError) as exc:  # disk full, an I/O error, a read-only disk
            try:
                db.rollback()
            except sqlite3.Error:
                pass
            self.dropped_steps += len(by_table.get("steps", ()))
            self._retry = {t: rows[-RETRY_ROWS:] for t, rows in by_table.items() if t in KEPT_ON_FAILURE}
            if self.error is None:
                self.error = str(exc)
                self.on_error(f"cannot write {self.path} ({exc}): steps are counted as dropped until it can "
                              "again; the training goes on")
            return
        if self.error is not None and by_table.get("steps"):  # steps written again, not just an empty batch
            # what the record could not hold, and why, kept in it now that it can be written
            # (the report names the full disk, not a channel behind)
            failed, self.error = self.error, None
            try:
                db.execute(_INSERT["meta"], ("record_error", json.dumps(failed)))
                db.commit()
            except (sqlite3.Error, OSError):
                pass  # the next write says so, as the first failure did
            self.on_error(None)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=10)


class DamagedRecord(sqlite3.DatabaseError):
    """A value in a run file that fastmon never writes so (text that is not JSON, a step
    without its wall time): read as a damaged record, exit code 65, everywhere."""


class NewerRecord(sqlite3.DatabaseError):
    """A run file of a layout newer than this fastmon reads: exit code 65, saying so."""


def _json(text, where: str):
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise DamagedRecord(f"a damaged value in {where} ({exc})") from None


MAX_STEP_S = 86400.0  # a step's wall time, at most: a day
MAX_TIME = 1e11  # a time of day in seconds since 1970, at most (the year 5138)
_PHASE_AT = [STEP_FIELDS.index(p) for p in (*PHASES, "comm_overlapped", "comm_in_forward")]
_COUNTS_AT = [STEP_FIELDS.index(f) for f in ("samples", "tokens", "tokens_nonpad")]
# The same checks as _checked's, in SQL: the rows of a rank that fail one, for a column read
STEP_RANGE_FAILS = ("typeof(step) != 'integer' OR typeof(wall) NOT IN ('real', 'integer') OR NOT (wall > 0) "
                    f"OR wall > {MAX_STEP_S} OR typeof(t_end) NOT IN ('real', 'integer') OR abs(t_end) > {MAX_TIME} "
                    "OR (samples IS NOT NULL AND (typeof(samples) != 'integer' OR samples < 0))")


# A rank's rows whose samples differ from the usual count (the parameter), or whose step
# number or end time fails a check: STEP_RANGE_FAILS but for the wall, checked in Python
ODD_OR_DAMAGED = ("IFNULL(samples, 0) != ? OR typeof(step) != 'integer' OR typeof(t_end) NOT IN ('real', 'integer') "
                  f"OR abs(t_end) > {MAX_TIME}")
_SAMPLES_AT = STEP_FIELDS.index("samples")


def _walls_fit(walls: list) -> bool:
    """Every wall a number above 0 and at most a day (a text or NULL one fails to compare)."""
    try:
        return not walls or (min(walls) > 0 and max(walls) <= MAX_STEP_S)
    except TypeError:
        return False


def row_problem(row: tuple) -> str | None:
    """What is wrong with a step row's values, or None: written by fastmon, a step has a
    whole step number, a wall time above 0 and at most a day, a finite end time, a whole
    count of samples not below 0, and phase times of at most a day."""
    rank, step, t_end, wall = row[:4]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row[:4]) or not isinstance(step, int):
        return f"rank {rank!r}, step {step!r}: not numbers ({row[:4]})"
    if not 0 < wall <= MAX_STEP_S:
        return f"rank {rank}, step {step}: a wall time of {wall:g} s (not above 0 and at most a day)"
    if not abs(t_end) <= MAX_TIME:
        return f"rank {rank}, step {step}: an end time of {t_end:g}"
    for i in _COUNTS_AT:
        count = row[i] if len(row) > i else None
        if count is not None and (not isinstance(count, int) or count < 0):
            return f"rank {rank}, step {step}: {count!r} {STEP_FIELDS[i]} (not a whole number from 0)"
    for i in _PHASE_AT:
        value = row[i] if len(row) > i else None
        if value is not None and (not isinstance(value, (int, float)) or not abs(value) <= MAX_STEP_S):
            return f"rank {rank}, step {step}: {STEP_FIELDS[i]} of {value!r} s"
    return None


def scan_columns(db, rank: int, fields: str) -> tuple[range | list[int], list[float], tuple[int, list]] | None:
    """A rank's steps, walls and samples read from its rows, each value checked; None where
    the rank has no step."""
    ends = [db.execute(f"SELECT step FROM steps WHERE rank=? ORDER BY step {way} LIMIT 1", (rank,)).fetchone()
            for way in ("ASC", "DESC")]
    if ends[0] is None:
        return None
    (first,), (last,) = ends
    walls = [w for (w,) in db.execute("SELECT wall FROM steps WHERE rank=? ORDER BY step", (rank,))]
    steps = range(first, last + 1) if isinstance(first, int) and isinstance(last, int) \
        and len(walls) == last - first + 1 else \
        [s for (s,) in db.execute("SELECT step FROM steps WHERE rank=? ORDER BY step", (rank,))]
    # the middle step's count as the usual one: a fixed batch then leaves only the odd steps to read
    middle = db.execute("SELECT IFNULL(samples, 0) FROM steps WHERE rank=? AND step>=? ORDER BY step LIMIT 1",
                        (rank, steps[len(steps) // 2])).fetchone()[0]
    # What steps() refuses row by row, at the cost of the scans paid anyway: the walls
    # checked in Python, the other columns with the steps whose samples differ
    odd = db.execute(f"SELECT {fields} FROM steps WHERE rank=? AND ({ODD_OR_DAMAGED}) ORDER BY step",
                     (rank, middle)).fetchall()
    if not _walls_fit(walls) or any(map(row_problem, odd)) or not (isinstance(middle, int) and middle >= 0):
        bad = db.execute(f"SELECT {fields} FROM steps WHERE rank=? AND ({STEP_RANGE_FAILS}) LIMIT 1",
                         (rank,)).fetchone()
        if bad is not None:
            _checked([bad])
            raise DamagedRecord(f"a damaged step row in steps (rank {rank}, step {bad[1]!r})")
    return steps, walls, (middle, [(row[1], row[_SAMPLES_AT] or 0) for row in odd if (row[_SAMPLES_AT] or 0) != middle])


def write_column_index(db) -> None:
    """At the run's end: each rank's walls packed and its samples' odd steps, read back in
    one row instead of a scan of every step (a 1M-step record's report: the wall column
    alone took 0.35 s). Any later change to the steps (an UPDATE by hand, a damage) drops
    the index by trigger: the readers scan and check the rows again."""
    db.executescript(COLUMN_INDEX)
    db.execute("DELETE FROM step_columns")
    existing = {row[1] for row in db.execute("PRAGMA table_info(steps)")}
    fields = ", ".join(f if f in existing else "NULL" for f in STEP_FIELDS)  # an older record's steps
    rank = db.execute("SELECT MIN(rank) FROM steps").fetchone()[0]
    while rank is not None:
        try:
            columns = scan_columns(db, rank, fields)
        except DamagedRecord:
            columns = None  # the readers find it as they would without the index
        if columns is not None and isinstance(columns[0], range):
            steps, walls, (middle, other) = columns
            db.execute("INSERT INTO step_columns VALUES (?, ?, ?, ?, ?)",
                       (rank, steps.start, steps.stop - 1, array.array("d", walls).tobytes(),
                        json.dumps([middle, other])))
        rank = db.execute("SELECT MIN(rank) FROM steps WHERE rank > ?", (rank,)).fetchone()[0]
    db.commit()


def _checked(rows: list[tuple]) -> list[StepRow]:
    for row in rows:
        problem = row_problem(row)
        if problem:
            raise DamagedRecord(f"a damaged step row in steps ({problem})")
    return [StepRow._make(row) for row in rows]


class RunRecord:
    """Read access to a run folder. Every value is checked as it is read: a damaged one
    raises ``DamagedRecord``, never a traceback further on."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.dir = Path(run_dir)
        # a replay reads steps as the screen scrolls, from the thread that draws it
        self.db = sqlite3.connect(f"file:{self.dir / RECORD_FILE}?mode=ro", uri=True, check_same_thread=False)
        try:
            self.version = self.db.execute("PRAGMA user_version").fetchone()[0]
            if self.version > RECORD_VERSION:
                raise NewerRecord(f"its layout is version {self.version}, newer than this fastmon reads "
                                  f"({RECORD_VERSION}): read it with the fastmon that recorded it, or a newer one")
            self._steps = ", ".join(self._columns("steps", STEP_FIELDS, REQUIRED_STEP_COLUMNS))
            self._device = ", ".join(self._columns("device_steps", DEVICE_FIELDS, ("rank", "step")))
        except sqlite3.DatabaseError:
            self.db.close()
            raise

    def _columns(self, table: str, fields, required) -> list[str]:
        """``fields`` as a SELECT list: by name, a column the record lacks as NULL."""
        present = {name for _, name, *_ in self.db.execute(f"PRAGMA table_info({table})")}
        missing = [f for f in required if f not in present]
        if missing:
            raise DamagedRecord(f"its {table} table lacks {', '.join(missing)}")
        return [f if f in present else f"NULL AS {f}" for f in fields]

    def close(self) -> None:
        self.db.close()

    def meta(self) -> dict:
        return {k: _json(v, f"meta {k!r}") for k, v in self.db.execute("SELECT key, value FROM meta")}

    def steps(self, rank: int | None = None) -> list[StepRow]:
        if rank is None:
            rows = self.db.execute(f"SELECT {self._steps} FROM steps ORDER BY rank, step").fetchall()
        else:
            rows = self.db.execute(f"SELECT {self._steps} FROM steps WHERE rank=? ORDER BY step", (rank,)).fetchall()
        return _checked(rows)

    def steps_upto(self, rank: int, step: int, count: int) -> list[StepRow]:
        """The last ``count`` steps of ``rank`` up to ``step``, in step order."""
        rows = self.db.execute(f"SELECT {self._steps} FROM steps WHERE rank=? AND step<=? ORDER BY step DESC LIMIT ?",
                               (rank, step, count)).fetchall()
        return _checked(rows[::-1])

    def iter_steps(self):
        """Every step, by rank and step, one at a time: a trace of any length in bounded memory."""
        for row in self.db.execute(f"SELECT {self._steps} FROM steps ORDER BY rank, step"):
            yield from _checked([row])

    def step_columns(self, rank: int) -> tuple[range | list[int], list[float], tuple[int, list], list[StepRow]]:
        """One rank's steps and walls in step order, its samples (the usual count and the
        (step, count) pairs that differ) and its timed rows: a column at a time, so a million
        steps need no million row tuples (``StepTable``). From the column index the recorder
        wrote at the run's end where it stands (``COLUMN_INDEX``), else by scanning the rows."""
        db = self.db
        try:
            indexed = db.execute("SELECT first, last, walls, samples FROM step_columns WHERE rank=?",
                                 (rank,)).fetchone()
        except sqlite3.OperationalError:  # a record from before the index, or of a run killed before its end
            indexed = None
        if indexed is not None:
            first, last, blob, samples = indexed
            walls = array.array("d")
            walls.frombytes(blob)
            middle, other = _json(samples, "the column index")
            steps = range(first, last + 1)
            if len(walls) != len(steps):
                raise DamagedRecord(f"a damaged column index (rank {rank}: {len(walls)} walls, steps {first}-{last})")
            columns = steps, walls.tolist(), (middle, [tuple(pair) for pair in other])
        else:
            columns = scan_columns(db, rank, self._steps)
            if columns is None:
                return [], [], (0, []), []
        timed = db.execute(f"SELECT {self._steps} FROM steps WHERE rank=? AND timed=1 ORDER BY step",
                           (rank,)).fetchall()
        return (*columns, _checked(timed))

    def check_steps(self) -> None:
        """Raise DamagedRecord naming the first step row whose values fastmon never writes."""
        bad = self.db.execute(f"SELECT {self._steps} FROM steps WHERE {STEP_RANGE_FAILS} LIMIT 1").fetchone()
        if bad is not None:
            _checked([bad])
            raise DamagedRecord(f"a damaged step row in steps (rank {bad[0]!r}, step {bad[1]!r})")

    def step_span(self, rank: int, first: int, last: int) -> tuple[float, float] | None:
        """From the start of step ``first`` to the end of step ``last``."""
        start = self.db.execute("SELECT t_end - wall FROM steps WHERE rank=? AND step=?", (rank, first)).fetchone()
        end = self.db.execute("SELECT t_end FROM steps WHERE rank=? AND step=?", (rank, last)).fetchone()
        return (start[0], end[0]) if start and end else None

    def ranks(self) -> list[int]:
        """Each rank with steps, by the primary key's order: one index probe a rank, not a scan."""
        out, row = [], self.db.execute("SELECT MIN(rank) FROM steps").fetchone()
        while row and row[0] is not None:
            out.append(row[0])
            row = self.db.execute("SELECT MIN(rank) FROM steps WHERE rank > ?", (row[0],)).fetchone()
        return out

    def device_steps(self) -> list[tuple]:
        return self.db.execute(f"SELECT {self._device} FROM device_steps ORDER BY rank, step").fetchall()

    def device_steps_with_start(self):
        """Each device step's row with its host step's start, where that step was recorded."""
        columns = ", ".join(f"d.{name}" for name in DEVICE_FIELDS)
        for *row, start in self.db.execute(f"SELECT {columns}, s.t_end - s.wall FROM device_steps d "
                                           "JOIN steps s ON s.rank = d.rank AND s.step = d.step "
                                           "ORDER BY d.rank, d.step"):
            yield tuple(row), start

    def fact_history(self) -> list[tuple[float, int, str, object]]:
        """Every value each fact took, oldest first: (time, rank, key, value)."""
        return [(t, rank, key, _json(value, f"fact {key!r}"))
                for t, rank, key, value in self.db.execute("SELECT t, rank, key, value FROM facts ORDER BY t")]

    def facts(self) -> dict:
        """The latest value of every fact (rank 0's where ranks differ)."""
        out: dict = {}
        for rank, key, value in self.db.execute("SELECT rank, key, value FROM facts ORDER BY rank DESC, t"):
            out[key] = _json(value, f"fact {key!r}")
        return out

    def events(self) -> list[dict]:
        return [dict(_json(data, f"event {kind!r}"), t=t, rank=rank, step=step, kind=kind)
                for t, rank, step, kind, data in self.db.execute("SELECT t, rank, step, kind, data FROM events "
                                                                 "ORDER BY t")]

    def samples(self, source: str | None = None) -> list[tuple[float, str, dict]]:
        query = "SELECT t, source, data FROM samples" + (" WHERE source=?" if source else "") + " ORDER BY t"
        return [(t, s, _json(d, f"a {s} sample")) for t, s, d in self.db.execute(query, (source,) if source else ())]

    def advice(self) -> list[dict]:
        out = [_json(d, "advice") for (d,) in self.db.execute("SELECT data FROM advice ORDER BY t")]
        for advice in out:  # records before 2026-12-05 kept the verdict's display text as the status
            if advice.get("status") not in STATUSES and advice.get("result"):
                advice["status"] = advice_status(advice["result"])
        return out

    def applied(self) -> list[dict]:
        return [_json(d, "applied changes") for (d,) in self.db.execute("SELECT data FROM applied ORDER BY exp")]

    def log(self) -> list[tuple[float, str, str]]:
        return self.db.execute("SELECT t, stream, text FROM log ORDER BY rowid").fetchall()
