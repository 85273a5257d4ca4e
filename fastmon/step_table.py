"""One rank's steps column by column: the wall time and samples of every step, the whole
row of the timed ones. A million-step run's summary holds a list of floats, not a million rows."""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

from fastmon.advisor.window import Window
from fastmon.common.phases import StepRow



@dataclass
class SampleColumn:
    """The samples of each step: one usual value (the batch size) and the positions where
    it differs (an epoch's last batch), so a fixed-batch run's column costs nothing to read."""
    usual: int
    positions: list[int]  # ascending
    values: list[int]
    length: int

    @classmethod
    def of(cls, samples: list[int]) -> "SampleColumn":
        usual = Counter(samples).most_common(1)[0][0] if samples else 0
        other = [(p, n) for p, n in enumerate(samples) if n != usual]
        return cls(usual, [p for p, _ in other], [n for _, n in other], len(samples))

    def __getitem__(self, position: int) -> int:
        i = bisect.bisect_left(self.positions, position)
        return self.values[i] if i < len(self.positions) and self.positions[i] == position else self.usual

    def total(self, start: int = 0, stop: int | None = None) -> int:
        stop = self.length if stop is None else stop
        if stop <= start:
            return 0
        a, b = bisect.bisect_left(self.positions, start), bisect.bisect_left(self.positions, stop)
        return self.usual * (stop - start - (b - a)) + sum(self.values[a:b])


@dataclass
class StepTable:
    steps: range | list[int]  # a range where no step is missing
    walls: list[float]
    samples: SampleColumn
    timed: dict[int, StepRow]  # position -> the step's whole row
    # windows made so far, by their steps: the summary and the advice read the same steady run
    _windows: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_rows(cls, rows) -> "StepTable":
        rows = list(rows)
        return cls([r.step for r in rows], [r.wall for r in rows],
                   SampleColumn.of([r.samples or 0 for r in rows]),
                   {i: r for i, r in enumerate(rows) if r.timed})

    @classmethod
    def empty(cls) -> "StepTable":
        return cls.from_rows([])

    @classmethod
    def read(cls, record, rank: int) -> "StepTable":
        steps, walls, (usual, other), timed = record.step_columns(rank)
        table = cls(steps, walls, SampleColumn(usual, [], [], len(walls)), {})
        positions = [table.position(s) for s, _ in other]
        table.samples = SampleColumn(usual, positions, [n for _, n in other], len(walls))
        table.timed = {table.position(r.step): r for r in timed}
        return table

    def __len__(self) -> int:
        return len(self.walls)

    def position(self, step: int) -> int:
        """Where ``step`` is, or would be."""
        return bisect.bisect_left(self.steps, step)

    def has(self, step: int) -> bool:
        p = self.position(step)
        return p < len(self) and self.steps[p] == step

    def row(self, position: int) -> StepRow | None:
        """The whole row of a timed step."""
        return self.timed.get(position)

    def window(self, start: int = 0, stop: int | None = None, left_out=frozenset()) -> Window:
        """The steps from position ``start`` to ``stop``, without the steps in ``left_out``
        (made once for each: a table is read whole, and does not change)."""
        stop = len(self) if stop is None else stop
        key = (start, stop, frozenset(left_out))
        if key not in self._windows:
            self._windows[key] = self._window(start, stop, key[2])
        return self._windows[key]

    def _window(self, start: int, stop: int, left_out: frozenset) -> Window:
        dropped = sorted(p for p in (self.position(s) for s in left_out)
                         if start <= p < stop and self.steps[p] in left_out)
        walls, samples = self.walls[start:stop], self.samples.total(start, stop)
        for p in reversed(dropped):
            del walls[p - start]
            samples -= self.samples[p]
        timed = {}
        for p, row in self.timed.items():
            if start <= p < stop and (not dropped or self.steps[p] not in left_out):
                timed[p - start - bisect.bisect_left(dropped, p)] = row
        if not walls:
            return Window.from_columns([], 0, {}, 0, 0)
        gone = set(dropped)
        first = next(p for p in range(start, stop) if p not in gone)
        last = next(p for p in range(stop - 1, start - 1, -1) if p not in gone)
        return Window.from_columns(walls, samples, timed, self.steps[first], self.steps[last])
