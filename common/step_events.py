"""The probe's step event log, and its assembly into step rows in the monitor.

The training thread only timestamps: each phase boundary appends one event (a code and
its integer arguments) to an ``array('q')`` in a single C call. Which phase each
nanosecond belongs to is worked out here, in the monitor process, by the same
exclusive-time rule as ever: every nanosecond between two step boundaries is charged to
exactly one phase, the innermost one open at the time, or ``other`` when none is; so the
phase times of a step add up to its wall time by construction. Before the first
training activity, and after a gap in the log, time belongs to no step (``IDLE``).
A step the probe did not time (``fastmon.probe.sampling``) has only its end in the log:
its row has the wall time, the samples its timed neighbours tell
(``fastmon.common.untimed_samples``), and None for the rest.
A step's samples are its training batches': a batch counts once a training forward (or
one with autograd on) follows it, or at the step's end when no forward is seen (plain
tensors); batches that only eval-mode forwards without autograd follow (a validation
pass between steps) are not the training's.

Keeping this out of the training process is what makes the probe cheap: on a ~1 ms CPU
step each Python operation in a hook costs several times what it costs in a warm loop
(torch has just evicted the interpreter from the caches), so the hooks do the least
Python they can. Imports nothing but the phase names, ``fastmon.common.sample_count`` and
``fastmon.common.untimed_samples``: the probe and the monitor share it.
"""

from __future__ import annotations

from array import array

from fastmon.common.phases import BACKWARD, COMM, DATA_WAIT, FORWARD, OTHER, PHASES, SYNC, StepRow
from fastmon.common.sample_count import LoaderReadings, SamplesOf
from fastmon.common.untimed_samples import UntimedSamples

IDLE = len(PHASES)

# Event codes. ENTER + phase opens a phase: (code, t). Times are perf_counter_ns.
ENTER = 0
LEAVE = 16  # (code, t): close the innermost phase
LEAVE_AS = 17  # (code, t, phase): close it, charging its last stretch to phase (-1: the enclosing one)
LEAVE_BATCH = 18  # (code, t, samples): close data_wait with a batch of this many samples
STEP_END = 19  # (code, t, step)
LEAVE_STEP_END = 20  # (code, t, step): close the innermost phase (the optimizer's) and end the step
FORWARD_TRAIN = 21  # (code, t): open forward, a training forward of a model with parameters
FORWARD_EVAL = 22  # (code, t): open forward, an eval-mode forward
FORWARD_EVAL_GRAD = 23  # (code, t): open forward, an eval-mode forward with autograd on
SAMPLES = 24  # (code, samples): a batch that did not come from a DataLoader
H2D_COPY = 25  # (code, bytes, pageable bytes)
MEMORY = 26  # (code, allocated, reserved, peak): torch's allocator at the step's end
GAP_IS_DATA = 27  # (code, t): the step's time so far, before its first forward, was spent getting the batch
COMM_TAIL = 28  # (code, t_last_grad): the backward just closed waited for DDP's all-reduce after this
RESUMED = 29  # (code, t): the probe was suspended since the last event; that time is in no step
UNTIMED_STEPS = 30  # (code, first_step, n, t_1 .. t_n, r_1 .. r_n): n untimed steps' ends, and their loader readings
LOADER_READING = 31  # (code, reading): the training loader's batches delivered at this timed step's end
COMM_OVERLAP = 32  # (code, ns): a collective issued without waiting ran this long before its wait (or its end)
TOKENS = 33  # (code, tokens, non-padding tokens or -1): a training forward's token ids
ARITY = {COMM_OVERLAP: 2, TOKENS: 3, LEAVE: 2, LEAVE_AS: 3, LEAVE_BATCH: 3, STEP_END: 3, LEAVE_STEP_END: 3, UNTIMED_STEPS: 3, LOADER_READING: 2,
         FORWARD_TRAIN: 2,
         FORWARD_EVAL: 2, FORWARD_EVAL_GRAD: 2, SAMPLES: 2, H2D_COPY: 3, MEMORY: 4, GAP_IS_DATA: 2,
         COMM_TAIL: 2, RESUMED: 2, **{ENTER + p: 2 for p in range(len(PHASES))}}

NS = 1e-9
UNTIMED_PHASES = (None,) * len(PHASES)  # an untimed step's phases and per-step counts: not measured
UNTIMED_COUNTS = (None,) * 9


class StepAssembler:
    """One rank's step rows (``StepRow``, seconds) from its probe's event log."""

    def __init__(self, rank: int, samples_of: SamplesOf | None = None, tokens_per_sample: int | None = None) -> None:
        self.rank = rank
        self.tokens_per_sample = tokens_per_sample  # the user's count, for steps whose forwards showed no ids
        self.reading = -1  # the training loader's reading at the step about to end
        self._readings = LoaderReadings(samples_of)
        self.dropped = 0  # steps lost to a gap in the log
        self._carry = array("q")  # the start of an event cut off at the end of a frame
        self._next_step: int | None = None
        self._untimed_samples = UntimedSamples()
        self._resync()

    def _resync(self) -> None:
        """Forget the step in progress: the next step boundary starts a fresh one."""
        self.phase = IDLE
        self.stack: list[int] = []
        self.mark = None
        self.step_start = None
        self.complete = self._next_step is None  # after a gap, the step in progress lacks its start
        self._reset_step()

    def _reset_step(self) -> None:
        self.acc = [0] * (len(PHASES) + 1)
        self.samples = self.batch_samples = self.micro_batches = self.eval_forwards = self.eval_grad_forwards = 0
        self.sync_calls = self.h2d_bytes = self.h2d_pageable_bytes = 0
        self.comm_overlapped = self.comm_in_forward = self.named_other = 0
        self.tokens = self.tokens_nonpad = None
        self.memory = (0, 0, 0)

    def feed(self, log: bytes, perf0: int, wall0: float, gap: bool = False) -> list[list]:
        """Step rows completed by this frame of the log. ``gap``: the probe dropped events
        before this frame (its buffer overflowed), so the step in progress is incomplete."""
        if gap:
            self._carry = array("q")
            self._resync()
            self.complete = False
        ints = self._carry
        ints.frombytes(log)
        rows: list[list] = []
        i, n = 0, len(ints)
        while i < n:
            code = ints[i]
            width = ARITY.get(code)
            if width is None:
                raise ValueError(f"unknown step event code {code}")
            if code == UNTIMED_STEPS and i + width <= n:
                width += 2 * ints[i + 2]
            if i + width > n:
                break
            self._apply(code, ints, i, rows, perf0, wall0)
            i += width
        self._carry = ints[i:]
        return rows

    def _charge(self, t: int, phase: int | None = None, named: bool | None = None) -> None:
        """Charge the time since the last event to ``phase`` (default: the open one, with the
        phase that encloses it still on the stack). ``named``: the time is ``other`` entered
        by name (a time.sleep), never the batch's making (default: the open phase is)."""
        if self.mark is None:
            self.mark = self.step_start = t
        charged = self.phase if phase is None else phase
        took = t - self.mark
        self.acc[charged] += took
        if charged == COMM and self.stack and self.stack[-1] == FORWARD:
            self.comm_in_forward += took
        elif charged == OTHER and (named if named is not None else phase is None and bool(self.stack)):
            self.named_other += took
        self.mark = t

    def _enter(self, phase: int, t: int) -> None:
        self._charge(t)
        self.stack.append(self.phase)
        self.phase = phase

    def _leave(self, t: int, charge_to: int | None = None) -> None:
        closing = self.phase
        enclosing = self.stack[-1] if self.stack else OTHER
        if charge_to is not None:
            closing = charge_to if charge_to >= 0 else enclosing
        self._charge(t, closing, named=self.phase == OTHER and closing == OTHER and bool(self.stack))
        if self.stack:
            self.stack.pop()
        self.phase = enclosing

    def _apply(self, code: int, ints, i: int, rows: list, perf0: int, wall0: float) -> None:
        if code < LEAVE:
            phase = code - ENTER
            if phase == OTHER and self.phase != OTHER:  # a sleep inside a phase (a slow read's) is that phase's
                phase = self.phase
            self._enter(phase, ints[i + 1])
            if code - ENTER == SYNC:
                self.sync_calls += 1
        elif code == LEAVE:
            self._leave(ints[i + 1])
        elif code == LEAVE_BATCH:
            self._leave(ints[i + 1])
            self.batch_samples += ints[i + 2]
        elif code == FORWARD_TRAIN:
            self._enter(FORWARD, ints[i + 1])
            self.micro_batches += 1
            self.samples, self.batch_samples = self.samples + self.batch_samples, 0
        elif code == LEAVE_STEP_END:
            self._leave(ints[i + 1])
            self._end_step(ints[i + 1], ints[i + 2], rows, perf0, wall0)
        elif code == UNTIMED_STEPS:
            first, count = ints[i + 1], ints[i + 2]
            for k in range(count):
                self.reading = ints[i + 3 + count + k]
                self._end_step(ints[i + 3 + k], first + k, rows, perf0, wall0, timed=False)
        elif code == LOADER_READING:
            self.reading = ints[i + 1]
        elif code == STEP_END:
            self._end_step(ints[i + 1], ints[i + 2], rows, perf0, wall0)
        elif code == FORWARD_EVAL or code == FORWARD_EVAL_GRAD:
            self._enter(FORWARD, ints[i + 1])
            self.eval_forwards += 1
            self.eval_grad_forwards += code == FORWARD_EVAL_GRAD
            # fine-tuning in eval mode (frozen batch norm) still trains on its batches
            self.samples += self.batch_samples if code == FORWARD_EVAL_GRAD else 0
            self.batch_samples = 0
        elif code == LEAVE_AS:
            self._leave(ints[i + 1], ints[i + 2])
        elif code == SAMPLES:
            self.samples += ints[i + 1]
        elif code == H2D_COPY:
            self.h2d_bytes += ints[i + 1]
            self.h2d_pageable_bytes += ints[i + 2]
        elif code == MEMORY:
            self.memory = (ints[i + 1], ints[i + 2], ints[i + 3])
        elif code == GAP_IS_DATA:
            self._gap_is_data(ints[i + 1])
        elif code == RESUMED:
            if self.mark is not None and not self.stack:
                self.acc[IDLE] += ints[i + 1] - self.mark
                self.mark = ints[i + 1]
        elif code == COMM_OVERLAP:
            self.comm_overlapped += max(ints[i + 1], 0)
        elif code == TOKENS:
            self.tokens = (self.tokens or 0) + ints[i + 1]
            if ints[i + 2] >= 0 and (self.tokens_nonpad is not None or self.tokens == ints[i + 1]):
                self.tokens_nonpad = (self.tokens_nonpad or 0) + ints[i + 2]
            else:  # a forward whose mask was not read: the step's count is not known
                self.tokens_nonpad = None
        elif code == COMM_TAIL:
            # self.mark is the end of the backward just closed.
            wait = min(self.mark - ints[i + 1], self.acc[BACKWARD]) if self.mark is not None else 0
            if wait > 0:
                self.acc[BACKWARD] -= wait
                self.acc[COMM] += wait

    def _gap_is_data(self, t: int) -> None:
        """Where an untimed gap goes: a step with no DataLoader batch spent the time before
        its first forward making its batch (nanoGPT's ``get_batch``): ``data_wait``, but for
        what the probe saw it spend otherwise (a ``time.sleep``: ``other``)."""
        acc = self.acc
        if acc[DATA_WAIT] == 0 and self.phase == OTHER and not self.stack:
            self._charge(t)
            acc[DATA_WAIT], acc[OTHER] = acc[OTHER] - self.named_other, self.named_other

    def _end_step(self, t: int, step: int, rows: list, perf0: int, wall0: float, timed: bool = True) -> None:
        self._charge(t)
        self.samples += self.batch_samples
        delivered = self._readings.step_samples(self.reading)
        self.reading = -1
        if self.phase == IDLE:
            self.phase = OTHER
        acc = self.acc
        if self._next_step is not None and step > self._next_step:
            self.dropped += step - self._next_step
        if self.complete:
            head = (self.rank, step, wall0 + (t - perf0) * NS, (t - self.step_start - acc[IDLE]) * NS)
            if timed:
                samples = self.samples if delivered is None else delivered
                self._untimed_samples.timed(step, samples)
                if self.tokens is None and self.tokens_per_sample:
                    self.tokens = samples * self.tokens_per_sample
                rows.append(StepRow(*head, *(v * NS for v in acc[:IDLE]), samples, *self.memory, self.h2d_bytes,
                                    self.h2d_pageable_bytes, self.sync_calls, self.eval_forwards,
                                    self.eval_grad_forwards, self.micro_batches, 1, self.comm_overlapped * NS,
                                    self.comm_in_forward * NS, self.tokens, self.tokens_nonpad))
            else:
                samples = self._untimed_samples.untimed(step) if delivered is None else delivered
                rows.append(StepRow(*head, *UNTIMED_PHASES, samples, *UNTIMED_COUNTS, 0))
        else:
            self.dropped += 1
        self.complete = True
        self._next_step = step + 1
        self.step_start = t
        self._reset_step()
