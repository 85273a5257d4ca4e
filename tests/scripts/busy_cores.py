"""A training whose DataLoader workers keep every core busy (a CPU-heavy transform per
sample, one worker per core) for --seconds."""
import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=10.0)
args = parser.parse_args()


class Spinning(IterableDataset):
    def __iter__(self):
        while True:
            busy_until = time.perf_counter() + 0.05
            while time.perf_counter() < busy_until:
                pass
            yield torch.randn(8), torch.randn(1)


model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Spinning(), batch_size=1, num_workers=os.cpu_count())
started = time.perf_counter()
for x, y in loader:
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    if time.perf_counter() - started > args.seconds:
        break
