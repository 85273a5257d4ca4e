"""Doubles the batch live (and the LR with it) through the probe's control side, then
reverts; prints each epoch's batch sizes and LRs, writes each epoch's sample indices."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fastmon.probe

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
args = parser.parse_args()
probe = fastmon.probe.install(None)
acks = []
probe.message = acks.append
torch.manual_seed(0)
data = TensorDataset(torch.randn(1000, 4), torch.arange(1000))
loader = DataLoader(data, batch_size=10, shuffle=True, drop_last=True)
model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000, gamma=0.5)
plan = {7: {"t": "apply", "exp": 1, "action": "batch_size", "params": {"factor": 2, "lr_scale": 2.0}},
        150: {"t": "revert", "exp": 1}}
step = 0
with open(args.out, "w") as f:
    for epoch in range(3):
        seen, sizes = [], set()
        for x, index in loader:
            optimizer.zero_grad()
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
            seen.extend(index.tolist())
            sizes.add(len(index))
            if step in plan:
                probe.publisher.deliver([plan[step]])
            step += 1
        f.write(" ".join(map(str, seen)) + "\n")
        print(f"epoch {epoch} sizes {sorted(sizes)} lr {optimizer.param_groups[0]['lr']:g} "
              f"base {scheduler.base_lrs[0]:g} len {len(loader)}")
print("acks", [(a["t"], a["ok"]) for a in acks if a["t"] in ("applied", "reverted")])
