"""argparse, sys.argv, __file__ and __name__ as python sets them; exits with --code."""
import argparse
import os
import sys

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--code", type=int, default=0)
parser.add_argument("--steps", type=int, default=5)
args = parser.parse_args()
print("argv", sys.argv)
print("name", __name__)
print("file", os.path.basename(__file__))
print("path0", os.path.basename(sys.path[0]))
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(args.steps):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
sys.exit(args.code)
