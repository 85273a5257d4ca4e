"""Rebuilds the DataLoader live, several times in an epoch and across epochs, through the
probe's control side; writes each epoch's sample indices, one line per epoch."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import fastmon.probe

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--persistent", action="store_true")
parser.add_argument("--shuffle", action="store_true")
args = parser.parse_args()


class Indexed(Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        time.sleep(0.0002)
        return torch.full((4,), float(i)), i


probe = fastmon.probe.install(None)
acks = []
probe.message = acks.append  # no monitor here: keep the acks to check them
loader = DataLoader(Indexed(), batch_size=10, shuffle=args.shuffle, num_workers=2 if args.persistent else 0,
                    persistent_workers=args.persistent, drop_last=False)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
# step -> loader settings applied at that step boundary
plan = {5: {"num_workers": 2}, 17: {"num_workers": 4, "pin_memory": False}, 33: {"num_workers": 0},
        95: {"num_workers": 3}, 140: {"num_workers": 1}, 199: {"num_workers": 2}}
epochs, step = [], 0
for epoch in range(3):
    seen = []
    for x, index in loader:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        seen.extend(index.tolist())
        if step in plan:
            probe.publisher.deliver([{"t": "apply", "exp": step, "action": "loader", "params": plan[step]}])
        step += 1
    epochs.append(seen)
with open(args.out, "w") as f:
    for seen in epochs:
        f.write(" ".join(map(str, seen)) + "\n")
print("acks", sum(1 for a in acks if a.get("t") == "applied" and a.get("ok")), "of", len(plan))
print("final workers", loader.num_workers)
