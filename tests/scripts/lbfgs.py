"""LBFGS with a closure: forward and backward run inside optimizer.step()."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(16, 1)
x, y = torch.randn(256, 16), torch.randn(256, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)


def closure():
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(10):
    loss = optimizer.step(closure)
print(f"lbfgs loss {loss.item():.4f}")
