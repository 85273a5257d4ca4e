"""Inside the data pipeline: where producing a sample takes its time. Per sample, the
dataset's ``__getitem__`` (or an iterable dataset's next item), within it each transform of
a ``transforms`` list (torchvision's ``Compose`` and ``v2.Compose``, or any object that
holds its steps so) of the dataset's ``transform`` / ``target_transform``, and the batch's
``collate_fn``; each as CPU time of its thread and as wall time (a stage whose wall is far
above its CPU waits: a read, a sleep).

Timed in the processes that make the batches: the training thread (``num_workers=0``,
only in the steps the probe times; its totals go as the ``pipeline`` fact) and forked
DataLoader workers (one batch in ``WORKER_EVERY``; the probe is otherwise off there). A
worker has no channel: it writes its totals to ``FASTMON_RUN_DIR/pipeline/<rank>-<pid>.json``
at most once a second, and the monitor reads the folder (``fastmon.pipeline``). Workers started with
spawn or forkserver do not inherit the probe and are not timed. A transform is wrapped in
place in its list (``TimedStage``, which passes every attribute on); a sample, its order
and its values are never touched.
"""

from __future__ import annotations

import inspect
import json
import os
import time

import torch._utils as torch_utils
import torch.utils.data._utils.fetch as fetch

from fastmon.probe.guard import Part

WORKER_EVERY = 8  # a worker times one batch in this many
WRITE_EVERY_S = 1.0
FOLDER = "pipeline"

_timing = False  # whether the batch being fetched is timed (transforms read it)
_stats: dict[str, list] = {}  # stage -> [samples, cpu_ns, wall_ns, where]
_written = 0.0
_batches = 0
_worker_path: str | None = None  # in a forked worker: where its totals go
_forked = False  # a forked process that has not fetched yet
_where: dict = {}  # a class or function -> its file:line


def _add(stage: str, where: str | None, samples: int, cpu_ns: int, wall_ns: int) -> None:
    entry = _stats.get(stage)
    if entry is None:
        entry = _stats[stage] = [0, 0, 0, where]
    entry[0] += samples
    entry[1] += cpu_ns
    entry[2] += wall_ns


def totals() -> dict:
    """This process's stage totals so far."""
    return {"pid": os.getpid(), "cpu_s": time.process_time(),
            "stages": {name: {"samples": s, "cpu_ns": c, "wall_ns": w, "where": where}
                       for name, (s, c, w, where) in list(_stats.items())}}  # (list: atomic, as it grows)


def _write(now: float) -> None:
    global _written
    _written = now
    tmp = f"{_worker_path}.tmp"
    with open(tmp, "w") as file:
        json.dump(totals(), file)
    os.replace(tmp, _worker_path)


class TimedStage:
    """A transform, timed when the batch is: every other attribute is the transform's."""

    __slots__ = ("inner", "stage", "where")

    def __init__(self, inner, stage: str, where: str | None) -> None:
        self.inner, self.stage, self.where = inner, stage, where

    def __call__(self, *args, **kwargs):
        if not _timing:
            return self.inner(*args, **kwargs)
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return self.inner(*args, **kwargs)
        finally:
            _add(self.stage, self.where, 1, time.thread_time_ns() - cpu, time.perf_counter_ns() - wall)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return repr(self.inner)

    def __reduce__(self):  # pickled (a spawned worker): the transform itself, untimed there
        return (_unwrapped, (self.inner,))


def _unwrapped(inner):
    return inner


def where_defined(obj) -> str | None:
    """file:line of an object's class (a user's transform), or of a function."""
    target = obj if inspect.isfunction(obj) else type(obj)
    if target not in _where:
        try:
            path, line = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
            _where[target] = f"{os.path.basename(path)}:{line}" if path else None
        except (OSError, TypeError):
            _where[target] = None
    return _where[target]


def stage_name(obj) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


class PipelinePart(Part):
    name = "pipeline"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.originals = {cls: cls.fetch for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher)}

    def install(self) -> None:
        run_dir = os.environ.get("FASTMON_RUN_DIR")
        self.folder = os.path.join(run_dir, FOLDER) if run_dir else None
        os.register_at_fork(after_in_child=self._in_child)
        clock = self.probe.clock
        for cls, original in self.originals.items():
            iterable = cls is fetch._IterableDatasetFetcher

            def timed_fetch(fetcher, index, _original=original, _iterable=iterable):
                global _batches, _forked
                if _forked:  # the first fetch of a forked process: a DataLoader worker
                    _forked = False
                    part._as_worker()
                if _worker_path is not None:
                    _batches += 1
                    if _batches % WORKER_EVERY:
                        return _original(fetcher, index)
                elif not clock.timing or not part.on:
                    return _original(fetcher, index)
                return _timed(fetcher, index, _original, _iterable)

            part = self
            timed_fetch.__wrapped__ = original
            cls.fetch = timed_fetch

    def _in_child(self) -> None:
        """A forked process: its own totals, set up at its first fetch (a DataLoader worker;
        a fork that never fetches pays nothing here)."""
        global _forked, _stats, _batches, _written
        _forked, _stats, _batches, _written = True, {}, 0, 0.0

    def _as_worker(self) -> None:
        """The first fetch of a forked process: its totals go to its file, and an error it
        sends the trainer reads as without fastmon."""
        global _worker_path
        if self.folder is None:
            return
        os.makedirs(self.folder, exist_ok=True)
        _worker_path = os.path.join(self.folder, f"{self.probe.rank}-{os.getpid()}.json")
        wrapper = torch_utils.ExceptionWrapper
        if not getattr(wrapper.__init__, "_fastmon", False):
            original = wrapper.__init__

            def __init__(self, *args, **kwargs):
                original(self, *args, **kwargs)
                if isinstance(getattr(self, "exc_msg", None), str):
                    self.exc_msg = without_own_frames(self.exc_msg)

            __init__._fastmon = True
            wrapper.__init__ = __init__

    def watch(self, dataset) -> None:
        """Wrap the steps of the dataset's transforms, once (called as a DataLoader is built),
        and find where the dataset's class is now: not in a step (it reads its source)."""
        where_defined(dataset)
        for attribute in ("transform", "target_transform", "transforms"):
            pipeline = getattr(dataset, attribute, None)
            steps = getattr(pipeline, "transforms", None)
            if isinstance(steps, list):
                for i, step in enumerate(steps):
                    if callable(step) and not isinstance(step, TimedStage):
                        steps[i] = TimedStage(step, stage_name(step), where_defined(step))

    def uninstall(self) -> None:
        for cls, original in self.originals.items():
            cls.fetch = original


def _timed(fetcher, index, original, iterable: bool):
    """One batch, each stage timed: the items (all of ``__getitem__``), then the collate."""
    global _timing
    _timing = True
    try:
        if iterable or not fetcher.auto_collation or getattr(fetcher.dataset, "__getitems__", None):
            cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
            batch = original(fetcher, index)
            samples = len(index) if fetcher.auto_collation else 1
            _add("items and collate", None, samples, time.thread_time_ns() - cpu, time.perf_counter_ns() - wall)
            return batch
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        data = [fetcher.dataset[i] for i in index]
        cpu2, wall2 = time.thread_time_ns(), time.perf_counter_ns()
        _add("__getitem__", where_defined(fetcher.dataset), len(data), cpu2 - cpu, wall2 - wall)
        batch = fetcher.collate_fn(data)
        _add("collate_fn", None, len(data), time.thread_time_ns() - cpu2, time.perf_counter_ns() - wall2)
        return batch
    finally:
        _timing = False
        now = time.monotonic()
        if _worker_path is not None and now - _written >= WRITE_EVERY_S:
            try:
                _write(now)
            except OSError:
                pass


def without_own_frames(text: str) -> str:
    """A formatted traceback without this module's frames (each "  File" line and the
    indented lines under it): a worker formats its error's traceback itself, and the
    fetch goes through this module."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith('  File "'):
            skipping = line.split('"')[1] == __file__
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out)
