"""The step clock, the training thread's side: it timestamps phase boundaries into the
step event log (``fastmon.common.step_events``) and keeps the few counters the probe's own
decisions need (the step number; the DataLoader batches awaiting a forward, the forwards
and the backwards so far in the step, which count only in timed steps) and whether this
step is timed (``fastmon.probe.sampling``).

Which phase each nanosecond belongs to is worked out in the monitor from the log. The
hot hooks (DataLoader ``__next__``, the forward and backward wrappers, the optimizer
hooks) append their events directly, ``put((code, perf_counter_ns()))``: one C call each.
"""

from __future__ import annotations

import sys
import threading
import weakref
from time import perf_counter_ns

from fastmon.common.step_events import (ENTER, GAP_IS_DATA, LEAVE, LEAVE_AS, LEAVE_STEP_END, LOADER_READING, MEMORY,
                                  RESUMED, STEP_END, UNTIMED_STEPS)
from fastmon.common.sample_count import reading_base


class SampleCount:
    """The samples an epoch has delivered so far where fastmon changed its batch size live
    (batches of two sizes): read at each step's end as an iterator's batch count is."""

    __slots__ = ("_num_yielded",)

    def __init__(self, so_far: int) -> None:
        self._num_yielded = so_far


NO_ITERATOR = SampleCount(-1)  # stands for the training loader's iterator until one is known


class TakenCount:
    """The batches the training took of an iterator that a loop fetches ``ahead`` batches
    in front of (accelerate's, Lightning's, timm's loaders, to know the last): torch's
    count less ``ahead`` until ``ended(iterator)``, then all of them. Read at each step's
    end as the iterator itself is, in the optimizer's hook: it never raises. Once all of
    its ``total`` batches are delivered, ``at_last(iterator)`` is called (to see its
    StopIteration). It holds the iterator weakly: one dropped with every batch delivered
    (timm's wrapper drops it at its StopIteration, then yields the last) has had them all
    taken; one dropped before (a loop that broke off) never had the batch fetched ahead
    trained on."""

    __slots__ = ("iterator", "ahead", "ended", "total", "at_last", "delivered", "done")

    def __init__(self, iterator, ahead: int, ended, total: int | None = None, at_last=None) -> None:
        self.iterator, self.ahead, self.ended = weakref.ref(iterator), ahead, ended
        self.total, self.at_last = total, at_last
        self.delivered, self.done = 0, False

    @property
    def _num_yielded(self) -> int:
        if self.done:
            return self.delivered
        try:
            it = self.iterator()
            if it is None:
                self.done = self.total is None or self.delivered >= self.total
            else:
                self.delivered = it._num_yielded
                self.done = self.ended(it)
                if not self.done and self.at_last is not None and self.total is not None \
                        and self.delivered >= self.total:
                    at_last, self.at_last = self.at_last, None
                    at_last(it)
        except Exception:
            self.done = True  # what cannot be read is taken as it was delivered
        return self.delivered if self.done else max(0, self.delivered - self.ahead)


class StepClock:
    __slots__ = ("put", "step", "loader_batches", "eval_took_batch", "loader_fed", "forwards", "model_forwards",
                 "backwards_since_step",
                 "_memory", "timing", "ends", "readings", "train_it", "reading_base", "short_until", "short_ref",
                 "_ends_first", "_ends_lock", "_held_once")

    def __init__(self, put, memory=None) -> None:
        self.put = put  # appends one event, atomically: array('q').extend
        self._memory = memory
        self.step = 0
        self.loader_batches = 0
        self.eval_took_batch = False  # an eval-mode forward took a DataLoader batch in this step
        # A training forward has followed a DataLoader batch: the training is fed by loaders,
        # so a step without a batch of its own (a GAN's generator step) is not given the
        # batch its forward takes as samples, nor its start as data_wait.
        self.loader_fed = False
        self.forwards = 0
        self.model_forwards = 0  # of these, the forwards of modules with parameters (not a loss module's)
        self.backwards_since_step = 0
        self.timing = True  # the phase wrappers are in (Probe.arm)
        # The end times of the latest untimed steps, not yet in the log: a list.append is
        # the cheapest record there is. They go in as one event when timing resumes, and
        # at each of the publisher's sends (so a killed trainer loses no more than ever).
        self.ends: list[int] = []
        # Beside each end, how many batches the training took of its loader's iterator
        # (torch's own count, ``_num_yielded``; less those fetched ahead, TakenCount),
        # tagged with the loader and its epoch (``reading_base``): the monitor makes every
        # step's samples of it, timed or not.
        self.readings: list[int] = []
        self.train_it = NO_ITERATOR
        self.reading_base = 0
        # Untimed steps numbered below this end the short way (the optimizer post hook's few
        # lines); -1 while steps are timed or something is due. One int on the object the
        # hook touches anyway: each further object a per-step hook reads is a likely cache
        # miss after torch's work (here even a no-op hook costs ~1 µs a step).
        self.short_until = -1
        # ... and only for the steps of the optimizer whose step ended the last step in the
        # training thread: its weak reference, which ``optimizer.__weakref__`` is (CPython
        # keeps the plain reference first). An identity test instead of a thread test (a
        # call to get_ident, ~1 µs a step measured); another thread's optimizer, or a second
        # one in a GAN's loop, takes the long way, which checks the thread. Weak: a strong
        # one would keep a deleted optimizer's state (on the GPU, for Adam twice the model)
        # alive into the next model of a sweep.
        self.short_ref = None
        self._ends_first = 0  # the step number of ends[0]
        self._ends_lock = threading.Lock()  # the training thread and the publisher both flush
        self.train_it = object()  # referenced by this slot alone: what _train_it_refs counts then
        self._held_once = self._train_it_refs()
        self.train_it = NO_ITERATOR

    def enter(self, phase: int) -> None:
        self.put((ENTER + phase, perf_counter_ns()))

    def leave(self, charge_to: int | None = None) -> None:
        """Close the innermost phase; ``charge_to`` relabels its last stretch (e.g. a
        ``.to()`` that turned out not to cross to the device; -1: the enclosing phase)."""
        if charge_to is None:
            self.put((LEAVE, perf_counter_ns()))
        else:
            self.put((LEAVE_AS, perf_counter_ns(), charge_to))

    def reclassify_gap_as_data_wait(self) -> None:
        """A step with no DataLoader batch: the time before its first forward was spent
        producing the batch by other means (a custom batch function)."""
        self.put((GAP_IS_DATA, perf_counter_ns()))

    def resumed(self) -> None:
        """After a suspended stretch: that time belongs to no step."""
        self.put((RESUMED, perf_counter_ns()))

    def training_iterator(self, it, loader_index: int, epoch: int, samples: bool = False) -> None:
        """The training loader's live iterator, whose delivered batches each step end reads
        (``samples``: ``it`` is a ``SampleCount``, of samples)."""
        with self._ends_lock:
            self.train_it, self.reading_base = it, reading_base(loader_index, epoch, samples)

    def _train_it_refs(self) -> int:
        it = self.train_it
        return sys.getrefcount(it)

    def let_go_of_dropped_iterator(self) -> None:
        """From the publisher's round: once the script has dropped the training iterator
        (a ``break``), keep its final count instead of it. Held, it would keep its workers
        alive into whatever comes next; python stops them at once."""
        with self._ends_lock:
            if self._train_it_refs() > self._held_once:
                return
            dropped = self.train_it
            if type(dropped) in (SampleCount, TakenCount):  # a count, or a weak hold: nothing held
                return
            self.train_it = SampleCount(dropped._num_yielded)
        # Its workers stop here, when the last reference goes: outside the lock, which the
        # training thread takes at its next epoch.

    def reading(self) -> int:
        return self.reading_base + self.train_it._num_yielded

    def end_step(self, leaving: bool = False) -> int:
        """End a timed step; ``leaving``: closing the innermost phase (the optimizer's) too.
        Returns the step's end time."""
        if self._memory is not None:
            self.put((MEMORY, *self._memory()))
        self.put((LOADER_READING, self.reading()))
        now = perf_counter_ns()
        self.put((LEAVE_STEP_END if leaving else STEP_END, now, self.step))
        self.step += 1
        self.loader_batches = self.forwards = self.model_forwards = self.backwards_since_step = 0
        self.eval_took_batch = False
        return now

    def start_untimed(self) -> None:
        """The steps from this one on are untimed (until ``flush_untimed`` and timing again)."""
        with self._ends_lock:
            self._ends_first = self.step

    def flush_untimed(self) -> None:
        """Log the untimed steps ended since the last flush. From the training thread, or the
        publisher's: the training thread only ever appends to ``ends`` meanwhile."""
        with self._ends_lock:
            ends, readings = self.ends, self.readings
            count = min(len(ends), len(readings))  # the training thread appends the end first
            if count:
                self.put((UNTIMED_STEPS, self._ends_first, count, *ends[:count], *readings[:count]))
                del ends[:count]
                del readings[:count]
                self._ends_first += count
