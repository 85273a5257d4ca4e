"""DDP on CPU with a slow dataset and no workers: the advisor's num_workers change must
land on both ranks at the same step. Writes each rank's sample indices per epoch."""
import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from gloo_exit import destroy_process_group

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()


class Slow(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(16), i


sampler = DistributedSampler(Slow(), shuffle=True, seed=0)
loader = DataLoader(Slow(), batch_size=16, sampler=sampler)
model = DistributedDataParallel(nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
with open(f"{args.out}.{rank}", "w") as f:
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        seen = []
        for x, index in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
            seen.extend(index.tolist())
        f.write(" ".join(map(str, seen)) + "\n")
destroy_process_group()
