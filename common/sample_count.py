"""What a step's samples are: the rule, in one place.

A step's samples are what the training took from its loader during it. The probe reads,
at every step's end (timed or not), how many batches the training took of the training
loader's live iterator: torch's own count, ``_num_yielded``, less the batches a loop
fetches ahead of the one it trains on (accelerate's, Lightning's, timm's loaders, to
know the last) until the iterator is used up (``fastmon.probe.clock.TakenCount``), tagged
with the loader and its epoch. The loader's fact says its batch size and the samples in
an epoch, so the first k batches of an epoch hold min(k x batch size, epoch samples). A
step's samples are the difference between its reading and the one before, and a
validation loader is never the training's (its iterator is not read). The training loader is the one whose batch a training forward
took; one iterated with autograd off (``no_grad``, ``inference_mode``) never is.

Where the readings cannot tell (no training loader known yet, an IterableDataset, a batch
sampler of unknown sizes, batches from a function), the event log's own count stands
(``fastmon.common.step_events``: the batch a training forward takes), with the untimed steps'
taken from their timed neighbours (``fastmon.common.untimed_samples``). Imports nothing.
"""

from __future__ import annotations

from typing import Callable

BATCH_BITS, EPOCH_BITS = 32, 16
# Set where the count is of samples, not batches: an epoch whose batch size fastmon changed
# live has batches of two sizes, and the probe counts their samples itself.
SAMPLES_FLAG = 1 << 62

# (loader index, batches delivered) -> samples in those first batches of an epoch, or None
SamplesOf = Callable[[int, int], "int | None"]


def reading_base(loader_index: int, epoch: int, samples: bool = False) -> int:
    base = ((loader_index << EPOCH_BITS) | (epoch & ((1 << EPOCH_BITS) - 1))) << BATCH_BITS
    return base | SAMPLES_FLAG if samples else base


def split_reading(reading: int) -> tuple[int, int, int]:
    """(loader index, epoch, batches, or samples where SAMPLES_FLAG is set, delivered in that epoch)."""
    rest = reading & (SAMPLES_FLAG - 1)
    return (rest >> (BATCH_BITS + EPOCH_BITS), (rest >> BATCH_BITS) & ((1 << EPOCH_BITS) - 1),
            rest & ((1 << BATCH_BITS) - 1))


def samples_in_first(batches: int, batch_size: int | None, epoch_samples: int | None) -> int | None:
    if not batch_size or epoch_samples is None:
        return None
    return min(batches * batch_size, epoch_samples)


class LoaderReadings:
    """One rank's step samples from its successive loader readings."""

    def __init__(self, samples_of: SamplesOf | None) -> None:
        self.samples_of = samples_of
        self.last: tuple[int, int, int] | None = None  # the last reading, split
        self.counted = 0  # samples given to steps in the last reading's epoch
        self.steps_without = 0  # steps ended before the first reading

    def step_samples(self, reading: int) -> int | None:
        """Samples delivered since the previous step's reading; None: the readings cannot tell."""
        if reading < 0 or self.samples_of is None:
            if self.last is None:
                self.steps_without += 1
            return None
        loader, epoch, count = now = split_reading(reading)
        last, self.last = self.last, now
        # fewer delivered than last time under the same tag: a new iterator (a loader built
        # anew each epoch by a wrapper, taking a freed loader's place), its count from 0
        same_epoch = last is not None and last[:2] == (loader, epoch) and count >= last[2]
        if last is None and self.steps_without:
            return None  # the loader became known mid-run: its earlier batches were counted already
        if not same_epoch:
            self.counted = 0  # a new epoch (or loader): its batches so far are this step's
        if reading & SAMPLES_FLAG:
            samples = count - self.counted
        else:
            after = self.samples_of(loader, count)
            before = self.samples_of(loader, last[2] if same_epoch else 0)
            if after is None or before is None:
                return None
            samples = after - before
        if samples < 0:  # never a negative count: the event log's own count stands
            return None
        self.counted += samples
        return samples
