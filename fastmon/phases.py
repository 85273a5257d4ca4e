"""Phase names shared by the probe, the monitor and the advisor (no imports)."""

# comm: time in torch.distributed collectives; always 0 in a single-process run.
PHASES = ("data_wait", "h2d", "forward", "backward", "optimizer", "sync", "comm", "other")
DATA_WAIT, H2D, FORWARD, BACKWARD, OPTIMIZER, SYNC, COMM, OTHER = range(len(PHASES))

PHASE_LABELS = {"data_wait": "data", "h2d": "h2d", "forward": "fwd", "backward": "bwd", "optimizer": "opt",
                "sync": "sync", "comm": "comm", "other": "other"}

# One step row, as the monitor assembles it from the probe's event log and stores it. Times are seconds.
# ``timed`` 0: the probe timed only the step's end (fastmon.probe.sampling), so the phases and
# the per-step counts after ``samples`` are None, and ``samples`` is told by the timed steps
# (fastmon.untimed_samples).
STEP_FIELDS = (
    "rank", "step", "t_end", "wall", *PHASES,
    "samples", "mem_alloc", "mem_reserved", "mem_peak",
    "h2d_bytes", "h2d_pageable_bytes", "sync_calls", "eval_forwards", "eval_grad_forwards",
    "micro_batches", "timed",
)
COLUMN = {name: i for i, name in enumerate(STEP_FIELDS)}  # a step row's field -> its position
