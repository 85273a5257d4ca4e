"""What an untimed step's samples are taken to be, from the timed steps around it.

The probe counts a step's samples only in the steps it times (``fastmon.probe.sampling``),
a random sample of them; the others have only their end in the log. Most trainings take
the same batch at every step, but not all: a GAN's discriminator step takes the batch and
its generator step none, a critic trained five times per generator step repeats every
six steps. So the step's position in such a pattern is looked for: the period with which
the latest timed step at the same position predicted the timed steps' samples nearly
always, lately, and best (a period of 3 predicts a five-and-one critic's steps 5 times in
6; its 6, always). Its prediction is an untimed step's samples: for an ordinary training
the last timed step's, for a GAN's discriminator step the last timed discriminator
step's. Without one, the last timed step's: the timed steps are a random sample, so that
is right on average, and a new batch size (hot-applied, or put back) shows from its first
timed step on. (A mean of the latest would be steadier, but lags such a change.)
Imports nothing.
"""

from __future__ import annotations

from collections import deque

PERIODS = range(1, 9)  # step patterns looked for: every step alike (1), a GAN's (2), up to a critic's 7 + 1
CHECKS = 64  # timed steps over which each period's predictions are judged
MIN_CHECKS = 8  # before a period is trusted
MATCHING = 0.9  # share of those a period must have predicted (an epoch's short batch is a miss)
# A shorter period as good as the best, within two misses, is taken: the best may be a
# multiple of it (a GAN's 2 repeats every 4 too), and a shorter one's positions are timed
# more often, so its values are fresher (a new batch size shows sooner).
AS_GOOD = 2 / CHECKS


class UntimedSamples:
    def __init__(self) -> None:
        self._latest: dict[int, dict[int, int]] = {p: {} for p in PERIODS}  # period -> position -> samples
        self._hits: dict[int, deque[bool]] = {p: deque(maxlen=CHECKS) for p in PERIODS}
        self._hit_counts = dict.fromkeys(PERIODS, 0)
        self._period: int | None = None

    def timed(self, step: int, samples: int) -> None:
        """A timed step's samples."""
        for period in PERIODS:
            latest = self._latest[period]
            position = step % period
            if position in latest:
                hits = self._hits[period]
                if len(hits) == CHECKS:
                    self._hit_counts[period] -= hits[0]
                hit = latest[position] == samples
                hits.append(hit)
                self._hit_counts[period] += hit
            latest[position] = samples
        rates = {p: self._hit_counts[p] / len(self._hits[p]) for p in PERIODS if len(self._hits[p]) >= MIN_CHECKS}
        best = max(rates.values(), default=0.0)
        self._period = next((p for p, rate in rates.items() if rate >= best - AS_GOOD), None) \
            if best >= MATCHING else None

    def untimed(self, step: int) -> int:
        """An untimed step's samples, as its timed neighbours tell."""
        last_timed = self._latest[1].get(0, 0)  # period 1's one position
        if self._period is None:
            return last_timed
        return self._latest[self._period].get(step % self._period, last_timed)
