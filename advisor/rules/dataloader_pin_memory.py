"""dataloader.pin_memory: batches are copied to the GPU from pageable memory.

What it detects: accelerator training whose host-to-device copies come mostly from
pageable (unpinned) memory and take a visible share of the step.
Why it matters: a pageable copy is staged through a pinned buffer by the driver and
blocks the host; from pinned memory the copy is a direct DMA that can overlap compute.
How to fix: ``DataLoader(..., pin_memory=True)`` and ``x.to(device, non_blocking=True)``.
fastmon turns pinning on live; the non_blocking part is a code change.
"""

from fastmon.advisor.knobs import loader_setting
from fastmon.advisor.types import HOT_APPLY, Advice, Apply, amdahl

ID = "dataloader.pin_memory"
MIN_PAGEABLE_FRACTION = 0.5
MIN_H2D_SHARE = 0.05


def check(window, facts):
    loader = facts.training_loader()
    if not facts.accelerator or loader is None or loader.get("pin_memory"):
        return None
    share = window.share("h2d")
    if window.h2d_bytes == 0 or window.pageable_fraction < MIN_PAGEABLE_FRACTION or share < MIN_H2D_SHARE:
        return None
    mb_per_step = window.h2d_bytes_per_step / 2**20
    return Advice(
        ID, "Pin host memory for host-to-device copies",
        f"h2d is {share:.0%} of step time; {window.pageable_fraction:.0%} of {mb_per_step:.1f} MiB/step "
        "copied from pageable memory",
        round(amdahl(share, 2.0), 2), HOT_APPLY,
        fix=f"{loader_setting(facts, pin_memory=True)} and batch.to(device, non_blocking=True)",
        why="pageable copies are staged and block the host; pinned copies are DMA and can overlap compute",
        location=loader.get("location"), apply=Apply("loader", {"pin_memory": True}),
    )
