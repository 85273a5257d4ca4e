"""What the monitor knows of a running training (``LiveState``, changed only by the state
owner's thread, fastmon.state_owner) and the immutable ``LiveView`` of it that the
screens, the headless status lines and the tracker log read."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from fastmon.common.phases import StepRow
from fastmon.common.run_status import RunStatus
from fastmon.summary import rates

HISTORY = 20_000  # step rows kept in memory per rank for the screens
RSS_HISTORY = 120  # host samples' RSS kept for the screens: a minute at 2 Hz
LOSS_HISTORY = 600  # training losses the script printed, kept for the screens


def training_rss(sample: dict) -> int | None:
    """The RSS of the trainer and its DataLoader workers in a host sample."""
    processes = [p for p in sample.get("processes") or () if p.get("role") in ("trainer", "worker")]
    return sum(p.get("rss") or 0 for p in processes) if processes else None


def cpu_use(sample: dict) -> tuple[float, float, float, float] | None:
    """Cores busy in a host sample: the trainer's, its DataLoader workers', the training's
    other children's (workers still starting, compile workers), and the whole machine's
    (fastmon's own and other jobs' included)."""
    per_core = sample.get("cpu_per_core")
    if not per_core:
        return None
    processes = sample.get("processes") or ()
    trainer = sum(p.get("cpu") or 0 for p in processes if p.get("role") == "trainer") / 100
    workers = sum(p.get("cpu") or 0 for p in processes if p.get("role") == "worker") / 100
    children = sum(p.get("cpu") or 0 for p in processes if p.get("role") not in ("trainer", "worker")) / 100
    return trainer, workers, children, sum(per_core) / 100


def without(rows, step_ranges) -> list[StepRow]:
    left_out = {step for steps in step_ranges for step in steps}
    return [r for r in rows if r.step not in left_out] if left_out else list(rows)


@dataclass
class RankState:
    rows: collections.deque = field(default_factory=lambda: collections.deque(maxlen=HISTORY))
    steps: int = 0
    samples: int = 0
    wall: float = 0.0
    # the start-up steps (``summary.steady_left_out``): step -> (wall, samples)
    left_out: dict = field(default_factory=dict)
    # Tokens so far (None: none counted yet): the timed steps' own, and each untimed step's
    # by the last timed step's tokens per sample (per step, where samples are unknown), so
    # the total only rises (a Prometheus counter)
    tokens: int | None = None
    _tokens_of: tuple[int, int] = (0, 0)  # the last timed step's (tokens, samples)

    def add(self, row: StepRow, start_up: bool) -> None:
        if start_up:
            self.leave_out(row)
        self.rows.append(row)
        self.steps += 1
        self.samples += row.samples
        self.wall += row.wall
        if row.tokens is not None:
            self.tokens = (self.tokens or 0) + row.tokens
            self._tokens_of = (row.tokens, row.samples)
        elif self.tokens is not None and not row.timed:
            tokens, samples = self._tokens_of
            self.tokens += round(tokens * row.samples / samples) if samples and row.samples else tokens

    def leave_out(self, row: StepRow) -> None:
        self.left_out[row.step] = (row.wall, row.samples)

    def view(self) -> RankView:
        return RankView(tuple(self.rows), self.steps, self.samples, self.wall, MappingProxyType(dict(self.left_out)),
                        self.tokens)


@dataclass(frozen=True)
class RankView:
    rows: tuple[StepRow, ...] = ()  # the last HISTORY steps, oldest first
    steps: int = 0
    samples: int = 0
    wall: float = 0.0
    left_out: Mapping[int, tuple[float, int]] = field(default_factory=lambda: MappingProxyType({}))
    tokens: int | None = None

    def steady_rates(self) -> dict:
        """The steady run's rates, as the report computes them from the record (tokens/s at
        the run's tokens per sample)."""
        if self.steps <= len(self.left_out):
            out = rates(self.steps, self.samples, self.wall)
        else:
            out = rates(self.steps - len(self.left_out), self.samples - sum(n for _, n in self.left_out.values()),
                        self.wall - sum(w for w, _ in self.left_out.values()))
        if self.tokens is not None:
            out["tokens_per_s"] = round(out["samples_per_s"] * self.tokens / self.samples, 3) if self.samples else \
                round(self.tokens / self.wall, 3) if self.wall > 0 else 0.0
        return out


@dataclass
class LiveState:
    status: RunStatus = RunStatus.STARTING
    exit_code: int | None = None
    started: float = field(default_factory=time.time)
    ended: float | None = None
    ranks: dict = field(default_factory=dict)  # rank -> RankState
    facts: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    host: dict = field(default_factory=dict)
    # the trainers' RSS in the last host sample that had them: the status line's after the
    # training exited, while the monitor records its end
    trainer_rss: int | None = None
    rss: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RSS_HISTORY))
    cpu: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RSS_HISTORY))  # (t, *cpu_use)
    losses: collections.deque = field(default_factory=lambda: collections.deque(maxlen=LOSS_HISTORY))
    gpu: collections.deque = field(default_factory=lambda: collections.deque(maxlen=600))
    advice: dict = field(default_factory=dict)  # id -> advice dict with "status"
    applied: list = field(default_factory=list)
    output: collections.deque = field(default_factory=lambda: collections.deque(maxlen=5000))
    output_seq: int = 0
    output_chars: int = 0  # the characters ``output`` holds
    dropped: int = 0
    capturing: bool = False  # a torch.profiler capture asked for or running
    # Steps that are not training as it runs: captured by torch.profiler (slower), or
    # slowed by torch.compile compiling or a FLOP count. No measurement counts them.
    captured: list = field(default_factory=list)  # [range]
    slowed: list = field(default_factory=list)  # [range], rank 0's

    def add_host_sample(self, sample: dict, gpus: list, now: float) -> None:
        self.host = sample
        trainers = [p.get("rss") or 0 for p in sample.get("processes") or () if p.get("role") == "trainer"]
        if trainers:
            self.trainer_rss = sum(trainers)
        rss = training_rss(sample)
        if rss is not None:
            self.rss.append(rss)
        cpu = cpu_use(sample)
        if cpu is not None:
            self.cpu.append((now, *cpu))
        if gpus:
            self.gpu.append((now, "gpu", gpus))  # as the record keeps it

    def measured_rows(self, rank: int = 0) -> list[StepRow]:
        """A rank's rows without the steps a torch.profiler capture slowed or that compiled."""
        return without(self.ranks[rank].rows if rank in self.ranks else (), (*self.captured, *self.slowed))

    def view(self, experiment: dict | None = None) -> LiveView:
        return LiveView(
            status=self.status, exit_code=self.exit_code, started=self.started, ended=self.ended,
            ranks=MappingProxyType({rank: rs.view() for rank, rs in self.ranks.items()}),
            facts=MappingProxyType(dict(self.facts)), events=tuple(self.events), host=MappingProxyType(dict(self.host)),
            trainer_rss=self.trainer_rss, rss=tuple(self.rss), losses=tuple(self.losses),
            gpu=tuple(self.gpu), advice=tuple(MappingProxyType(dict(a)) for a in self.advice.values()),
            applied=tuple(self.applied), output=tuple(self.output), output_seq=self.output_seq, dropped=self.dropped,
            capturing=self.capturing, captured=tuple(self.captured), slowed=tuple(self.slowed), experiment=experiment)


@dataclass(frozen=True)
class LiveView:
    """The state at one moment; nothing in it changes after it is published."""

    status: RunStatus = RunStatus.STARTING
    exit_code: int | None = None
    started: float = 0.0
    ended: float | None = None
    ranks: Mapping[int, RankView] = field(default_factory=lambda: MappingProxyType({}))
    facts: Mapping = field(default_factory=lambda: MappingProxyType({}))
    events: tuple = ()
    host: Mapping = field(default_factory=lambda: MappingProxyType({}))
    trainer_rss: int | None = None  # the trainers' RSS in the last host sample that had them
    rss: tuple = ()  # the training's RSS (trainer and workers), per host sample, oldest first
    losses: tuple = ()  # the training losses the script printed (fastmon.printed_loss), oldest first
    gpu: tuple = ()  # GPU samples, oldest first: (time, "gpu", one dict per device), as the record keeps them
    advice: tuple = ()
    applied: tuple = ()  # the experiments' results, in the order they ended
    output: tuple = ()  # the last (stream, text) chunks the script printed
    output_seq: int = 0  # chunks printed so far
    dropped: int = 0
    capturing: bool = False
    captured: tuple = ()  # ranges of steps a torch.profiler capture slowed
    slowed: tuple = ()  # ranges of rank 0's steps compiling or a FLOP count slowed
    experiment: dict | None = None  # the live change being measured (ExperimentRunner.progress)

    def rank(self, rank: int = 0) -> RankView:
        return self.ranks.get(rank) or RankView()

    @property
    def first_rank(self) -> RankView:
        return self.ranks[min(self.ranks)] if self.ranks else RankView()

    def measured_rows(self) -> list[StepRow]:
        """Rank 0's rows without the steps a torch.profiler capture slowed or that compiled."""
        return without(self.rank(0).rows, (*self.captured, *self.slowed))

    def events_of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("kind") == kind]

    def elapsed(self, now: float | None = None) -> float:
        return (self.ended or now or time.time()) - self.started
