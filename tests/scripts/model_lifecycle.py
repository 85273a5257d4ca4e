"""What training scripts do with their model between epochs: copy it (an EMA), pickle it,
torch.save it whole, script it; then train a new model. Prints what the user would check:
the losses and the copies' outputs, the same with or without fastmon."""
import copy
import io
import pickle

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(640, 8), torch.randn(640, 1)), batch_size=32)
probe_input = torch.randn(4, 8)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))


def train_epoch(model: nn.Module, optimizer) -> float:
    total = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
print("epoch 0 loss", round(train_epoch(model, optimizer), 6))

ema = copy.deepcopy(model)
buffer = io.BytesIO()
torch.save(model, buffer)
buffer.seek(0)
reloaded = torch.load(buffer, weights_only=False)
unpickled = pickle.loads(pickle.dumps(model))
scripted = torch.jit.script(model)
print("epoch 1 loss", round(train_epoch(model, optimizer), 6))
with torch.no_grad():  # the copies are still the model of epoch 0
    for name, copy_ in (("ema", ema), ("reloaded", reloaded), ("unpickled", unpickled), ("scripted", scripted),
                        ("model", model)):
        print(name, [round(v, 6) for v in copy_(probe_input).flatten().tolist()])

second = make_model()
optimizer = torch.optim.SGD(second.parameters(), lr=0.05)
for epoch in range(2, 10):  # long enough for a sampled step to see it, and the discovery after
    print(f"epoch {epoch} loss (new model)", round(train_epoch(second, optimizer), 6))
