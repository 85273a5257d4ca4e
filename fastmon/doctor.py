"""``fastmon doctor``: what fastmon can and cannot measure on this machine, and why."""

from __future__ import annotations

import os
import platform


def report() -> str:
    lines = [f"fastmon doctor — Python {platform.python_version()} on {platform.system()} {platform.machine()}"]
    ok, no = "  ✓", "  ✗"
    try:
        import torch

        lines.append(f"{ok} torch {torch.__version__}")
        from fastmon.probe.torch_private import missing

        lacks = missing()
        lines.append(f"{no if lacks else ok} torch's private parts fastmon reads: "
                     + ("this torch lacks" if lacks else "all present"))
        lines += [f"      {line}" for line in lacks]
        cuda = torch.cuda.is_available()
        if cuda:
            lines.append(f"{ok} CUDA {torch.version.cuda}: {torch.cuda.device_count()} GPU(s)")
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                lines.append(f"      GPU {i}: {p.name}, {p.total_memory / 2**30:.0f} GiB, compute {p.major}.{p.minor}"
                             f"{', bf16 + TF32' if p.major >= 8 else ''}")
        else:
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device or driver visible"
            lines.append(f"{no} CUDA: {why}")
    except ImportError as exc:
        torch, cuda = None, False
        lines.append(f"{no} torch: not importable ({exc})")
    from fastmon.samplers import GpuSampler

    gpu = GpuSampler()
    if gpu.available:
        lines.append(f"{ok} NVML: driver {gpu.driver}, {len(gpu.handles)} device(s)")
    else:
        lines.append(f"{no} NVML: {gpu.note}")
    lines.append(f"{ok} CPU: {os.cpu_count()} cores (psutil samples the trainer, its DataLoader workers and the system)")
    lines.append("")
    lines.append("what fastmon measures here:")
    lines.append(f"{ok} step phases on the host: data_wait, forward, backward, optimizer, other (exact)")
    if cuda:
        lines.append(f"{ok} h2d copies (pinned vs pageable) and host-device syncs, with file:line")
        lines.append(f"{ok} device-side forward/backward/optimizer time from CUDA events (no added synchronize)")
        lines.append(f"{ok} torch allocator memory per step (allocated, reserved, peak)")
    else:
        lines.append(f"{no} h2d and sync phases: no accelerator, so no copy crosses to a device and nothing waits on one")
        lines.append(f"{no} device-side times and allocator memory: need CUDA")
    lines.append(f"{ok if gpu.available else no} GPU utilization, memory, power, clocks, temperature"
                 + ("" if gpu.available else " — the GPU panel will say so"))
    return "\n".join(lines)


def calibration_lines() -> list[str]:
    from fastmon.calibration import cache_file, calibrate

    lines = ["", "what this machine's chips reach in large matrix products:"]
    for device, rates in calibrate().items():
        lines.append(f"  {device}: " + ", ".join(f"{dtype} {tflops:,g} TFLOP/s" for dtype, tflops in rates.items()))
    return lines + [f"  kept in {cache_file()}: `fastmon report` reads a run's FLOP rate against it"]
