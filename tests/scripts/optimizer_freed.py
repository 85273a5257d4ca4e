"""A sweep's habit: train, delete the model and optimizer, build the next. What the user
deleted must be freed (on a GPU, an Adam optimizer's state is twice the model)."""
import gc
import weakref

import torch
from torch import nn

for trial in range(2):
    model = nn.Linear(8, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    for _ in range(1500):  # short steps: most of them untimed
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    gone = weakref.ref(optimizer), weakref.ref(model)
    del model, optimizer
    gc.collect()
    print(f"trial {trial}: optimizer freed {gone[0]() is None}, model freed {gone[1]() is None}")
