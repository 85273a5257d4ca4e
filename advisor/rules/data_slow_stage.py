"""data.slow_stage: one stage of making a sample takes most of its time, while the steps
wait for data.

What it detects: the run is data-bound (``DATA_BOUND_SHARE`` of the step waits for the next
batch) and one named stage of the data pipeline (a transform of the dataset's ``Compose``,
or the ``collate_fn``; ``fastmon.pipeline``) is at least ``MIN_STAGE_SHARE`` of a sample's
time in the loader and costs a step (its workers sharing it) ``MIN_OF_WAIT`` of the wait.
Why it matters: more workers only divide that stage's cost among cores; the stage itself
is what each sample pays.
How to fix, by what the stage does: one that computes runs after the copy to the GPU,
batched (or cached, where it does not change between epochs, or on smaller inputs); one
that waits (a read) gets reads ahead (``prefetch_factor``), more workers than cores, or a
local copy of its data; a slow ``collate_fn`` stacks whole tensors.
"""

from fastmon.advisor.bound import DATA_BOUND_SHARE
from fastmon.advisor.types import CODE_CHANGE, Advice, amdahl

ID = "data.slow_stage"
MIN_STAGE_SHARE = 0.4  # of a sample's time in the loader (wall), for one stage
MIN_OF_WAIT = 0.3  # what the stage costs a step, at least this share of the step's wait for data
NAMED = ("collate_fn",)  # stages that are not a transform but have a remedy of their own


def check(window, facts):
    data, recurring = window.share("data_wait"), window.recurring_data_wait
    table = facts.values.get("pipeline_stages") or {}
    stages = table.get("stages") or []
    total = sum(stage["wall_ms"] for stage in stages)
    if data < DATA_BOUND_SHARE or (recurring is not None and recurring < DATA_BOUND_SHARE) or total <= 0:
        return None
    slowest = stages[0]
    share = slowest["wall_ms"] / total
    named = slowest["name"] in NAMED or not slowest["name"].startswith(("the rest of", "__getitem__", "items "))
    if share < MIN_STAGE_SHARE or not named or not window.steps:
        return None
    # what the stage costs a step (its workers share it) against the step's wait: a stage
    # of microseconds is most of nothing
    cost = slowest["wall_ms"] / 1e3 * window.samples / window.steps / max(1, table.get("workers") or 0)
    if cost < MIN_OF_WAIT * data * window.wall / window.steps:
        return None
    at = f" ({slowest['where']})" if slowest.get("where") else ""
    if slowest["name"] == "collate_fn":
        fix = "a collate_fn that stacks whole tensors (torch.utils.data.default_collate), no Python per element"
    elif slowest["waiting"]:
        fix = ("it waits, it does not compute: read ahead (DataLoader(..., prefetch_factor=4)), more workers than "
               "cores, or a local copy of what it reads")
    else:
        fix = (f"run {slowest['name']} after the copy to the GPU, on the whole batch; or cache its result where it "
               "does not change between epochs; or give it smaller inputs (decode or resize first)")
    return Advice(
        ID, f"Make {slowest['name']} cheaper: {share:.0%} of a sample's time in the loader",
        f"{slowest['name']}{at} takes {slowest['cpu_ms']:.2f} ms CPU / {slowest['wall_ms']:.2f} ms of a sample's "
        f"{total:.2f} ms; {data:.0%} of the step waits for data",
        round(amdahl(data * share), 2), CODE_CHANGE, fix=fix,
        why="more workers divide a stage's cost among cores; the stage itself is what each sample pays",
        location=slowest.get("where"),
    )
