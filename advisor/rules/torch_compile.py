"""torch_compile: the GPU idles between many small kernels; the host is the bottleneck.

What it detects: accelerator training whose device-side busy time (CUDA events) is a
small fraction of the host step time, while data loading is not the cause.
Why it matters: each op costs microseconds of Python and launch overhead; with small
kernels the GPU waits on the host. Compilation fuses ops and cuts launches.
How to fix: ``model = torch.compile(model)`` (or CUDA graphs for static shapes).
"""

from fastmon.advisor.types import CODE_CHANGE, Advice, amdahl

ID = "torch_compile"
MAX_DEVICE_BUSY = 0.5
MAX_DATA_WAIT_SHARE = 0.2


def check(window, facts):
    busy = facts.values.get("device.busy_fraction")
    if not facts.accelerator or busy is None or busy > MAX_DEVICE_BUSY or facts.values.get("compile"):
        return None  # ... or compiled already
    if window.share("data_wait") > MAX_DATA_WAIT_SHARE:
        return None
    idle = 1.0 - busy
    return Advice(
        ID, "Compile the model: the GPU waits on Python",
        f"the GPU is busy {busy:.0%} of each step; data_wait is only {window.share('data_wait'):.0%}",
        round(amdahl(idle, 2.0), 2), CODE_CHANGE, fix="model = torch.compile(model)",
        why="many small kernels: launch and Python overhead dominate", confidence="medium",
    )
