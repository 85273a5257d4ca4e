"""A run of --steps steps of --step-ms each; prints progress and writes --done-file at the end."""
import argparse
import time

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--step-ms", type=float, default=20)
parser.add_argument("--done-file")
args = parser.parse_args()
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(args.steps):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    time.sleep(args.step_ms / 1000)
    optimizer.step()
    print(f"step {step}", flush=True)
if args.done_file:
    with open(args.done_file, "w") as f:
        f.write(f"finished {args.steps} steps\n")
