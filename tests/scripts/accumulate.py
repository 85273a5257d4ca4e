"""Gradient accumulation: 4 micro-batches per optimizer step."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(1024, 8), torch.randn(1024, 1)), batch_size=16)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for i, (x, y) in enumerate(loader):
    loss = nn.functional.mse_loss(model(x), y) / 4
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
print("accumulated", (i + 1) // 4, "steps")
