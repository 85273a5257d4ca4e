"""torch.tensor(ndarray) every step, and gradients that blow up at step 160 (and stay NaN):
the norm samples that follow, however they are spaced, see NaN."""
import numpy as np
import torch
from torch import nn

rng = np.random.default_rng(0)
model = nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(2000):
    x = torch.tensor(rng.standard_normal((32, 16), dtype=np.float32))
    y = torch.tensor(rng.standard_normal((32, 1), dtype=np.float32))
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    if step == 160:
        loss = loss * float("inf")  # a bad batch: inf gradients, then NaN weights for good
    loss.backward()
    optimizer.step()
print("done")
