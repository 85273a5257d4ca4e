"""sharded.forward_gather: a sharded model's forward waits for its parameters' all-gathers.

What it detects: under FSDP (FSDP2's ``fully_shard`` or FSDP1), on a GPU, the step waits
in collectives inside the forward (the all-gathers of each unit's parameters) for a
share of the step.
Why it matters: FSDP all-gathers the next unit while the current one computes; an
all-gather the forward still waits for is time the GPUs compute nothing. Prefetching
further ahead starts it sooner, and the last units, needed again first by the backward,
need not be freed and gathered again.
How to fix: FSDP2: ``fully_shard(block, reshard_after_forward=False)`` for the last block
or two (memory allowing), and ``block.set_modules_to_forward_prefetch([next blocks])``;
FSDP1: ``FullyShardedDataParallel(..., forward_prefetch=True, limit_all_gathers=True)``.
"""

from fastmon.advisor.types import CODE_CHANGE, Advice, amdahl

ID = "sharded.forward_gather"
MIN_SHARE = 0.10  # of the step waiting for all-gathers inside the forward


def sharded_model(facts) -> dict | None:
    """The model fact of a sharded model (FSDP2 or FSDP1), or None."""
    return next((m for m in facts.models if m.get("sharding")), None)


def check(window, facts):
    model = sharded_model(facts)
    share = window.comm_in_forward_share
    # on a CPU (gloo) FSDP's collectives block the host: no prefetch can hide them
    if model is None or not facts.accelerator or share < MIN_SHARE:
        return None
    kind = model["sharding"]["kind"]
    fix = ("fully_shard(model.layers[-1], reshard_after_forward=False)  # the last block stays gathered for "
           "backward\nfor block, after in zip(model.layers, model.layers[1:]):\n"
           "    block.set_modules_to_forward_prefetch([after])") if kind == "FSDP2" else \
        "FullyShardedDataParallel(model, ..., forward_prefetch=True, limit_all_gathers=True)"
    return Advice(
        ID, "Prefetch the forward's all-gathers",
        f"{kind}: the forward waits {share:.0%} of the step in all-gathers "
        f"({window.comm_in_forward / max(window.steps, 1) * 1e3:.1f} ms a step)",
        amdahl(share), CODE_CHANGE, fix=fix,
        why="an all-gather the forward waits for leaves the GPU idle; issued sooner, it runs under compute",
    )
