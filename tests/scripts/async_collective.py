"""Each step issues an all-reduce with ``async_op=True``, computes about --compute-ms (a
forward and backward), then waits on the work: the collective runs under the compute."""
import argparse
import time

import torch
import torch.distributed as dist
from torch import nn

from gloo_exit import destroy_process_group

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--compute-ms", type=float, default=20.0)
parser.add_argument("--numel", type=int, default=1 << 18)
args = parser.parse_args()

dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.Linear(256, 256)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
shared = torch.ones(args.numel)
issued = waited = 0.0
for step in range(args.steps):
    start = time.perf_counter()
    work = dist.all_reduce(shared, async_op=True)
    issued += time.perf_counter() - start
    until = time.perf_counter() + args.compute_ms / 1000
    while time.perf_counter() < until:
        model(x).square().mean().backward()
    start = time.perf_counter()
    work.wait()
    waited += time.perf_counter() - start
    optimizer.step()
    optimizer.zero_grad()
print(f"rank {dist.get_rank()} issue {issued:.4f} s wait {waited:.4f} s over {args.steps} steps", flush=True)
destroy_process_group()
