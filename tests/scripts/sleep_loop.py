"""A loop without a DataLoader that sleeps --sleep-ms after each step (--compile: its step
function compiled): the sleep is neither the batch's making nor compute."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--sleep-ms", type=float, default=10.0)
parser.add_argument("--compile", action="store_true")
args = parser.parse_args()
torch.manual_seed(0)
model = torch.nn.Linear(16, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(x):
    loss = model(x).square().mean()
    loss.backward()
    return loss


step_fn = torch.compile(train_step) if args.compile else train_step
for step in range(args.steps):
    step_fn(torch.randn(8, 16))
    optimizer.step()
    optimizer.zero_grad()
    time.sleep(args.sleep_ms / 1000)
print("steps", args.steps)
