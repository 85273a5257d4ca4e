"""What the probe reads from the CUDA allocator, checked on a CPU: torch's C++ call is
stood in for by statistics of the allocator's shape, read through torch's own readers too."""

from __future__ import annotations

import sys
from unittest import mock

import torch

from conftest import ROOT
from fastmon.probe.runtime import allocator_memory

sys.path.insert(0, str(ROOT / "benchmarks"))
from cuda_memory_reads import allocator_stats  # noqa: E402


def test_one_reading_of_the_allocator_gives_what_torchs_three_readers_give():
    stats = allocator_stats()
    stats["allocated_bytes"]["all"].update(current=5 << 20, peak=9 << 20)
    stats["reserved_bytes"]["all"].update(current=16 << 20)
    with mock.patch("torch.cuda.memory.is_initialized", return_value=True), \
            mock.patch("torch.cuda.memory._get_device_index", return_value=0), \
            mock.patch.object(torch._C, "_cuda_memoryStats", lambda device: stats, create=True):
        torchs = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved(), torch.cuda.max_memory_allocated())
        assert allocator_memory() == torchs == (5 << 20, 16 << 20, 9 << 20)


def test_before_cuda_starts_the_allocator_reads_zero():
    assert allocator_memory() == (0, 0, 0)
