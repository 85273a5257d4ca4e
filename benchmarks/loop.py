"""The benchmark's training loop: an MLP over an in-memory DataLoader. Prints the mean
step time of the timed part (after warm-up) and, with --rss-every, the process RSS."""

import argparse
import time

import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, default=64)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--warmup", type=int, default=200)
parser.add_argument("--rss-every", type=int, default=0)
parser.add_argument("--no-loader", action="store_true", help="batches from a tensor, not a DataLoader")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x = torch.randn(args.batch * 64, args.width)
y = torch.randn(args.batch * 64, 1)
loader = DataLoader(TensorDataset(x, y), batch_size=args.batch)
model = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
process = psutil.Process()


def batches():
    while True:
        if args.no_loader:
            for i in range(64):
                yield x[i * args.batch:(i + 1) * args.batch], y[i * args.batch:(i + 1) * args.batch]
        else:
            yield from loader


step = 0
started = None
for xb, yb in batches():
    if step == args.warmup:
        started = time.perf_counter()
    optimizer.zero_grad()
    nn.functional.mse_loss(model(xb), yb).backward()
    optimizer.step()
    step += 1
    if args.rss_every and step % args.rss_every == 0:
        print(f"rss {step} {process.memory_info().rss}", flush=True)
    if step == args.warmup + args.steps:
        break
print(f"step_us {(time.perf_counter() - started) / args.steps * 1e6:.3f}")
