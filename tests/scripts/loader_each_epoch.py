"""A trainer class that builds a new DataLoader (with no workers) at every epoch, as
some codebases do: a live change to one epoch's loader dies with it. Loading is slow
(1 ms a sample), so fastmon advises workers."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 1280

    def __getitem__(self, i):
        time.sleep(0.001)
        return torch.full((8,), (i % 13) / 13.0)


class Trainer:
    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self.model = nn.Linear(8, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def fit(self) -> None:
        for epoch in range(self.epochs):
            started = time.perf_counter()
            self.train_loader = DataLoader(Slow(), batch_size=32, shuffle=True, num_workers=0)
            for x in self.train_loader:
                self.optimizer.zero_grad()
                self.model(x).pow(2).mean().backward()
                self.optimizer.step()
            print(f"epoch {epoch}: {time.perf_counter() - started:.2f} s", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    Trainer(parser.parse_args().epochs).fit()
