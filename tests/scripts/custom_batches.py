"""No DataLoader: batches come from a function that takes a while."""
import time

import torch
from torch import nn


def get_batch(n=32):
    time.sleep(0.01)
    return torch.randn(n, 8), torch.randn(n, 1)


model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(30):
    x, y = get_batch()
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
print("done")
