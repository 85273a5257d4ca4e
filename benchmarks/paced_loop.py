"""A training loop paced at --rate steps/s for --seconds (tiny steps, then sleep)."""
import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--rate", type=float, default=1000)
parser.add_argument("--seconds", type=float, default=15)
args = parser.parse_args()
torch.set_num_threads(1)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(4, 8)
period = 1.0 / args.rate
start = time.perf_counter()
next_step = start
steps = 0
while time.perf_counter() - start < args.seconds:
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
    steps += 1
    next_step += period
    delay = next_step - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
print(f"steps {steps} rate {steps / (time.perf_counter() - start):.0f}")
