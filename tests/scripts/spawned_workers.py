"""A DataLoader whose workers are spawned (macOS's and Windows' default start method), not
kept between epochs: every epoch's first batch waits while they import torch again."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=5)
args = parser.parse_args()


class Ramp(Dataset):
    def __len__(self):
        return 1024

    def __getitem__(self, i):
        x = torch.full((8,), (i % 13) / 13)
        return x, x.sum(dim=0, keepdim=True)


def main():
    torch.manual_seed(0)
    loader = DataLoader(Ramp(), batch_size=16, num_workers=2, multiprocessing_context="spawn")
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    print("weights", [round(v, 5) for v in model.weight.flatten().tolist()])


if __name__ == "__main__":  # spawned workers import this file: the loop must not run in them
    main()
