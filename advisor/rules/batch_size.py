"""batch_size: the GPU is under-used and each step is mostly fixed overhead.

What it detects: accelerator training with most memory free and the step's time not in
data loading, where the GPU is idle much of the step (low utilization: per-step overhead,
Python and launches, that a larger batch would amortise) or, on a GPU with GPM, busy but
with most of its SMs idle (kernels too small to fill the chip).
Why it matters: a larger batch does more samples per unit of that fixed cost, and puts
more work in each kernel.
How to fix: raise the batch size (x2 while it fits), scaling the learning rate with it:
linearly for SGD, by sqrt for Adam-family optimizers, schedulers' ``base_lrs`` too. It
changes the optimisation, so fastmon applies it (trying the bigger batch between steps
first, so an out-of-memory never reaches the training loop) only on the user's accept:
``a`` in the dashboard, or ``--allow-batch-change`` with ``--apply auto``.
"""

from fastmon.advisor.bound import LAUNCH_BOUND_BUSY, UNDERFILLED_SM_ACTIVE
from fastmon.advisor.knobs import PLAIN, batch_setting, framework
from fastmon.advisor.types import CODE_CHANGE, HOT_APPLY, KEYWORDS, Advice, Apply, Permanent

ID = "batch_size"
MAX_GPU_UTIL = 50.0
MAX_MEMORY_FRACTION = 0.5
MAX_DATA_WAIT_SHARE = 0.2
MIN_STEPS = 20
BATCH_FACTOR = 2


def check(window, facts):
    if not facts.accelerator or window.steps < MIN_STEPS or window.share("data_wait") > MAX_DATA_WAIT_SHARE:
        return None
    util, sm_active = facts.gpu_mean("util"), facts.gpu_mean("sm_active")
    total = facts.device.get("total_memory") or 0
    if util is None or not total:
        return None
    # as the verdict reads it: busy enough not to be launch-bound, its SMs mostly idle
    underfilled = util >= LAUNCH_BOUND_BUSY and sm_active is not None and sm_active < UNDERFILLED_SM_ACTIVE
    if util > MAX_GPU_UTIL and not underfilled:
        return None
    memory_fraction = window.mem_peak / total
    if memory_fraction > MAX_MEMORY_FRACTION:
        return None
    loader = facts.training_loader() or {}
    # The loader's, or what the steps took (a batch sampler of its own, batches from a function)
    batch = loader.get("batch_size") or (round(window.samples / window.steps) if window.steps else None)
    optimizer = (facts.optimizers or [{}])[0].get("class", "")
    rule = "sqrt" if "Adam" in optimizer else "linear"
    lr_scale = round(BATCH_FACTOR ** 0.5, 4) if rule == "sqrt" else float(BATCH_FACTOR)
    return Advice(
        ID, "Use a larger batch: " + ("its kernels leave most SMs idle" if underfilled else "the GPU is mostly idle"),
        f"the GPU is busy {util:.0f}% of the steps' time"
        + (f", its SMs active {sm_active:.0f}%" if sm_active is not None else "")
        + f", peak memory {memory_fraction:.0%} of {total / 2**30:.0f} GiB" + (f", batch {batch}" if batch else ""),
        None, HOT_APPLY if loader else CODE_CHANGE,  # without a DataLoader, no batch fastmon can change
        fix=f"{batch_setting(facts, batch, BATCH_FACTOR)} and the LR x{lr_scale:g} ({rule} rule), schedulers' "
            f"base_lrs too",
        why="a larger batch puts more work in each kernel: more of the SMs busy at once" if underfilled
        else "per-step overhead is paid per batch: a larger batch spreads it over more samples",
        location=loader.get("location"), confidence="medium",
        apply=Apply("batch_size", {"factor": BATCH_FACTOR, "lr_scale": lr_scale}, changes_maths=True) if loader
        else None,
    )


def permanent(params: dict, facts) -> Permanent:
    """The code that keeps this change after fastmon (the report's "make it permanent")."""
    batch = (facts.training_loader() or {}).get("batch_size")
    factor = params.get("factor", 2)
    note = f"and learning rates x{params.get('lr_scale', 1):g} (schedulers' too)"
    if batch and framework(facts) == PLAIN:
        return Permanent(batch_setting(facts, batch, factor), KEYWORDS, {"batch_size": int(batch * factor)},
                         ("DataLoader",), note)
    return Permanent(batch_setting(facts, batch, factor), note=note)
