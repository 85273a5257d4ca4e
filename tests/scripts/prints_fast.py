"""Prints many lines a second while it trains a little (a chatty script, or a progress
log every step), then says when it ended."""
import argparse
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=4.0)
parser.add_argument("--lines-per-step", type=int, default=200)
parser.add_argument("--width", type=int, default=60, help="characters a line")
args = parser.parse_args()
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
pad = "x" * args.width
started, step, lines = time.time(), 0, 0
while time.time() - started < args.seconds:
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    for _ in range(args.lines_per_step):
        print(f"line {lines} {pad}")
        lines += 1
    step += 1
print(f"printed {lines} lines in {step} steps, done at {time.time():.3f}", flush=True)
