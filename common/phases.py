"""Phase names and the step row, shared by the probe, the monitor and the advisor (no
imports of fastmon's)."""

from typing import NamedTuple

# comm: time in torch.distributed collectives; always 0 in a single-process run.
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer", "sync", "comm", "other")
DATA_WAIT, H2D, FORWARD, BACKWARD, OPTIMIZER, SYNC, COMM, OTHER = range(len(PHASES))

PHASE_LABELS = {"data_wait": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd", "optimizer": "opt",
                "sync": "sync", "comm": "comm", "other": "other"}

# One step row, as the monitor assembles it from the probe's event log and stores it. Times are seconds.
# ``timed`` 0: the probe timed only the step's end (fastmon.probe.sampling), so the phases and
# the per-step counts after ``samples`` are None, and ``samples`` is told by the timed steps
# (fastmon.common.untimed_samples).
# ``comm`` is the collectives' time the step waited for (exposed); ``comm_overlapped`` the time
# collectives it issued without waiting ran under its other phases (not part of the wall);
# ``comm_in_forward`` the part of ``comm`` inside the forward (FSDP's all-gathers there).
# ``tokens``: the elements of the integer ids its training forwards fed a model with an
# ``nn.Embedding``; ``tokens_nonpad`` those an attention mask kept (None: no mask, or one
# on the device, which is not read: a sum there would synchronize). None where not counted.
STEP_FIELDS = (
    "rank", "step", "t_end", "wall", *PHASES,
    "samples", "mem_alloc", "mem_reserved", "mem_peak",
    "h2d_bytes", "h2d_pageable_bytes", "sync_calls", "eval_forwards", "eval_grad_forwards",
    "micro_batches", "timed", "comm_overlapped", "comm_in_forward", "tokens", "tokens_nonpad",
)
COLUMN = {name: i for i, name in enumerate(STEP_FIELDS)}  # a step row's field -> its position


class StepRow(NamedTuple):
    """One step of one rank, as recorded (a row of the run file's ``steps`` table)."""

    rank: int
    step: int
    t_end: float
    wall: float
    data_wait: float | None
    h2d: float | None
    forward: float | None
    backward: float | None
    optimizer: float | None
    sync: float | None
    comm: float | None
    other: float | None
    samples: int
    mem_alloc: int | None
    mem_reserved: int | None
    mem_peak: int | None
    h2d_bytes: int | None
    h2d_pageable_bytes: int | None
    sync_calls: int | None
    eval_forwards: int | None
    eval_grad_forwards: int | None
    micro_batches: int | None
    timed: int
    comm_overlapped: float | None = None
    comm_in_forward: float | None = None
    tokens: int | None = None
    tokens_nonpad: int | None = None


assert StepRow._fields == STEP_FIELDS
