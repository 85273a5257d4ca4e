"""timm's train.py shape: trains one module, validates another (its EMA copy) under
torch.inference_mode, through a loader wrapper that fetches one batch ahead; its loss is
a module, as timm's train_loss_fn is."""
import time

import copy

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SAMPLES, BATCH, EPOCHS = 768, 32, 2


class PrefetchLoader:
    """timm.data.PrefetchLoader's shape: the next batch is fetched before this one is used."""

    def __init__(self, loader):
        self.loader = loader

    def __iter__(self):
        first = True
        for batch in self.loader:
            if not first:
                yield current
            first, current = False, batch
        if not first:
            yield current

    def __len__(self):
        return len(self.loader)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
ema = copy.deepcopy(model).eval()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train = PrefetchLoader(DataLoader(TensorDataset(torch.randn(SAMPLES, 16), torch.randint(0, 4, (SAMPLES,))),
                                  batch_size=BATCH, shuffle=True))
val = PrefetchLoader(DataLoader(TensorDataset(torch.randn(128, 16), torch.randint(0, 4, (128,))), batch_size=32))
loss_fn = nn.CrossEntropyLoss()  # a training-mode forward with no parameters: not the one that takes the batch
started = time.perf_counter()
steps = 0
for epoch in range(EPOCHS):
    model.train()
    for x, y in train:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.99).add_(p, alpha=0.01)
        steps += 1
    with torch.inference_mode():
        correct = sum((ema(x).argmax(1) == y).sum().item() for x, y in val)
print(f"steps {steps} samples {SAMPLES * EPOCHS}")
print(f"seconds {time.perf_counter() - started:.4f}")
