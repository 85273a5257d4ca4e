"""What taking a batch from a DataLoader worker costs the training process, against
fetching it in-process, for in-memory tensors: the constant behind the num_workers rule's
estimate (advisor/rules/dataloader_num_workers.py, WORKER_BATCH_COST_S).

    python benchmarks/worker_handover.py

Each case iterates a TensorDataset loader three epochs (after one to warm up) with 0 and
2 persistent workers; nothing else runs, so with workers the rate is the training
process's handover cost or the workers' fetch, whichever is slower.
"""
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

CASES = [((32,), 64, 4096), ((3, 32, 32), 64, 1024), ((3, 224, 224), 32, 512)]


def ms_per_batch(dataset, batch_size: int, workers: int) -> float:
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0)
    for _ in loader:
        pass
    started, batches = time.perf_counter(), 0
    for _ in range(3):
        for _ in loader:
            batches += 1
    return (time.perf_counter() - started) / batches * 1e3


def main() -> None:
    torch.set_num_threads(1)
    print("| sample | batch | KiB a batch | in-process ms/batch | 2 workers ms/batch |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for shape, batch_size, n in CASES:
        dataset = TensorDataset(torch.randn(n, *shape), torch.zeros(n))
        kib = batch_size * torch.Size(shape).numel() * 4 / 1024
        cells = [f"{ms_per_batch(dataset, batch_size, w):.2f}" for w in (0, 2)]
        print(f"| {tuple(shape)} | {batch_size} | {kib:,.0f} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
