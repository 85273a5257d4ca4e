"""--steps short CPU steps (well under a millisecond) from a DataLoader of --batch samples."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20_000)
parser.add_argument("--batch", type=int, default=16)
args = parser.parse_args()
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64 * args.batch, 16), torch.randn(64 * args.batch, 1)),
                    batch_size=args.batch, shuffle=True)
model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
while step < args.steps:
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        step += 1
        if step == args.steps:
            break
print(f"{step} steps")
