"""A forward that raises once at step 1 (a batch-size finder's OOM, caught), inside the
first steps where fastmon looks for the model with global hooks; the loop goes on."""
import torch
from torch import nn


class Flaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("out of memory (planted)")
        return self.net(x)


model = Flaky()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(60):
    x = torch.randn(32, 16)
    try:
        loss = model(x).square().mean()
    except RuntimeError:
        loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print("steps 60")
