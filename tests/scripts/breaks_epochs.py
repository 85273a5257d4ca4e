"""Leaves each epoch early (``break``) after live DataLoader rebuilds in it, as a worker
search does; prints, after each epoch's first batch, the worker processes alive against
the loader's setting."""
import multiprocessing
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import fastmon.probe


class Slow(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        time.sleep(0.0002)
        return torch.full((4,), float(i))


probe = fastmon.probe.install(None)
acks = []
probe.message = acks.append  # no monitor here: keep the acks to check them
loader = DataLoader(Slow(), batch_size=10, num_workers=0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
for epoch in range(6):
    for i, x in enumerate(loader):
        if i == 1:
            print("epoch", epoch, "workers alive", len(multiprocessing.active_children()),
                  "set", loader.num_workers, flush=True)
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        step += 1
        if i in (5, 15):  # two candidates of a search in each epoch, each a rebuild
            workers = 1 + (epoch + i) % 3
            probe.publisher.deliver([{"t": "apply", "exp": step, "action": "loader",
                                      "params": {"num_workers": workers}}])
        if i == 25:
            break
    time.sleep(1.5)  # an evaluation, say: python has stopped the loop's workers by now
    print("after epoch", epoch, "workers alive", len(multiprocessing.active_children()), flush=True)
print("acks", sum(1 for a in acks if a.get("t") == "applied" and a.get("ok")), "of", 12)
