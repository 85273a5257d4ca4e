"""sharded.backward_reduce: a sharded model's backward waits for its gradients' collectives.

What it detects: under FSDP, on a GPU, the step waits in collectives outside the forward
(the backward's reduce-scatters of each unit's gradients, and its all-gathers) for a share
of the step.
Why it matters: each unit's reduce-scatter should run under the next unit's backward; many
small units issue many small collectives, each paying its latency, and under gradient
accumulation every micro-batch reduces gradients that the next one adds to.
How to fix: fewer, larger units (``fully_shard`` groups of blocks, not single layers);
under gradient accumulation ``model.set_requires_gradient_sync(False)`` on all but the last
micro-batch (FSDP1: ``with model.no_sync():``); FSDP1: ``backward_prefetch=BACKWARD_PRE``.
"""

from fastmon.advisor.rules.sharded_forward_gather import sharded_model
from fastmon.advisor.types import CODE_CHANGE, Advice, amdahl

ID = "sharded.backward_reduce"
MIN_SHARE = 0.10  # of the step waiting for the backward's collectives


def check(window, facts):
    model = sharded_model(facts)
    share = window.share("comm") - window.comm_in_forward_share
    if model is None or not facts.accelerator or share < MIN_SHARE:
        return None
    sharding = model["sharding"]
    accumulating = window.micro_batches > window.timed_steps > 0
    if sharding["kind"] == "FSDP2":
        fix = ("model.set_requires_gradient_sync(False)  # every micro-batch but the last\n" if accumulating else "") \
            + "fully_shard(group_of_blocks)  # fewer, larger units: fewer reduce-scatters"
    else:
        fix = ("with model.no_sync():  # every micro-batch but the last\n" if accumulating else "") \
            + "FullyShardedDataParallel(model, ..., backward_prefetch=BackwardPrefetch.BACKWARD_PRE)"
    return Advice(
        ID, "Hide the backward's reduce-scatters",
        f"{sharding['kind']} over {sharding['units']} units: the step waits {share:.0%} in collectives outside "
        "the forward (its gradients' reduce-scatters" + (", and the backward's all-gathers of units resharded after "
                                                          "forward" if sharding.get("reshard_after_forward") else "")
        + ")" + (", under gradient accumulation" if accumulating else ""),
        amdahl(share), CODE_CHANGE, fix=fix,
        why="each reduce-scatter should run under the next unit's backward; small ones pay their latency each",
    )
