"""sharded.activation_checkpointing: activation checkpointing that the GPU's memory does
not call for, or memory nearly full without it.

What it detects: a sharded model on a GPU whose allocator peak stays under half of the
device while activation checkpointing is on; or a peak above 85% with it off.
Why it matters: checkpointing recomputes each checkpointed block's forward in the backward
(about a third more compute) to save activation memory; with memory to spare that is time
lost, and near the limit it is what makes room for a larger batch.
How to fix: checkpoint fewer blocks (every other one), or none; near the limit,
``torch.distributed.algorithms._checkpoint.checkpoint_wrapper.apply_activation_checkpointing``
(transformers: ``model.gradient_checkpointing_enable()``).
"""

from fastmon.advisor.rules.sharded_forward_gather import sharded_model
from fastmon.advisor.types import CODE_CHANGE, Advice, amdahl

ID = "sharded.activation_checkpointing"
SPARE_BELOW = 0.5  # of the GPU's memory at the allocator's peak: checkpointing costs for nothing
TIGHT_ABOVE = 0.85  # ... near the limit without it
RECOMPUTE = 1 / 3  # checkpointing's extra compute, as a share of forward + backward (one forward more)


def check(window, facts):
    model = sharded_model(facts)
    total = facts.device.get("total_memory") or 0
    if model is None or not facts.accelerator or not total or not window.mem_peak:
        return None
    used = window.mem_peak / total
    on = model.get("activation_checkpointing")
    if on and used < SPARE_BELOW:
        compute = window.share("forward") + window.share("backward")
        return Advice(
            ID, "Checkpoint fewer blocks: memory is to spare",
            f"activation checkpointing is on while the allocator peaks at {window.mem_peak / 2**30:.1f} GiB of "
            f"{total / 2**30:.0f} GiB ({used:.0%})", amdahl(compute * RECOMPUTE / (1 + RECOMPUTE)),
            CODE_CHANGE, fix="apply checkpointing to every other block, or to none",
            why="each checkpointed block runs its forward twice; memory that is not needed buys nothing",
        )
    if not on and used > TIGHT_ABOVE:
        # what is seen: torch's CheckpointWrapper, transformers' gradient checkpointing; a
        # torch.utils.checkpoint call in the model's own forward is not
        return Advice(
            ID, "Checkpoint activations: memory is nearly full",
            f"the allocator peaks at {window.mem_peak / 2**30:.1f} GiB of {total / 2**30:.0f} GiB ({used:.0%}) "
            "and no activation checkpointing was seen (CheckpointWrapper, gradient_checkpointing_enable)", None,
            CODE_CHANGE,
            fix="apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Block))",
            why="recomputing activations frees memory for a larger batch, or against the next OOM",
        )
    return None
