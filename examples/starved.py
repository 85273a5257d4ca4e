"""A data-starved training run: every sample takes 2 ms to "load" (think JPEG decoding or
a slow disk) and the DataLoader has no workers, so the model waits most of each step.
Each process that reads the dataset first opens it, 0.4 s (as an HDF5 or LMDB file is
opened lazily in every DataLoader worker): workers that are not persistent pay it again
at every epoch.

    fastmon run examples/starved.py                 # watch data_wait dominate
    fastmon run --apply auto examples/starved.py    # let fastmon fix it live
"""

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, n: int, load_ms: float, open_ms: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 64, generator=generator)
        self.y = (self.x.sum(dim=1) > 0).long()
        self.load_s = load_ms / 1000
        self.open_s = open_ms / 1000
        self.opened_in = None  # the process that opened the "file": a worker must open its own

    def open(self) -> None:
        time.sleep(self.open_s)
        self.opened_in = os.getpid()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        if self.opened_in != os.getpid():
            self.open()
        time.sleep(self.load_s)
        return self.x[index], self.y[index], index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=6400)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--load-ms", type=float, default=2.0)
    parser.add_argument("--open-ms", type=float, default=400.0, help="opening the dataset, in each process that reads it")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--record-indices", help="write each epoch's sample indices here, one line per epoch")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dataset = SlowDataset(args.samples, args.load_ms, args.open_ms)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    seen_per_epoch = []
    for epoch in range(args.epochs):
        seen = []
        started = time.perf_counter()
        for x, y, index in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            seen.extend(index.tolist())
        seen_per_epoch.append(seen)
        elapsed = time.perf_counter() - started
        print(f"epoch {epoch}: loss {loss.item():.4f}, {len(seen) / elapsed:.0f} samples/s", flush=True)

    if args.record_indices:
        with open(args.record_indices, "w") as f:
            for seen in seen_per_epoch:
                f.write(" ".join(map(str, seen)) + "\n")


if __name__ == "__main__":
    main()
