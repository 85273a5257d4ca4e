"""What reading the CUDA allocator's memory costs a timed step, the Python side: torch's
``memory_allocated()``, ``memory_reserved()`` and ``max_memory_allocated()`` (the probe's
reading until 2026-12-05) each take the allocator's ~120 statistics and flatten them in
Python; ``allocator_memory()`` takes them once and reads three. No GPU is needed: the C++
call (``torch._C._cuda_memoryStats``) is stood in for by building a dict of the same
shape, which both ways pay per statistics taken (three times, or once).

    python benchmarks/cuda_memory_reads.py    # appends to benchmarks/results/cuda-memory-reads.md
"""

from __future__ import annotations

import datetime
import platform
import statistics
import time
from pathlib import Path
from unittest import mock

import torch

from fastmon.probe.runtime import allocator_memory

RESULTS = Path(__file__).resolve().parent / "results" / "cuda-memory-reads.md"
ROUNDS, CALLS = 21, 2000
STATS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
         "inactive_split_bytes", "requested_bytes")
COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
            "max_split_size", "oversize_allocations", "oversize_segments")


def allocator_stats(device=None) -> dict:
    """A dict shaped as the CUDA caching allocator's ``memoryStats`` (torch 2.13)."""
    pools = ("all", "small_pool", "large_pool")
    return {**{stat: {pool: {"current": 1 << 20, "peak": 1 << 21, "allocated": 1 << 22, "freed": 1 << 21}
                      for pool in pools} for stat in STATS},
            **{counter: 0 for counter in COUNTERS}}


def torch_reads() -> tuple[int, int, int]:
    return torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), torch.cuda.max_memory_allocated()


def per_call_us(read) -> float:
    started = time.perf_counter_ns()
    for _ in range(CALLS):
        read()
    return (time.perf_counter_ns() - started) / CALLS / 1e3


def main() -> None:
    with mock.patch("torch.cuda.memory.is_initialized", return_value=True), \
            mock.patch("torch.cuda.memory._get_device_index", return_value=0), \
            mock.patch.object(torch._C, "_cuda_memoryStats", allocator_stats, create=True):
        assert torch_reads() == allocator_memory()  # the same three figures
        rounds = [(per_call_us(torch_reads), per_call_us(allocator_memory)) for _ in range(ROUNDS)]  # interleaved
    old = statistics.median(r[0] for r in rounds)
    new = statistics.median(r[1] for r in rounds)
    ratio = statistics.median(r[0] / r[1] for r in rounds)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    line = (f"| {stamp} | {platform.processor() or platform.machine()}, torch {torch.__version__} | {old:.1f} µs | "
            f"{new:.1f} µs | {ratio:.1f}x |")
    if not RESULTS.exists():
        RESULTS.write_text("# The CUDA allocator's memory, read at each timed step (Python side)\n\n"
                           "`python benchmarks/cuda_memory_reads.py`: three of torch's readers vs one "
                           f"reading of the statistics; medians of {ROUNDS} interleaved rounds of {CALLS} calls.\n\n"
                           "| when | machine | torch's three readers | allocator_memory() | ratio |\n"
                           "| --- | --- | --- | --- | --- |\n")
    with RESULTS.open("a") as out:
        out.write(line + "\n")
    print(line)


if __name__ == "__main__":
    main()
