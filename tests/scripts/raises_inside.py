"""Raises from inside torch's machinery, under fastmon's hooks: --where worker (a
DataLoader worker's dataset), forward (a module's forward) or backward (a custom
autograd function)."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--where", choices=["worker", "forward", "backward"], required=True)
args = parser.parse_args()


class Items(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if args.where == "worker" and i == 20:
            raise ValueError(f"item {i} is damaged")
        return torch.ones(4)


class Fails(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("no gradient here")


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 1)

    def forward(self, x):
        if args.where == "forward" and self.training and hasattr(self, "seen"):
            raise RuntimeError("the forward failed")
        self.seen = True
        out = self.linear(x)
        return Fails.apply(out) if args.where == "backward" and x.shape[0] == 8 and hasattr(self, "twice") else out


def main():
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, x in enumerate(DataLoader(Items(), batch_size=8, num_workers=1)):
        if step == 1:
            model.twice = True
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()


if __name__ == "__main__":
    main()
