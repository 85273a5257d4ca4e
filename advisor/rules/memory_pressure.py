"""memory.pressure: the allocator's peak is near the GPU's capacity.

What it detects: ``torch.cuda.max_memory_allocated`` above a share of the device memory.
Why it matters: near the limit the caching allocator fragments and retries, steps slow
down, and the next larger batch or sequence runs out of memory.
How to fix: mixed precision (halves activations), gradient accumulation (smaller micro
batches), or activation checkpointing (``torch.utils.checkpoint``).
"""

from fastmon.advisor.types import CODE_CHANGE, Advice

ID = "memory.pressure"
MAX_PEAK_FRACTION = 0.9


def check(window, facts):
    total = facts.device.get("total_memory") or 0
    if not facts.accelerator or not total or window.mem_peak / total < MAX_PEAK_FRACTION:
        return None
    return Advice(
        ID, "GPU memory is nearly full",
        f"allocator peak {window.mem_peak / 2**30:.1f} GiB of {total / 2**30:.1f} GiB "
        f"({window.mem_peak / total:.0%})",
        None, CODE_CHANGE,
        fix="torch.autocast(...) / gradient accumulation / torch.utils.checkpoint.checkpoint(block, x)",
        why="near capacity the allocator fragments and retries; the next bigger batch fails",
    )
