"""DDP on CPU (gloo). --slow-rank R sleeps --slow-ms in R's data loading, --every-rank-ms
sleeps that long in every rank's batch; --die-rank R kills itself (SIGKILL) at step --die-step;
--compile runs torch.compile(DDP(model))."""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler, default_collate

from gloo_exit import destroy_process_group

parser = argparse.ArgumentParser()
parser.add_argument("--steps-per-epoch", type=int, default=40)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-ms", type=float, default=15.0)
parser.add_argument("--every-rank-ms", type=float, default=0.0)
parser.add_argument("--die-rank", type=int, default=-1)
parser.add_argument("--die-step", type=int, default=20)
parser.add_argument("--compile", action="store_true")  # torch.compile(DDP(model))
parser.add_argument("--pause-at-end", type=float, default=0.0)  # seconds after the last step, before the exit
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()


class Data(Dataset):
    def __len__(self):
        return args.steps_per_epoch * 16 * world

    def __getitem__(self, i):
        if rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000 / 16)
        return torch.randn(32), torch.randn(1)


def collate(items):
    # one sleep a batch: even ranks stay even (16 short sleeps each woke late by chance)
    if args.every_rank_ms:
        time.sleep(args.every_rank_ms / 1000)
    return default_collate(items)


torch.manual_seed(0)
sampler = DistributedSampler(Data())
loader = DataLoader(Data(), batch_size=16, sampler=sampler, collate_fn=collate)
model = DistributedDataParallel(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
if args.compile:
    model = torch.compile(model)
step = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        step += 1
        if rank == args.die_rank and step == args.die_step:
            os.kill(os.getpid(), signal.SIGKILL)
    loss = torch.tensor([float(step)])
    dist.all_reduce(loss)
print(f"rank {rank} done {step} steps", flush=True)
time.sleep(args.pause_at_end)
destroy_process_group()
