"""A training loop with a tqdm progress bar: tqdm redraws its line with "\\r" on stderr."""
import time

import torch
from torch import nn
from tqdm import tqdm

model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for _ in tqdm(range(40), desc=f"epoch {epoch}", mininterval=0.05):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        optimizer.step()
        time.sleep(0.05)
print("done")
