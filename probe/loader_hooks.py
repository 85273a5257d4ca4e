"""DataLoader timing and the live DataLoader rebuild.

``_BaseDataLoaderIter.__next__`` is wrapped at class level, which covers single- and
multi-process iterators and the fetchers that Lightning builds on them; the time spent
blocked there is ``data_wait``. The wrapper is in while steps are timed (and for good
once an iterator delegates to a rebuilt loader); between timed steps the class has its
own ``__next__`` back: two class attribute writes per timed step, against a Python call
per batch (~1 µs on a ~3 ms step, where torch has left the interpreter's caches cold).
``DataLoader.__iter__`` is wrapped for the whole run: it tags each iterator with its
loader and, where it starts worker processes, puts the ``__next__`` wrapper in until the
iterator's first batch: workers started with ``spawn`` (macOS's and Windows' default)
return from ``iter()`` at once and import torch before they deliver, so their start-up
is ``iter()``'s time and the first ``__next__``'s wait. Each loader's fact (settings,
epochs, the last ``iter()`` time, the last start-ups) goes out from the publisher's round
when an epoch has begun, or at once when fastmon changes a setting: short epochs cost
the training thread no fact each.

A rebuild (hot-apply of num_workers / pin_memory / persistent_workers) takes the index
batches that the live iterator has not yet dispatched, takes the batches already in
flight out of the old iterator (its workers then stop, and free their cores), starts a
new DataLoader over exactly the rest and waits for its first batch, as an epoch start
does: that wait is the new setting's start-up, recorded beside the epoch starts'. The
batches taken out are served first: no sample is skipped or repeated, and the batches
keep their composition, so ``len(loader)`` and step-count schedulers stay right.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import types
import warnings
import weakref
from time import perf_counter, perf_counter_ns, thread_time_ns

import torch
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as dl

from fastmon.probe import facts
from fastmon.probe.batch_change import new_batch_sampler, regroup
from fastmon.probe.clock import SampleCount, TakenCount
from fastmon.probe.forward_hooks import batch_size_of
from fastmon.probe.guard import Part
from fastmon.probe.location import fmt, user_frame
from fastmon.common.phases import DATA_WAIT
from fastmon.common.sample_count import samples_in_first
from fastmon.common.step_events import ENTER, LEAVE, LEAVE_BATCH

STARTUPS_KEPT = 8  # enough to cover the advisor's window after a settings change or two


class LoaderState:
    def __init__(self, loader_id: str, loader: DataLoader, location: str | None) -> None:
        self.id = loader_id
        self.ref = weakref.ref(loader)
        self.location = location
        self.live: weakref.ref | None = None
        self.description = facts.describe_loader(loader)  # replaced, never changed in place
        # (epochs begun, seconds the last iter() took, the last STARTUPS_KEPT worker start-ups
        # as (step that waited, seconds in iter() and in the first __next__, the workers
        # started, 1 where a live rebuild started them, 0 at an epoch start, the batches made
        # meanwhile: in flight in the old workers and the new ones' first store))
        self.epoch: tuple[int, float | None, tuple] = (0, None, ())
        self.reported: tuple | None = None  # (description, epoch) as the last fact had them
        self.index = int(loader_id[1:])
        # "train": a training forward took its batch; "eval": iterated with autograd off, or
        # an eval forward took its batch. Only the training loader's batches are samples.
        self.role: str | None = None
        self.counter: SampleCount | None = None  # this epoch's samples, once fastmon changed its batch size in it
        self.iter_step = 0  # the step in which its latest iterator was made: its epoch's first
        # Batches the training loop fetches ahead of those it trains on: None until the end
        # of an epoch's first timed step has shown it (LoaderPart.before_step_end), and
        # the count delivered then, until the next step confirms it
        self.fetch_ahead: int | None = None
        self.ahead_check: int | None = None
        self.wait_ns = self.wait_cpu_ns = 0  # timed batches' wait, and the training thread's CPU in it

    def add_startup(self, startup: tuple) -> None:
        self.epoch = (*self.epoch[:2], (*self.epoch[2], startup)[-STARTUPS_KEPT:])


class IterTags:
    """What the probe keeps on a DataLoader iterator, in one attribute (``TAGS``), set and
    read as an attribute: writing ``it.__dict__`` makes CPython build the instance's dict,
    after which no method call on the iterator is specialized any more, at every batch of
    the epoch, timed or not (``benchmarks/probe_instructions.py``)."""

    __slots__ = ("state", "iter_seconds", "pending", "source", "ended")

    def __init__(self, state: LoaderState) -> None:
        self.state = state
        self.iter_seconds: float | None = None  # iter()'s time, while its first batch (from new workers) is awaited
        self.pending: tuple | None = None  # (state, params, ack): a rebuild due at the next batch
        self.source: Rebuilt | None = None  # what serves the batches after a rebuild
        self.ended = False  # the __next__ wrapper saw its StopIteration


TAGS = "_fastmon_tags"


class Rebuilt:
    """Serves the rest of an epoch after a rebuild: first the batches the replaced
    iterators had in flight, taken out at the rebuild, then the new loader's. It holds no
    iterator the script holds: that iterator holds this, and a cycle would keep every
    worker here alive past a ``break`` until the garbage collector, whose finalizers then
    wait 5 s on each worker's join."""

    def __init__(self, buffered: collections.deque, new_iter, new_loader, orig_next, counter=None) -> None:
        self.counter = counter  # samples, where the batch size changed: each batch's own size
        self.buffered = buffered
        self.new_iter = new_iter
        self.new_loader = new_loader
        self._orig_next = orig_next

    def next(self, owner):
        """The next batch of ``owner``, the iterator the script holds: its count of
        batches delivered goes on."""
        if self.buffered:
            batch = self.buffered.popleft()
        elif self.new_iter is None:
            raise StopIteration
        else:
            batch = self._orig_next(self.new_iter)
        owner._num_yielded += 1
        if self.counter is not None:
            self.counter._num_yielded += batch_size_of(batch)
        return batch


def taken_of(iterator, state: LoaderState, at_last=None):
    """What the clock reads of the training iterator: its own count, or of the batches the
    training took where the loop fetches ahead and the iterator's end can be told (by
    itself, or by the ``__next__`` wrapper, put in by ``at_last`` once every batch of an
    iterator of known length is delivered)."""
    if not state.fetch_ahead:
        return iterator
    try:
        total = len(iterator)
    except Exception:
        total = None  # an IterableDataset's
    if total is None and not tells_used_up(iterator):
        return iterator
    return TakenCount(iterator, state.fetch_ahead, used_up, total, at_last)


def used_up(iterator) -> bool:
    """Whether the iterator has raised StopIteration: the ``__next__`` wrapper saw it; after
    a live rebuild, its in-flight batches served and the new loader's iterator used up; a
    multi-process one (without persistent workers) has shut its workers down; a
    single-process one's batch sampler, a generator, has ended (a multi-process one's ends
    early: its workers take indices ahead)."""
    tags = getattr(iterator, TAGS, None)
    if tags is not None and tags.ended:
        return True
    source = tags.source if tags is not None else None
    if source is not None:
        return not source.buffered and (source.new_iter is None or used_up(source.new_iter))
    if getattr(iterator, "_persistent_workers", False):
        return False  # it looks the same just before its StopIteration and just after
    shutdown = getattr(iterator, "_shutdown", None)
    return shutdown if shutdown is not None else iterator._sampler_iter.gi_frame is None


def tells_used_up(iterator) -> bool:
    """Whether ``used_up`` can tell by the iterator alone: a persistent-workers iterator
    looks the same just before its StopIteration and just after, and a sampler that is no
    generator never ends visibly."""
    if getattr(iterator, "_persistent_workers", False):
        return False
    return hasattr(iterator, "_shutdown") or isinstance(getattr(iterator, "_sampler_iter", None), types.GeneratorType)


def take_in_flight(iterator, orig_next) -> list:
    """The batches ``iterator`` has in flight, once its index stream is used up, in
    order; then its workers stop. Its count of batches delivered is left as it was: the
    script has not had these yet."""
    delivered = iterator._num_yielded
    batches = []
    try:
        while True:
            batches.append(orig_next(iterator))
    except StopIteration:
        pass
    finally:
        iterator._num_yielded = delivered
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    return batches


class LoaderPart(Part):
    name = "loader"

    def __init__(self, probe) -> None:
        super().__init__(probe)
        self.main_thread = threading.main_thread().ident
        self.loaders: dict[int, LoaderState] = {}
        self.loaders_seen = 0  # each loader's number: a freed loader's place (its id) is taken by a new one
        self.last_loader: LoaderState | None = None
        self.train_loader: LoaderState | None = None
        self._orig_next = dl._BaseDataLoaderIter.__next__
        self._orig_iter = DataLoader.__iter__
        self._orig_init = DataLoader.__init__
        # where each DataLoader was built: the line a lasting change of its settings goes on
        self.built_at: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.rebuilt = False  # an iterator delegates to a rebuilt loader (until the run ends)
        self._report_lock = threading.Lock()  # the publisher's round and a settings change both report
        self.timed_next = None
        self.first_batch_pending: weakref.WeakSet = weakref.WeakSet()  # iterators whose first batch is awaited
        self.end_pending: weakref.WeakSet = weakref.WeakSet()  # fetched-ahead iterators whose StopIteration is awaited

    # --- patches --------------------------------------------------------------------
    def install(self) -> None:
        part, probe = self, self.probe
        clock, put, optimizer_part = probe.clock, probe.clock.put, probe.optimizer_part
        orig_next, orig_iter = self._orig_next, self._orig_iter
        get_ident, main_thread = threading.get_ident, self.main_thread

        def __next__(it):
            tags = getattr(it, TAGS, None)
            if tags is not None and tags.iter_seconds is not None:
                return part.first_batch(it, tags)
            source = tags.source if tags is not None else None
            if not clock.timing or not part.on or get_ident() != main_thread:
                try:
                    return source.next(it) if source is not None else orig_next(it)
                except StopIteration:
                    part.saw_end(it, tags)
                    raise
            entered = False
            try:
                if clock.backwards_since_step and not optimizer_part.created:
                    probe.end_step()  # no optimizer: a batch after a backward starts the next step
                entered = perf_counter_ns()
                put((ENTER + DATA_WAIT, entered))
                cpu = thread_time_ns()
                if tags is not None and tags.pending is not None:
                    part.rebuild_now(it, tags)
            except Exception as exc:
                part.fail(exc)
            if tags is not None:
                source = tags.source  # a rebuild may have just set it
            try:
                batch = source.next(it) if source is not None else orig_next(it)
            except BaseException as exc:
                if entered:
                    put((LEAVE, perf_counter_ns()))
                if isinstance(exc, StopIteration):
                    part.saw_end(it, tags)
                raise
            if entered:
                try:
                    left = perf_counter_ns()
                    put((LEAVE_BATCH, left, batch_size_of(batch)))
                    clock.loader_batches += 1
                    if tags is not None:
                        part.last_loader = state = tags.state
                        # this thread's CPU in the wait: loading that is CPU work, or a wait (I/O, workers)
                        state.wait_cpu_ns += thread_time_ns() - cpu
                        state.wait_ns += left - entered
                except Exception as exc:
                    part.fail(exc)
            return batch

        def __iter__(loader):
            if not part.on or threading.get_ident() != part.main_thread:
                return orig_iter(loader)
            timing = clock.timing
            if timing:
                clock.enter(DATA_WAIT)
            starts_workers = part.starts_workers(loader)
            started = perf_counter()
            try:
                it = orig_iter(loader)
            finally:
                if timing:
                    clock.leave()
            try:
                part.on_iter(loader, it, started, starts_workers)
            except Exception as exc:
                part.fail(exc)
            return it

        orig_init = self._orig_init

        @functools.wraps(orig_init)  # libraries read DataLoader.__init__'s signature (Lightning)
        def __init__(loader, *args, **kwargs):
            orig_init(loader, *args, **kwargs)
            if part.on:
                try:
                    part.built_at[loader] = fmt(user_frame(2))
                except Exception as exc:
                    part.fail(exc)
            pipeline = part.probe.pipeline_part
            if pipeline.on:
                try:
                    pipeline.watch(loader.dataset)
                except Exception as exc:
                    pipeline.fail(exc)

        self.timed_next = __next__
        DataLoader.__iter__ = __iter__
        DataLoader.__init__ = __init__

    def uninstall(self) -> None:
        DataLoader.__iter__ = self._orig_iter
        DataLoader.__init__ = self._orig_init
        self.first_batch_pending.clear()
        self.end_pending.clear()
        self.disarm()

    def arm(self) -> None:
        dl._BaseDataLoaderIter.__next__ = self.timed_next

    def disarm(self) -> None:
        # Iterators that delegate to a rebuilt loader need the wrapper at every batch, and
        # an iterator's first batch is timed whether its step is or not.
        if not self.rebuilt and not self.first_batch_pending and not self.end_pending:
            dl._BaseDataLoaderIter.__next__ = self._orig_next

    def watch_end(self, it) -> None:
        """Every batch of a fetched-ahead iterator is delivered: the wrapper stays in until
        its StopIteration, which tells that the loop has taken them all."""
        self.end_pending.add(it)
        self.arm()

    def saw_end(self, it, tags: IterTags | None) -> None:
        try:
            if tags is not None:
                tags.ended = True
            self.end_pending.discard(it)
            if not self.probe.clock.timing:
                self.disarm()
        except Exception as exc:
            self.fail(exc)

    # --- timing ---------------------------------------------------------------------
    def rebuild_now(self, it, tags: IterTags) -> None:
        """A hot-apply scheduled on this iterator: rebuild before its next batch (a
        prefetch_factor alone: changed in place, on the training thread, as the iterator's
        own state is)."""
        (state, params, ack), tags.pending = tags.pending, None
        current = tags.source.new_iter if tags.source is not None else it
        if params.keys() == {"prefetch_factor"} and isinstance(current, dl._MultiProcessingDataLoaderIter):
            try:
                prefetch_in_place(current, int(params["prefetch_factor"]))
                ack(ok=True, settle=0, startup_s=None)
            except Exception as exc:
                ack(ok=False, error=f"{type(exc).__name__}: {exc}")
            return
        try:
            settle, startup = self.rebuild(it, tags, state, params)
            ack(ok=True, settle=settle, startup_s=startup)
        except Exception as exc:
            ack(ok=False, error=f"{type(exc).__name__}: {exc}")

    def starts_workers(self, loader) -> bool:
        """Whether ``iter(loader)``, about to run, starts worker processes."""
        try:
            return loader.num_workers > 0 and (not loader.persistent_workers
                                               or getattr(loader, "_iterator", None) is None)
        except Exception as exc:
            self.fail(exc)
            return False

    def on_iter(self, loader, it, started: float, starts_workers: bool) -> None:
        key = id(loader)
        state = self.loaders.get(key)
        if state is None or state.ref() is not loader:
            state = LoaderState(f"L{self.loaders_seen}", loader, self.built_at.get(loader) or fmt(user_frame(3)))
            self.loaders_seen += 1
            self.loaders[key] = state
        seconds = perf_counter() - started
        state.epoch = (state.epoch[0] + 1, seconds, state.epoch[2])
        state.live = weakref.ref(it)
        state.iter_step = self.probe.clock.step
        if state.role is None and not torch.is_grad_enabled():
            state.role = "eval"  # a validation loop under no_grad or inference_mode
        state.counter = None  # a new epoch: one batch size again
        train = self.train_loader
        if state is not train and state.role is None and train is not None and train.ref() is None \
                and state.location == train.location and torch.is_grad_enabled():
            # the training's loader built anew where it was built before (each epoch, by a
            # wrapper that yields converted batches): the training's from its first batch,
            # or the untimed steps until the next timed one would read the old one's count
            self.set_training(state)
        if state is self.train_loader:
            self.probe.clock.training_iterator(taken_of(it, state, self.watch_end), state.index, state.epoch[0])
        tags = IterTags(state)
        setattr(it, TAGS, tags)
        if starts_workers:
            tags.iter_seconds = seconds
            self.first_batch_pending.add(it)
            self.arm()

    def first_batch(self, it, tags: IterTags):
        """The first ``__next__`` of an iterator that started workers (through the timed
        path when its step is timed): how long it waited, with its ``iter()``, for the
        workers to start (not the time between them, which the script spent elsewhere)."""
        iter_seconds, tags.iter_seconds = tags.iter_seconds, None
        started = perf_counter()
        try:
            return self.timed_next(it)
        finally:
            try:
                workers = getattr(it, "_num_workers", 0)
                store = workers * (getattr(it, "_prefetch_factor", None) or 2)  # its first batches, made meanwhile
                tags.state.add_startup((self.probe.clock.step, iter_seconds + perf_counter() - started, workers, 0,
                                        store))
                self.first_batch_pending.discard(it)
                if not self.probe.clock.timing:
                    self.disarm()
            except Exception as exc:
                self.fail(exc)

    def report(self) -> None:
        """Each loader's fact, where an epoch has begun or its settings changed since the
        last one. From the publisher's round, so a short epoch costs the training thread
        three attribute writes, not a fact; and from a settings change, at once."""
        try:
            with self._report_lock:
                self.probe.fact("dataloader.worker_pids", self.worker_pids())
                for state in list(self.loaders.values()):
                    # Both are replaced, never changed in place: identity is the cheap test,
                    # in a round that runs cold once a second. The waits' CPU share is told
                    # again each time the time it is made of doubles (a long epoch's first).
                    reported = state.reported
                    if reported is None or reported[0] is not state.description or reported[1] is not state.epoch \
                            or state.wait_ns > 2 * reported[2]:
                        state.reported = (state.description, state.epoch, state.wait_ns)
                        epochs, iter_seconds, startups = state.epoch
                        share = round(state.wait_cpu_ns / state.wait_ns, 3) if state.wait_ns else None
                        self.probe.fact(f"loader.{state.id}", dict(state.description, id=state.id,
                                                                   location=state.location, epochs=epochs,
                                                                   epoch_began=state.iter_step, wait_cpu_share=share,
                                                                   iter_seconds=iter_seconds,
                                                                   startups=[list(s) for s in startups]))
        except Exception as exc:
            self.fail(exc)

    def worker_pids(self) -> list[int]:
        """The pids of the workers of every live iterator (and of those a rebuild drains):
        the monitor names these, and only these, DataLoader workers."""
        pids = set()
        for state in list(self.loaders.values()):
            live = state.live() if state.live is not None else None
            tags = getattr(live, TAGS, None)
            iterators = [live]
            if tags is not None and tags.source is not None:
                iterators.append(tags.source.new_iter)
            for it in iterators:
                for worker in getattr(it, "_workers", None) or ():
                    if worker.pid is not None:
                        pids.add(worker.pid)
        return sorted(pids)

    # --- hot-apply ------------------------------------------------------------------
    def training_loader(self) -> LoaderState | None:
        return self.train_loader or self.last_loader

    def fed_training(self) -> None:
        """A training forward took the batches of this step: their loader is the training's."""
        state = self.last_loader
        if state is not None and state is not self.train_loader:
            self.set_training(state)

    def fed_eval(self) -> None:
        state = self.last_loader
        if state is not None and state.role is None:
            state.role = "eval"

    def set_training(self, state: LoaderState) -> None:
        if self.train_loader is not None and state.role != "train":
            # A new DataLoader feeds the training (one built each epoch, say): a live change
            # to the one before died with it.
            self.probe.event("replaced", what="DataLoader", location=state.location, was=self.train_loader.id,
                             now=state.id, step=state.iter_step)
        state.role = "train"
        self.train_loader = state
        live = state.live() if state.live is not None else None
        if state.counter is not None:
            self.probe.clock.training_iterator(state.counter, state.index, state.epoch[0], samples=True)
        elif live is not None:
            self.probe.clock.training_iterator(taken_of(live, state, self.watch_end), state.index, state.epoch[0])

    def before_step_end(self) -> None:
        """A timed step ends, the first of its epoch: the batches the loop fetched beyond
        those its models' forwards took (one each) are fetched ahead (accelerate's,
        Lightning's, timm's loaders fetch one, to know the last): from here the step's
        reading is of the batches taken, so this step holds one batch, not two. The next
        step confirms it (it takes one batch a forward), or the readings are of the
        batches delivered again (a loop that takes two a forward: this one evens out)."""
        state, clock = self.train_loader, self.probe.clock
        if not self.on or state is None or state.counter is not None:
            return
        live = state.live() if state.live is not None else None
        if live is None or not clock.model_forwards:
            return
        if state.fetch_ahead is None and clock.step == state.iter_step:
            state.fetch_ahead = max(0, live._num_yielded - clock.model_forwards)
            if state.fetch_ahead:
                state.ahead_check = live._num_yielded
                clock.training_iterator(taken_of(live, state, self.watch_end), state.index, state.epoch[0])
        elif state.ahead_check is not None and clock.step == state.iter_step + 1:
            if live._num_yielded - state.ahead_check != clock.model_forwards:
                state.fetch_ahead = 0
                clock.training_iterator(live, state.index, state.epoch[0])
            state.ahead_check = None

    def schedule(self, params: dict, ack, state: LoaderState | None = None) -> None:
        """Apply loader settings: for later epochs at once, for the live epoch at the
        iterator's next ``__next__`` (so the rebuild's cost shows as data_wait). Persistent
        workers only for later epochs: the live epoch's workers are up already, and a
        rebuild would start new ones (seconds, where workers are spawned)."""
        state = state or self.training_loader()
        loader = state.ref() if state else None
        if loader is None:
            raise RuntimeError("no DataLoader seen in the training loop")
        before = state.description
        set_loader_settings(loader, params)
        state.description = facts.describe_loader(loader)
        self.report()  # before the acknowledgement: the monitor sees the new settings with it
        live = state.live() if state.live is not None else None
        tags = getattr(live, TAGS, None)
        in_place = params.keys() == {"prefetch_factor"} and isinstance(live, dl._MultiProcessingDataLoaderIter)
        if tags is None or (live._dataset_kind != dl._DatasetKind.Map and not in_place) \
                or params.keys() == {"persistent_workers"}:
            ack(ok=True, note="takes effect at the next epoch")
            return
        if "batch_size" in params and state.counter is None:
            # The rest of this epoch comes in the new size: its samples are counted batch by
            # batch from here, the batches so far by the old size (fastmon.common.sample_count).
            so_far = samples_in_first(live._num_yielded, before.get("batch_size"), before.get("epoch_samples"))
            if so_far is not None:
                state.counter = SampleCount(so_far)
                if state is self.train_loader:
                    self.probe.clock.training_iterator(state.counter, state.index, state.epoch[0], samples=True)
        tags.pending = (state, params, ack)

    def rebuild(self, it, tags: IterTags, state: LoaderState, params: dict) -> tuple[int, float | None]:
        """Serve the rest of the epoch with the loader's new settings. Returns the batches
        that come faster than the new setting makes them (those the old workers had in
        flight, then the new workers' first store) and the new workers' start-up (None
        where none start)."""
        loader = state.ref()
        source = tags.source
        current = source.new_iter if source is not None else it
        buffered = source.buffered if source is not None else collections.deque()
        remaining = list(current._sampler_iter) if current is not None else []
        if current is not None:
            buffered.extend(take_in_flight(current, self._orig_next))
        if persistent := getattr(loader, "_iterator", None):
            if persistent is it or persistent is current:
                loader._iterator = None  # the next epoch must start workers with the new settings
        if "batch_size" in params and loader._auto_collation:
            remaining = regroup(remaining, loader.batch_size)
        new_loader = loader_over(loader, remaining) if remaining else None
        started = perf_counter()
        new_iter = self._orig_iter(new_loader) if new_loader is not None else None
        settle, startup = len(buffered), None
        if new_iter is not None and new_loader.num_workers > 0:
            try:
                buffered.append(self._orig_next(new_iter))  # what an epoch start waits for
            except StopIteration:
                pass
            startup = perf_counter() - started
            settle = len(buffered) + new_loader.num_workers * (new_loader.prefetch_factor or 2)
            state.add_startup((self.probe.clock.step, startup, new_loader.num_workers, 1, settle))
        tags.source = Rebuilt(buffered, new_iter, new_loader, self._orig_next, state.counter)
        self.rebuilt = True
        return settle, startup


def prefetch_in_place(it, factor: int) -> None:
    """Hold ``factor`` batches a worker ahead from now on, in the running iterator: deeper,
    the indices that many more are sent at once; shallower, none is sent until fewer are
    out (torch's _try_put_index would raise). No worker starts or stops and each batch goes
    to the worker it went to before (the round-robin goes on): every sample, and every
    random draw a worker makes for it, stays as it was without the change."""
    if not getattr(it, "_fastmon_put", False):
        put, ref = type(it)._try_put_index, weakref.ref(it)  # no cycle: the iterator's end shuts its workers

        def _try_put_index():
            live = ref()
            if live is not None and live._tasks_outstanding < live._prefetch_factor * live._num_workers:
                put(live)

        it._try_put_index = _try_put_index
        it._fastmon_put = True
    more = (factor - it._prefetch_factor) * it._num_workers
    it._prefetch_factor = factor
    for _ in range(max(0, more)):
        it._try_put_index()


def set_loader_settings(loader: DataLoader, params: dict) -> None:
    if "num_workers" in params:
        loader.num_workers = int(params["num_workers"])
        if loader.num_workers > 0 and loader.prefetch_factor is None:
            loader.prefetch_factor = 2
        if loader.num_workers > (os.cpu_count() or 1):
            # torch warns at every iter() when workers outnumber cores; fastmon chose this
            # count by measuring it (I/O- or sleep-bound loading scales past the cores).
            warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
    if "prefetch_factor" in params and loader.num_workers > 0:
        loader.prefetch_factor = int(params["prefetch_factor"])
    if "pin_memory" in params:
        loader.pin_memory = bool(params["pin_memory"])
    if "batch_size" in params:
        # DataLoader forbids these after __init__; iter() and len() read them afresh.
        sampler = new_batch_sampler(loader, int(params["batch_size"]))
        object.__setattr__(loader, "batch_sampler", sampler)
        object.__setattr__(loader, "batch_size", sampler.batch_size)
        if getattr(loader, "_iterator", None) is not None:
            loader._iterator = None  # a persistent iterator keeps the old batch sampler
    if "persistent_workers" in params:
        # DataLoader forbids setting this after __init__; it is read at the next iter().
        object.__setattr__(loader, "persistent_workers", bool(params["persistent_workers"]) and loader.num_workers > 0)
    if getattr(loader, "_iterator", None) is not None and not loader.persistent_workers:
        loader._iterator = None


def loader_over(loader: DataLoader, remaining: list) -> DataLoader:
    """A DataLoader like ``loader`` (its current settings) over exactly ``remaining``."""
    kwargs = dict(
        num_workers=loader.num_workers, collate_fn=loader.collate_fn, pin_memory=loader.pin_memory,
        timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context, generator=loader.generator,
        pin_memory_device=loader.pin_memory_device,
    )
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor or 2
    if loader._auto_collation:
        return DataLoader(loader.dataset, batch_sampler=remaining, **kwargs)
    return DataLoader(loader.dataset, sampler=remaining, batch_size=None, **kwargs)
