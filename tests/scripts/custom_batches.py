"""No DataLoader for training: batches come from a function that takes a while (10 ms of
work: a sleep there would be the step's *other*, not its data). Every 10 steps a
validation pass over a DataLoader."""
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def get_batch(n=32):
    until = time.perf_counter() + 0.01
    while time.perf_counter() < until:  # decoding, augmenting: the batch's making
        pass
    return torch.randn(n, 8), torch.randn(n, 1)


model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
validation = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=128)
for step in range(30):
    x, y = get_batch()
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    if step % 10 == 9:
        model.eval()
        with torch.no_grad():
            val_loss = sum(nn.functional.mse_loss(model(vx), vy) for vx, vy in validation)
        model.train()
print("done")
