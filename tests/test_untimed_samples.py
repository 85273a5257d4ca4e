"""An untimed step's samples, told by the timed steps around it (fastmon.common.untimed_samples):
the probe times a random sample of the steps, as it does in a run."""

from __future__ import annotations

import random

from fastmon.common.untimed_samples import UntimedSamples

ALWAYS_TIMED = 50  # the probe times a run's first steps


def replay(samples_of, steps: int, seed: int = 0) -> tuple[int, int]:
    """The true total of samples, and the total told: the first steps timed, then one in ~20."""
    rng = random.Random(seed)
    told = UntimedSamples()
    total = estimated = 0
    for step in range(steps):
        samples = samples_of(step)
        total += samples
        if step < ALWAYS_TIMED or rng.random() < 0.05:
            told.timed(step, samples)
            estimated += samples
        else:
            estimated += told.untimed(step)
    return total, estimated


def test_every_step_alike_is_the_last_timed_steps_batch_from_its_first_timed_step_on():
    told = UntimedSamples()
    for step in range(60):
        told.timed(step, 32)
    assert told.untimed(61) == 32
    told.timed(62, 64)  # a bigger batch, hot-applied
    assert told.untimed(63) == 64 and told.untimed(64) == 64


def test_a_gans_steps_and_a_critics_are_counted_exactly():
    gan = lambda step: 16 if step % 2 == 0 else 0  # noqa: E731 (the discriminator's step takes the batch)
    critic = lambda step: 0 if step % 6 == 5 else 16  # noqa: E731 (five critic steps, a generator step)
    for samples_of in (gan, critic):
        for seed in range(5):
            total, estimated = replay(samples_of, 5000, seed)
            assert estimated == total


def test_an_epochs_short_last_batch_keeps_the_pattern():
    # 100 batches of 16 and one of 8 an epoch, a GAN's two steps each: the short one is a
    # miss of the period, not the end of it
    def samples_of(step):
        batch = step // 2 % 101
        return 0 if step % 2 else (8 if batch == 100 else 16)
    total, estimated = replay(samples_of, 20_000)
    assert abs(estimated - total) / total < 0.005


def test_without_a_pattern_the_last_timed_steps_which_is_right_on_average():
    rng = random.Random(1)
    nodes = [sum(rng.randint(1, 4) for _ in range(8)) for _ in range(20_000)]  # batches of 8 graphs
    told = UntimedSamples()
    for step in range(0, 300, 3):
        told.timed(step, nodes[step])
    assert told.untimed(301) == nodes[297]
    for seed in range(3):
        total, estimated = replay(lambda step: nodes[step], 20_000, seed)
        assert abs(estimated - total) / total < 0.01
