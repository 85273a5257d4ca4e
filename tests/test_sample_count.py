"""The one rule of what a step's samples are (fastmon.common.sample_count), on the readings the
probe sends: the training loader's delivered batches at each step's end."""

from __future__ import annotations

from array import array

import pytest

from conftest import SCRIPTS
from fastmon.common.phases import STEP_FIELDS
from fastmon.common.sample_count import LoaderReadings, reading_base, samples_in_first, split_reading
from fastmon.common.step_events import ENTER, FORWARD_TRAIN, LEAVE_BATCH, LOADER_READING, STEP_END, UNTIMED_STEPS, StepAssembler

MS = 1_000_000


def loader(batch_size, epoch_samples):
    return lambda index, batches: samples_in_first(batches, batch_size, epoch_samples)


def step_samples(readings: LoaderReadings, epochs: list[list[int]], loader_index: int = 0) -> list:
    out = []
    for epoch, batches in enumerate(epochs, start=1):
        out += [readings.step_samples(reading_base(loader_index, epoch) + b) for b in batches]
    return out


def test_a_loader_that_fetches_ahead_counts_each_batch_once():
    # accelerate's DataLoaderShard: the first step fetches two batches, the last none
    readings = LoaderReadings(loader(16, 64))
    assert step_samples(readings, [[2, 3, 4, 4], [2, 3, 4, 4]]) == [32, 16, 16, 0] * 2


def test_an_epochs_short_last_batch_and_a_new_epoch():
    readings = LoaderReadings(loader(16, 50))
    samples = step_samples(readings, [[1, 2, 3, 4], [1, 2, 3, 4]])
    assert samples == [16, 16, 16, 2] * 2
    assert sum(samples) == 100


def test_gradient_accumulation_and_a_gans_second_step():
    readings = LoaderReadings(loader(8, 80))
    assert step_samples(readings, [[4, 8, 10]]) == [32, 32, 16]  # four micro-batches a step; two to end
    readings = LoaderReadings(loader(8, 80))
    assert step_samples(readings, [[1, 1, 2, 2]]) == [8, 0, 8, 0]  # discriminator, then generator


def test_the_readings_step_aside_where_they_cannot_tell():
    assert LoaderReadings(loader(None, None)).step_samples(reading_base(0, 1) + 3) is None  # unknown batch size
    readings = LoaderReadings(loader(16, 64))
    assert readings.step_samples(-1) is None  # no training loader known yet
    # known only from the second step on: its earlier batches were counted the other way
    assert readings.step_samples(reading_base(0, 1) + 2) is None
    assert readings.step_samples(reading_base(0, 1) + 3) == 16


def test_a_reading_keeps_loader_epoch_and_batches_apart():
    assert split_reading(reading_base(3, 70000) + 12345) == (3, 70000 % 65536, 12345)


def test_the_assembler_gives_untimed_steps_their_own_samples():
    """A prefetching loader's epoch of 4 batches, most steps untimed: each row has what
    was delivered in it, where the timed steps' figure would have stood in for them."""
    base = reading_base(0, 1)
    events = [(ENTER, 0), (LEAVE_BATCH, 1 * MS, 16), (ENTER, 1 * MS), (LEAVE_BATCH, 2 * MS, 16),
              (FORWARD_TRAIN, 2 * MS), (LOADER_READING, base + 2), (STEP_END, 5 * MS, 0),
              (UNTIMED_STEPS, 1, 3, 8 * MS, 11 * MS, 14 * MS, base + 3, base + 4, base + 4)]
    log = array("q", [v for event in events for v in event]).tobytes()
    rows = StepAssembler(0, loader(16, 64)).feed(log, perf0=0, wall0=0.0)
    samples = [row[STEP_FIELDS.index("samples")] for row in rows]
    assert samples == [32, 16, 16, 0]
    # without the loader's shape, the untimed steps take the timed one's: 32 each
    rows = StepAssembler(0, loader(None, None)).feed(log, perf0=0, wall0=0.0)
    assert [row[STEP_FIELDS.index("samples")] for row in rows] == [32, 32, 32, 32]


def test_an_epoch_whose_batch_size_changed_is_counted_in_samples():
    # 16-sample batches for 3 steps, then fastmon doubles the batch: the probe counts the
    # epoch's samples itself (48 so far, then 32 a batch); the next epoch is in batches again
    fact = {"batch_size": 16}
    readings = LoaderReadings(lambda index, batches: samples_in_first(batches, fact["batch_size"], 100))
    epoch1, epoch2 = reading_base(0, 1), reading_base(0, 2)
    assert [readings.step_samples(epoch1 + b) for b in (1, 2, 3)] == [16, 16, 16]
    fact["batch_size"] = 32
    samples_mode = reading_base(0, 1, samples=True)
    assert [readings.step_samples(samples_mode + s) for s in (80, 100)] == [32, 20]
    assert [readings.step_samples(epoch2 + b) for b in (1, 2, 3, 4)] == [32, 32, 32, 4]


def fetched_ahead(iterator):
    """accelerate's DataLoaderShard's shape: the next batch is fetched before this one is given."""
    current = next(iterator)
    for following in iterator:
        yield current
        current = following
    yield current


@pytest.mark.parametrize("workers", [0, 1])
def test_the_batches_taken_of_a_loader_fetched_one_ahead_are_counted_to_its_end(workers):
    from torch.utils.data import DataLoader

    from fastmon.probe.clock import TakenCount
    from fastmon.probe.loader_hooks import tells_used_up, used_up

    it = iter(DataLoader(range(10), batch_size=2, num_workers=workers))
    assert tells_used_up(it)
    taken = TakenCount(it, 1, used_up)
    readings = [taken._num_yielded for _ in fetched_ahead(it)]  # read as each step ends
    assert readings == [1, 2, 3, 4, 5]  # torch's own count: 2, 3, 4, 5, 5


def test_a_dropped_iterator_counts_all_at_its_end_and_not_the_batch_ahead_before_it():
    from torch.utils.data import DataLoader

    from fastmon.probe.clock import TakenCount
    from fastmon.probe.loader_hooks import used_up

    at_end = iter(DataLoader(range(10), batch_size=2))
    taken = TakenCount(at_end, 1, used_up, total=5)
    for _ in range(5):
        next(at_end)
    assert taken._num_yielded == 4
    del at_end  # timm's wrapper drops it at its StopIteration, then yields the last batch
    assert taken._num_yielded == 5
    broken_off = iter(DataLoader(range(10), batch_size=2))
    taken = TakenCount(broken_off, 1, used_up, total=5)
    next(broken_off), next(broken_off)
    assert taken._num_yielded == 1
    del broken_off  # a loop that broke off: the batch it fetched ahead was never trained on
    assert taken._num_yielded == 1


def test_a_persistent_workers_iterator_s_end_is_watched_once_all_is_delivered():
    from torch.utils.data import DataLoader

    from fastmon.probe.clock import TakenCount
    from fastmon.probe.loader_hooks import tells_used_up, used_up

    loader = DataLoader(range(10), batch_size=2, num_workers=1, persistent_workers=True)
    it = iter(loader)
    assert not tells_used_up(it)  # it looks the same just before its end and just after
    watched = []
    taken = TakenCount(it, 1, used_up, total=len(it), at_last=watched.append)
    readings = [taken._num_yielded for _ in fetched_ahead(it)]
    assert readings == [1, 2, 3, 4, 4] and watched == [it]  # the wrapper tells the rest
    del it, loader


def test_a_new_loader_under_a_freed_ones_tag_counts_from_its_first_batch_never_below_zero():
    # a wrapper that builds a DataLoader each epoch: the new one took the freed one's tag,
    # and its first batch read 32 - 1024 = -992 samples; the record could not be read back
    readings = LoaderReadings(loader(32, 1024))
    first = [readings.step_samples(reading_base(2, 0) + b) for b in range(1, 33)]
    again = [readings.step_samples(reading_base(2, 0) + b) for b in range(1, 33)]
    assert first == again == [32] * 32


@pytest.mark.e2e
@pytest.mark.parametrize("every_step", [False, True])
def test_a_wrapper_that_rebuilds_its_loader_each_epoch_is_counted_and_its_record_read(run_fastmon, report,
                                                                                       every_step):
    out = run_fastmon("run", "--headless", *(["--every-step"] if every_step else []), SCRIPTS / "wrapped_loader.py")
    assert out.returncode == 0 and "steps 256 samples 8192" in out.stdout, out.stderr[-2000:]
    assert "no summary" not in out.stderr
    summary = report()
    assert (summary["steps"], summary["samples"]) == (256, 8192)
