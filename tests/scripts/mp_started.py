"""Training in processes of torch.multiprocessing (forked here, to start fast; spawn is the
same to fastmon): they are not the process fastmon started, so it sees no step. Steps of
20 ms, so that the run outlasts the headless status line's first round (3 s)."""
import time

import torch
import torch.multiprocessing as mp
from torch import nn


def train(index):
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(200):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        time.sleep(0.02)
        optimizer.step()
    print(f"process {index} done", flush=True)


if __name__ == "__main__":
    mp.start_processes(train, nprocs=2, start_method="fork")
