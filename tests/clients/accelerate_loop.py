"""An accelerate training loop (its DataLoaderShard fetches one batch ahead) with an
evaluation pass each epoch and a learning-rate scheduler."""
import time

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SAMPLES, BATCH, EPOCHS = 1024, 16, 3
torch.manual_seed(0)
accelerator = Accelerator(cpu=True)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20)
train = DataLoader(TensorDataset(torch.randn(SAMPLES, 32), torch.randint(0, 4, (SAMPLES,))), batch_size=BATCH,
                   shuffle=True)
evaluation = DataLoader(TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,))), batch_size=64)
model, optimizer, train, evaluation, scheduler = accelerator.prepare(model, optimizer, train, evaluation, scheduler)
started = time.perf_counter()
steps = 0
for epoch in range(EPOCHS):
    model.train()
    for x, y in train:
        loss = nn.functional.cross_entropy(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        steps += 1
    model.eval()
    correct = 0
    for x, y in evaluation:
        with torch.no_grad():
            correct += (model(x).argmax(1) == y).sum().item()
print(f"steps {steps} samples {SAMPLES * EPOCHS} accuracy {correct / 256:.2f}")
print(f"seconds {time.perf_counter() - started:.4f}")
