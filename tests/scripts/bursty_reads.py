"""Reads that are quick but for one slow read now and then (a cold file on a network disk:
sleeps stand for it): 2 workers keep up on average, and a late batch stalls the step,
since batches come in order. --prefetch-factor sets the DataLoader's."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

parser = argparse.ArgumentParser()
parser.add_argument("--batches", type=int, default=1200)
parser.add_argument("--prefetch-factor", type=int, default=2)
args = parser.parse_args()

BATCH = 8
SLOW_EVERY = 64  # one sample in this many is a slow read: one batch in 8
SLOW_S, QUICK_S = 0.06, 0.0003


class Files(IterableDataset):
    """Read in the order of the batches, each worker its own: worker w reads batches w,
    w + n, ... (an iterable dataset: fastmon cannot change its worker count live, only how
    far ahead its workers read)."""

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for batch in range(worker, args.batches, workers):
            for i in range(batch * BATCH, (batch + 1) * BATCH):
                time.sleep(SLOW_S if i % SLOW_EVERY == SLOW_EVERY - 1 else QUICK_S)
                yield torch.full((512,), i % 7 / 7), i % 2


def main():
    loader = DataLoader(Files(), batch_size=BATCH, num_workers=2, prefetch_factor=args.prefetch_factor)
    model = torch.nn.Sequential(*(torch.nn.Linear(512, 512) for _ in range(3)), torch.nn.Linear(512, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    started = time.perf_counter()
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x.repeat(32, 1)), y.repeat(32)).backward()
        optimizer.step()
    print(f"{args.batches / (time.perf_counter() - started):.1f} steps/s")


if __name__ == "__main__":
    main()
