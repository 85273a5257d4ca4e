"""Crashes in user code after 7 steps."""
import torch
from torch import nn


def broken_metric(step):
    raise ValueError(f"bad metric at step {step}")


model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    if step == 6:
        broken_metric(step)
