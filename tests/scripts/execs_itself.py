"""Trains --steps steps, then (unless --resumed) replaces itself with os.execv of the same
script, resumed, which trains --steps more: a trainer restarting itself in place."""
import argparse
import os
import sys

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--resumed", action="store_true")
args = parser.parse_args()
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
print(f"{'resumed' if args.resumed else 'first'} part done", flush=True)
if not args.resumed:
    os.execv(sys.executable, [sys.executable, __file__, "--steps", str(args.steps), "--resumed"])
