"""Inside the data pipeline: where producing a sample takes its time. Per sample, the
dataset's ``__getitem__`` (or an iterable dataset's next item), within it each transform of
a ``transforms`` list (torchvision's ``Compose`` and ``v2.Compose``, or any object that
holds its steps so) of the dataset's ``transform`` / ``target_transform`` (a Hugging Face
dataset's ``set_transform`` function and ``IterableDataset.map`` chain), image reads and
decodes through PIL or ``torchvision.io``, and the batch's ``collate_fn``; each as CPU time
of its thread and as wall time (a stage whose wall is far above its CPU waits: a read, a
sleep). Per batch, on the training process: taking it from a worker (unpickling, on the
training thread) and the pin-memory thread's copy.

Timed where the batches are made: the training thread (``num_workers=0``, only in the
steps the probe times; its totals go as the ``pipeline`` fact) and DataLoader workers (one
batch in ``WORKER_EVERY``), whatever their start method: torch starts each worker with
``timed_worker_loop`` as its target, which sets the timing up in that process (a spawned
one imports this module afresh) and runs torch's loop. A worker writes its totals to
``FASTMON_RUN_DIR/pipeline/<rank>-<pid>.json`` at most once a second (a side channel: never
inside a batch); the monitor reads the folder (``fastmon.pipeline``). A transform is wrapped
in place in its list (``TimedStage``, which passes every attribute on); a sample, its
order and its values are never touched.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import threading
import time

import torch._utils as torch_utils
import torch.utils.data._utils.fetch as fetch
import torch.utils.data._utils.pin_memory as pinning
import torch.utils.data._utils.worker as torch_worker
import torch.utils.data.dataloader as dataloader

from fastmon.common.pipeline_names import FOLDER, HANDOFF, PIN
from fastmon.probe.guard import Part
from fastmon.probe.location import PACKAGE_FOLDER_NAMES

WORKER_EVERY = 8  # a worker times one batch in this many: its 2nd (the 1st is cold), 10th, 18th...
WRITE_EVERY_S = 1.0
FETCHERS = (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher)
# Image reads and decodes, by module and attribute: user code calls them through the module
# (``Image.open``, ``torchvision.io.decode_image``); a name imported early is not seen.
DECODERS = (("PIL.Image", None, "open", "image open (PIL)"),
            ("PIL.ImageFile", "ImageFile", "load", "image decode (PIL)"),
            *(("torchvision.io", None, name, f"{name} (torchvision.io)")
              for name in ("read_file", "read_image", "decode_image", "decode_jpeg", "decode_png")))

_WORKER_LOOP = torch_worker._worker_loop  # torch's own, whether or not this process patched it
_timing = False  # whether the batch being fetched is timed (transforms read it)
# dataset (dataset_key) -> stage -> [samples, cpu_ns, wall_ns, where]: a training loader's
# and a validation loader's stages apart
_stats: dict[str, dict[str, list]] = {}
_table: dict[str, list] = {}  # the stages of the dataset whose batch is being timed
_batch_stats: dict[str, list] = {}  # per-batch stage -> [batches, cpu_ns, wall_ns]
_written = 0.0
_batches = 0
_started = 0.0  # a worker's start (monotonic)
_began = None  # and as the wall clock's time: workers that ran at once are told from those after
_cpu_at_start = 0.0  # a worker's CPU before its loop: a spawned one's imports are not its work
_worker_path: str | None = None  # in a DataLoader worker: where its totals go
_main_timing = None  # in the training process: whether this step is timed (the part sets it)
_where: dict = {}  # a class or function -> its file:line
_pin_depth = threading.local()  # pin_memory calls itself for each element of a batch
# Over the timed batches: nanoseconds off the CPU, and of those, runnable but waiting for a
# core (the kernel's run delay, /proc/thread-self/schedstat): a stage's wall above its CPU is
# a read or a sleep only where the run delay is not it. None: the kernel does not keep it.
_off_cpu: list | None = [0, 0]


def _add(table: dict, stage: str, where, count: int, cpu_ns: int, wall_ns: int) -> None:
    entry = table.get(stage)
    if entry is None:
        entry = table[stage] = [0, 0, 0, where]
    entry[0] += count
    entry[1] += cpu_ns
    entry[2] += wall_ns


def totals() -> dict:
    """This process's stage totals so far."""
    off = _off_cpu  # once: the training thread may set it to None meanwhile
    return {"pid": os.getpid(), "cpu_s": time.process_time() - _cpu_at_start, "began": _began,
            "wall_s": time.monotonic() - _started if _started else None,
            "datasets": {key: {name: {"samples": s, "cpu_ns": c, "wall_ns": w, "where": where}
                               for name, (s, c, w, where) in list(table.items())}  # (list: atomic, as it grows)
                         for key, table in list(_stats.items())},
            "batch_stages": {name: {"batches": b, "cpu_ns": c, "wall_ns": w}
                             for name, (b, c, w, _) in list(_batch_stats.items())},
            "off_cpu_ns": off and off[0], "run_delay_ns": off and off[1]}


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
            _add(_table, self.stage, self.where, 1, time.thread_time_ns() - cpu, time.perf_counter_ns() - wall)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return repr(self.inner)

    def __reduce__(self):  # pickled (a spawned worker, a saved dataset): the transform itself
        return (_unwrapped, (self.inner,))


def _unwrapped(inner):
    return inner


def where_defined(obj) -> str | None:
    """file:line of an object's class (a user's transform), or of a function: the file's name
    for the user's code, its path inside site-packages for a library's (timm's and
    torchvision's transforms.py are two files)."""
    target = obj if inspect.isfunction(obj) else type(obj)
    if target not in _where:
        try:
            path, line = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
            _where[target] = f"{_shown_path(path)}:{line}" if path else None
        except (OSError, TypeError):
            _where[target] = None
    return _where[target]


def _shown_path(path: str) -> str:
    parts = path.replace(os.sep, "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in PACKAGE_FOLDER_NAMES:
            return "/".join(parts[i + 1:])
    return parts[-1]


def stage_name(obj) -> str:
    return getattr(obj, "__name__", None) or type(obj).__name__


def wrap_transforms(dataset) -> None:
    """Wrap the steps of the dataset's transforms, once; and find where the dataset's class
    is now, not in a timed batch (it reads its source). A Hugging Face dataset's transforms
    are its ``set_transform`` / ``with_transform`` function and each function of its
    ``IterableDataset.map`` chain."""
    where_defined(dataset)
    for attribute in ("transform", "target_transform", "transforms"):
        _wrap_steps(getattr(dataset, attribute, None))
    if not type(dataset).__module__.startswith("datasets."):
        return
    format_kwargs = getattr(dataset, "_format_kwargs", None)
    if isinstance(format_kwargs, dict) and callable(format_kwargs.get("transform")):
        if not _wrap_steps(format_kwargs["transform"]):
            format_kwargs["transform"] = _timed_stage(format_kwargs["transform"])
    node, seen = getattr(dataset, "_ex_iterable", None), 0
    while node is not None and seen < 100:  # the chain of examples iterables, each over the next
        if callable(getattr(node, "function", None)):
            node.function = _timed_stage(node.function)
        node, seen = getattr(node, "ex_iterable", None), seen + 1


def dataset_key(dataset) -> str:
    """What tells one loader's data pipeline from another's, the same in the training
    process and in any worker (a spawned one unpickles the transforms untimed): the
    dataset's class and its transforms' names (timm's training and validation datasets are
    one class, their transforms differ). A dataset whose attributes raise: its class alone."""
    names = [type(dataset).__name__]
    try:
        for attribute in ("transform", "target_transform", "transforms"):
            pipeline = getattr(dataset, attribute, None)
            steps = getattr(pipeline, "transforms", None)
            if isinstance(steps, list):
                names += [_inner_name(step) for step in steps]
            elif callable(pipeline):
                names.append(_inner_name(pipeline))
        if type(dataset).__module__.startswith("datasets."):
            format_kwargs = getattr(dataset, "_format_kwargs", None)
            if isinstance(format_kwargs, dict) and callable(format_kwargs.get("transform")):
                names.append(_inner_name(format_kwargs["transform"]))
    except Exception:
        return names[0]
    return "/".join(names)


def _inner_name(step) -> str:
    return step.stage if isinstance(step, TimedStage) else stage_name(step)


def _wrap_steps(pipeline) -> bool:
    """Wrap each step of a Compose-like ``pipeline`` in place; whether it had steps."""
    steps = getattr(pipeline, "transforms", None)
    if not isinstance(steps, list):
        return False
    for i, step in enumerate(steps):
        if callable(step):
            steps[i] = _timed_stage(step)
    return True


def _timed_stage(step):
    return step if isinstance(step, TimedStage) else TimedStage(step, stage_name(step), where_defined(step))


def _timed_call(original, stage: str):
    """A read or decode, timed inside a timed batch only."""
    def timed(*args, **kwargs):
        if not _timing:
            return original(*args, **kwargs)
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return original(*args, **kwargs)
        finally:
            _add(_table, stage, None, 1, time.thread_time_ns() - cpu, time.perf_counter_ns() - wall)

    timed.__wrapped__ = original
    timed._fastmon = True
    return timed


def _fetch_for(original, iterable: bool):
    def timed_fetch(fetcher, index):
        global _batches
        if _worker_path is not None:
            _batches += 1
            if (_batches - 2) % WORKER_EVERY:
                return original(fetcher, index)
        elif _main_timing is None or not _main_timing():
            return original(fetcher, index)
        return _timed(fetcher, index, original, iterable)

    timed_fetch.__wrapped__ = original
    timed_fetch._fastmon = True
    return timed_fetch


class _Patches:
    """Attributes replaced, to put back (``uninstall``); a target patched once."""

    def __init__(self) -> None:
        self.replaced: list[tuple[object, str, object]] = []

    def set(self, owner, name: str, make) -> None:
        original = getattr(owner, name, None)
        if original is None or getattr(original, "_fastmon", False):
            return
        setattr(owner, name, make(original))
        self.replaced.append((owner, name, original))

    def undo(self) -> None:
        while self.replaced:
            owner, name, original = self.replaced.pop()
            setattr(owner, name, original)


_patches = _Patches()


def _patch_fetchers() -> None:
    for cls in FETCHERS:
        _patches.set(cls, "fetch", lambda original, cls=cls: _fetch_for(original, cls is fetch._IterableDatasetFetcher))


def _patch_decoders() -> None:
    """Reads and decodes through the image libraries the process has imported (a dataset
    imports them before its DataLoader is built). Pillow imports ``PIL.ImageFile`` at its
    first ``Image.open``, after the DataLoader is built: imported here where ``PIL.Image`` is."""
    if "PIL.Image" in sys.modules and "PIL.ImageFile" not in sys.modules:
        try:
            importlib.import_module("PIL.ImageFile")
        except Exception:
            pass  # a Pillow that has no ImageFile: its opens are timed, its decodes not
    for module_name, class_name, name, stage in DECODERS:
        owner = sys.modules.get(module_name)
        if owner is not None and class_name:
            owner = getattr(owner, class_name, None)
        if owner is not None:
            _patches.set(owner, name, lambda original, stage=stage: _timed_call(original, stage))


def timed_worker_loop(*args, **kwargs):
    """torch's DataLoader worker loop, as the worker process's target (fork, spawn and
    forkserver alike): its stage timing set up first. A spawned worker unpickles this
    function by name, importing this module afresh."""
    try:
        _as_worker(args[1] if len(args) > 1 else kwargs.get("dataset"))
    except Exception:
        pass  # a worker that cannot time its batches makes them untimed
    return _WORKER_LOOP(*args, **kwargs)


timed_worker_loop._fastmon = True


def _as_worker(dataset) -> None:
    """This process is a DataLoader worker: its own totals (a forked one inherited the
    trainer's), written to its file; an error it sends the trainer reads as without fastmon."""
    global _stats, _batch_stats, _batches, _written, _started, _began, _cpu_at_start, _worker_path, _off_cpu
    global _main_timing
    _main_timing = None  # a forked worker's copy of the trainer's clock says nothing of its batches
    _stats, _batch_stats, _batches, _written, _off_cpu = {}, {}, 0, 0.0, [0, 0]
    _started, _began, _cpu_at_start = time.monotonic(), time.time(), time.process_time()
    run_dir = os.environ.get("FASTMON_RUN_DIR")
    if not run_dir:
        return
    folder = os.path.join(run_dir, FOLDER)
    os.makedirs(folder, exist_ok=True)
    _patch_fetchers()  # a spawned worker: torch imported afresh, unpatched
    if dataset is not None:
        wrap_transforms(dataset)
    _patch_decoders()
    _patches.set(torch_utils.ExceptionWrapper, "__init__", _errors_without_own_frames)
    _worker_path = os.path.join(folder, f"{os.environ.get('RANK', '0')}-{os.getpid()}.json")


def _errors_without_own_frames(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if isinstance(getattr(self, "exc_msg", None), str):
            self.exc_msg = without_own_frames(self.exc_msg)

    __init__._fastmon = True
    return __init__


def _handoff_for(original):
    """Taking a batch from the workers' queue on the training thread: its CPU time is the
    unpickling (tensors rebuilt from shared memory), not the wait."""
    def _try_get_data(iterator, *args, **kwargs):
        if _main_timing is None or not _main_timing() or iterator._pin_memory:
            return original(iterator, *args, **kwargs)
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        got = original(iterator, *args, **kwargs)
        if got[0]:
            _add(_batch_stats, HANDOFF, None, 1, time.thread_time_ns() - cpu, time.perf_counter_ns() - wall)
        return got

    _try_get_data._fastmon = True
    return _try_get_data


def _pin_for(original):
    """The pin-memory thread's copy of a batch (it calls pin_memory again for each element:
    the outer call is the batch)."""
    def pin_memory(data, *args, **kwargs):
        if getattr(_pin_depth, "n", 0):
            return original(data, *args, **kwargs)
        _pin_depth.n = 1
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        try:
            return original(data, *args, **kwargs)
        finally:
            _pin_depth.n = 0
            _add(_batch_stats, PIN, None, 1, time.thread_time_ns() - cpu, time.perf_counter_ns() - wall)

    pin_memory._fastmon = True
    return pin_memory


class PipelinePart(Part):
    name = "pipeline"

    def install(self) -> None:
        global _main_timing
        clock, part = self.probe.clock, self
        _main_timing = lambda: clock.timing and part.on  # noqa: E731
        _patch_fetchers()
        _patches.set(torch_worker, "_worker_loop", lambda original: timed_worker_loop)
        _patches.set(dataloader._MultiProcessingDataLoaderIter, "_try_get_data", _handoff_for)
        _patches.set(pinning, "pin_memory", _pin_for)

    def watch(self, dataset) -> None:
        """A DataLoader is built: its dataset's transforms and the image libraries imported by
        now are timed from here on."""
        wrap_transforms(dataset)
        _patch_decoders()

    def uninstall(self) -> None:
        global _main_timing
        _main_timing = None
        _patches.undo()


def _run_delay() -> int | None:
    """This thread's time spent runnable, waiting for a core, so far (ns); None where the
    kernel does not say (no schedstat, or one that reads zeros: kept off)."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as file:
            on_cpu, delay, _ = file.read().split()
    except (OSError, ValueError):
        return None
    return int(delay) if int(on_cpu) else None


def _timed(fetcher, index, original, iterable: bool):
    """One batch, each stage timed: the items (all of ``__getitem__``), then the collate."""
    global _timing, _off_cpu, _table
    _table = _stats.setdefault(dataset_key(fetcher.dataset), {})
    _timing = True
    delay = _run_delay() if _off_cpu else None
    batch_cpu, batch_wall = time.thread_time_ns(), time.perf_counter_ns()
    try:
        if iterable or not fetcher.auto_collation or getattr(fetcher.dataset, "__getitems__", None):
            cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
            batch = original(fetcher, index)
            samples = len(index) if fetcher.auto_collation else 1
            _add(_table, "items and collate", None, samples, time.thread_time_ns() - cpu,
                 time.perf_counter_ns() - wall)
            return batch
        cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
        data = [fetcher.dataset[i] for i in index]
        cpu2, wall2 = time.thread_time_ns(), time.perf_counter_ns()
        _add(_table, "__getitem__", where_defined(fetcher.dataset), len(data), cpu2 - cpu, wall2 - wall)
        batch = fetcher.collate_fn(data)
        _add(_table, "collate_fn", None, len(data), time.thread_time_ns() - cpu2, time.perf_counter_ns() - wall2)
        return batch
    finally:
        _timing = False
        if delay is not None and (after := _run_delay()) is not None:
            _off_cpu[0] += max(0, time.perf_counter_ns() - batch_wall - (time.thread_time_ns() - batch_cpu))
            _off_cpu[1] += after - delay
        else:
            _off_cpu = None
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
