"""sharded.mixed_precision: a sharded model trains in float32 without a mixed-precision policy.

What it detects: FSDP on a GPU whose parameters are float32, with no ``MixedPrecisionPolicy``
(FSDP1: ``MixedPrecision``) and no autocast.
Why it matters: FSDP all-gathers the parameters in their dtype and reduce-scatters the
gradients in it: in float32 every collective moves twice the bytes of bfloat16, and the
matmuls run at the tensor cores' float32 rate.
How to fix: ``fully_shard(module, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16,
reduce_dtype=torch.float32))`` (FSDP1: ``mixed_precision=MixedPrecision(param_dtype=...)``);
it changes the maths: check the loss curve.
"""

from fastmon.advisor.rules.sharded_forward_gather import sharded_model
from fastmon.advisor.types import CODE_CHANGE, Advice, amdahl

ID = "sharded.mixed_precision"
BYTES_SAVED = 2  # float32 to bfloat16: each collective moves half the bytes


def check(window, facts):
    model = sharded_model(facts)
    if model is None or not facts.accelerator or facts.autocast:
        return None
    sharding = model["sharding"]
    if sharding.get("param_dtype") or "float32" not in model.get("dtypes", []):
        return None
    comm = window.share("comm")
    fix = ("fully_shard(block, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
           "reduce_dtype=torch.float32))") if sharding["kind"] == "FSDP2" else \
        "FullyShardedDataParallel(model, ..., mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))"
    return Advice(
        ID, "Shard in bfloat16: a mixed-precision policy",
        f"{sharding['kind']} gathers and reduces float32 parameters and gradients, no mixed-precision policy and "
        f"no autocast; collectives wait {comm:.0%} of the step",
        amdahl(comm, BYTES_SAVED) if comm else None, CODE_CHANGE, fix=fix,
        why="bfloat16 halves every collective's bytes and runs the matmuls on the tensor cores' fast path",
    )
