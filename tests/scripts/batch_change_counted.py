"""A live batch-size change (x2 at step 20 of epoch 0, back at step 10 of epoch 1), asked
of the probe as the monitor would: the script counts the samples it trains on."""
import torch
from torch.utils.data import DataLoader, TensorDataset

import fastmon.probe

loader = DataLoader(TensorDataset(torch.randn(1000, 4)), batch_size=16, shuffle=True)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
samples = steps = 0
for epoch in range(3):
    for step, (x,) in enumerate(loader):
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
        samples, steps = samples + len(x), steps + 1
        if (epoch, step) in ((0, 20), (1, 10)):
            factor = 2 if epoch == 0 else 0.5
            fastmon.probe.current().publisher.deliver(
                [{"t": "apply", "exp": epoch + 100, "action": "batch_size", "params": {"factor": factor}}])
print(f"steps {steps} samples {samples}")
