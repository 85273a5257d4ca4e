"""A DataLoader worker that calls sys.exit(3) at sample 3000 (step 375): torch raises in the
training loop, which ends with python's traceback and exit code 1."""
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Exits(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        if i == 3000:
            sys.exit(3)
        return torch.randn(8)


model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step, x in enumerate(DataLoader(Exits(), batch_size=8, num_workers=2)):
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
    if step % 100 == 0:
        print("step", step, flush=True)
