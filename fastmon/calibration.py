"""``fastmon doctor --calibrate``: what this machine's chips really reach in large matrix
products, kept in the user's cache, so that a run's FLOP rate is also read against what
the chip does, not only against its datasheet (an H200 reaches ~770-800 of its 989 bf16
TFLOP/s; a CPU has no datasheet figure at all)."""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from pathlib import Path

from fastmon.common.machine import cpu_name

GPU_SIZE, CPU_SIZE = 8192, 2048  # square products: large enough to run at the chip's pace
REPEATS = 10  # timed products per dtype, after as many untimed


def cache_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fastmon" / "calibration.json"


def load() -> dict:
    """Device name -> {math dtype -> TFLOP/s measured}; empty when never calibrated or unreadable."""
    try:
        return json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}


def measured_tflops(device_name: str | None, dtype: str) -> float | None:
    entry = load().get(device_name or "")
    return entry.get(dtype) if isinstance(entry, dict) else None


def _rate(product, size: int, seconds) -> float:
    for _ in range(REPEATS):
        product()
    times = [seconds(product) for _ in range(REPEATS)]
    return 2 * size**3 / statistics.median(times) / 1e12


def calibrate() -> dict:
    """Measures each chip, saves it in the cache and returns what was measured."""
    import torch

    results: dict[str, dict[str, float]] = {}
    a = torch.randn(CPU_SIZE, CPU_SIZE)

    def cpu_seconds(product) -> float:
        start = time.perf_counter()
        product()
        return time.perf_counter() - start

    results[cpu_name()] = {"float32": round(_rate(functools.partial(torch.matmul, a, a), CPU_SIZE, cpu_seconds), 4)}
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            with torch.cuda.device(index):
                results[torch.cuda.get_device_name(index)] = _gpu(torch)
    saved = {**load(), **results}
    path = cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1))
    return results


def _gpu(torch) -> dict[str, float]:
    def gpu_seconds(product) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        product()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    out = {}
    precision = torch.get_float32_matmul_precision()
    try:
        for name, dtype, matmul_precision in (("bfloat16", torch.bfloat16, precision),
                                              ("float16", torch.float16, precision),
                                              ("tf32", torch.float32, "high"), ("float32", torch.float32, "highest")):
            torch.set_float32_matmul_precision(matmul_precision)
            a = torch.randn(GPU_SIZE, GPU_SIZE, device="cuda", dtype=dtype)
            out[name] = round(_rate(functools.partial(torch.matmul, a, a), GPU_SIZE, gpu_seconds), 2)
    finally:
        torch.set_float32_matmul_precision(precision)
    return out
