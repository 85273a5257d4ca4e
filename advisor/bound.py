"""Which limit a window of steps presses on: data, communication, the host's launching of
device work, kernels too small to fill the GPU, or the compute itself. One verdict from what
fastmon measures already: the phases' shares of the step, and on a GPU how busy NVML saw it
while the steps ran (and, where the GPU has GPM, how many of its SMs were)."""

from __future__ import annotations

from typing import NamedTuple

DATA_BOUND_SHARE = 0.3  # of the step waiting for the next batch
COMM_BOUND_SHARE = 0.3  # of the step in collectives
COMM_NOTED_SHARE = 0.05  # of the step in collectives, from which a verdict says so
OTHER_BOUND_SHARE = 0.5  # of the step outside every phase fastmon times (a time.sleep, the script's own code)
LAUNCH_BOUND_BUSY = 60.0  # % of the steps' time the GPU is busy, below which it waits for the host
# % SM active below which a busy GPU's kernels leave most SMs idle: DCGM's profiling-metrics
# guide reads under 0.5 as "likely ineffective GPU usage" (0.8 needed, not sufficient)
UNDERFILLED_SM_ACTIVE = 50.0

DATA, COMMUNICATION, LAUNCH, UNDERFILLED, COMPUTE, OUTSIDE = ("data-bound", "communication-bound", "launch-bound",
                                                              "under-filled", "compute-bound", "other-bound")
# what a launch-bound step can try, most likely first; "compile" only where the model is not compiled yet
LAUNCH_REMEDIES = {
    "compile": "torch.compile (fewer, fused kernels)",
    "cuda_graphs": "CUDA graphs: torch.compile(mode=\"reduce-overhead\") launches a step's kernels at once",
    "batch": "a larger batch (more work per launch)",
    "fused_optimizer": "a fused optimizer (fused=True: one kernel for the update)",
}


# what an under-filled step can try: more work in each kernel
UNDERFILLED_REMEDIES = {
    "batch": "a larger batch (more work per kernel: more of the SMs busy)",
    "compile": "torch.compile (fused kernels: fewer, larger ones)",
}


class GpuBusy(NamedTuple):
    """How busy the GPU was while the steps ran, in %: ``util``, NVML's time a kernel ran;
    ``sm_active``, GPM's share of the SMs with work (None where the GPU has no GPM)."""
    util: float
    sm_active: float | None = None


def of_even_ranks(evidence: str, comm: float) -> str:
    """A verdict's evidence where several ranks run alike (no straggler) and collectives take
    a noted share of the step: that time is the collectives' own, not a wait for a rank."""
    if comm < COMM_NOTED_SHARE:
        return evidence
    return f"{evidence}, alike on every rank: the collectives' own time (bandwidth), not a wait for a slower rank"


def bound(shares: dict, gpu: GpuBusy | None, on_gpu: bool, recurring_data: float | None = None
          ) -> tuple[str, str] | None:
    """(verdict, the evidence in words), or None where the evidence is missing (a GPU run
    without NVML's utilization). ``recurring_data``: the data wait's share without the step
    that waited longest (``Window.recurring_data_wait``): data-bound takes both, a wait all
    in one step being no habit."""
    data, comm = shares.get("data_wait", 0.0), shares.get("comm", 0.0)
    if data >= DATA_BOUND_SHARE and (recurring_data is None or recurring_data >= DATA_BOUND_SHARE):
        return DATA, f"{data:.0%} of the step waits for the next batch"
    other = shares.get("other", 0.0)
    if other >= OTHER_BOUND_SHARE:
        return OUTSIDE, (f"{other:.0%} of the step is outside the phases fastmon times (a time.sleep, logging, the "
                         "script's own Python between its steps)")
    found = limit(comm, gpu, on_gpu)
    if found is None or data < DATA_BOUND_SHARE:
        return found
    # a large wait in few steps: said, where the shares beside the verdict show it
    return found[0], (f"{found[1]}; the data wait ({data:.0%} of these steps' time) is not every step's: "
                      f"{recurring_data:.0%} without its longest one")


def limit(comm: float, gpu: GpuBusy | None, on_gpu: bool) -> tuple[str, str] | None:
    """``bound`` where the steps do not keep waiting for data."""
    if comm >= COMM_BOUND_SHARE:
        return COMMUNICATION, f"{comm:.0%} of the step is in collectives"
    if not on_gpu:
        if comm >= COMM_NOTED_SHARE:
            return COMPUTE, f"the CPU computes the model: the steps do not keep waiting for data; {comm:.0%} of the " \
                            "step is in collectives"
        return COMPUTE, "the CPU computes the model: the steps do not keep waiting for data or other ranks"
    if gpu is None:
        return None
    sms = f", its SMs active {gpu.sm_active:.0f}%" if gpu.sm_active is not None else ""
    if gpu.util < LAUNCH_BOUND_BUSY:
        return LAUNCH, (f"the GPU is busy {gpu.util:.0f}% of the steps' time{sms} and the host is not waiting for "
                        f"data: it waits for kernel launches (up to {100 / max(gpu.util, 1):.1f}x if launching were "
                        f"free)")
    if gpu.sm_active is not None and gpu.sm_active < UNDERFILLED_SM_ACTIVE:
        return UNDERFILLED, (f"a kernel runs {gpu.util:.0f}% of the steps' time but the SMs are active "
                             f"{gpu.sm_active:.0f}%: the kernels are too small to fill the GPU")
    return COMPUTE, f"the GPU is busy {gpu.util:.0f}% of the steps' time{sms}"


def kernel_share(window, facts) -> tuple[float, str]:
    """The share of the step that faster kernels (bf16, TF32, cuDNN's pick, channels_last)
    can shorten, and the evidence in words. On a GPU the host's forward and backward are
    kernel launches, not the kernels' time: NVML's busy share over the window's steps tells
    it, and a launch-bound step gains nothing from faster kernels. Without NVML, or on a
    CPU, the host's forward+backward share."""
    busy = facts.gpu_mean("util") if facts.accelerator else None
    if busy is None:
        share = window.share("forward") + window.share("backward")
        return share, f"forward+backward are {share:.0%} of the step"
    if busy < LAUNCH_BOUND_BUSY:
        return 0.0, f"the GPU is busy {busy:.0f}% of the steps' time: it waits for the host, not for its kernels"
    return busy / 100, f"the GPU is busy {busy:.0f}% of the steps' time"


def remedies(verdict: str, compiled: bool) -> list[str]:
    """What a launch-bound or under-filled step can try, most likely first; else none."""
    table = {LAUNCH: LAUNCH_REMEDIES, UNDERFILLED: UNDERFILLED_REMEDIES}.get(verdict, {})
    return [text for key, text in table.items() if not (compiled and key == "compile")]
