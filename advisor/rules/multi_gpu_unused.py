"""multi_gpu.unused: several GPUs are visible and the run uses one.

What it detects: more than one GPU on the machine, this run on one of them, no
DataParallel/DDP, and a single rank.
Why it matters: the other GPUs sit idle; data-parallel training scales near-linearly.
How to fix: DistributedDataParallel with one process per GPU:
``fastmon run --nproc-per-node N train.py``.
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "multi_gpu.unused"


def check(window, facts):
    count = facts.environment.get("device_count", 0)
    if count < 2 or facts.ranks > 1 or facts.gpus_used() > 1:
        return None
    if any(m.get("wrapper") for m in facts.models):
        return None
    return Advice(
        ID, f"{count - 1} of {count} GPUs are idle",
        f"{count} GPUs visible, this run uses 1", round(float(count), 2), CODE_CHANGE,
        fix=f"wrap the model in DistributedDataParallel and run\n"
            f"fastmon run --nproc-per-node {count} {facts.values.get('script', 'train.py')} ...",
        why="data-parallel training over N GPUs gives close to N times the samples/s",
        confidence="medium",
    )
