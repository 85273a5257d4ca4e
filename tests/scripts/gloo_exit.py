"""How the DDP test scripts leave torch.distributed."""
import time

import torch.distributed as dist

GLOO_WORKERS_SETTLE_S = 0.2


def destroy_process_group() -> None:
    """``dist.destroy_process_group()``, then a moment for gloo's worker threads.

    torch 2.13 on gloo: DDP keeps the process group alive past destroy_process_group, so
    its worker threads are not joined, and one that drops its last finished work only once
    the interpreter is shutting down aborts the process ("terminate called without an active
    exception": the work's thread-local state needs the GIL). Seen in 2 to 6 of 60 bare
    torchrun runs on a loaded 2-core box, 0 of 60 with the sleep.
    """
    dist.destroy_process_group()
    time.sleep(GLOO_WORKERS_SETTLE_S)
