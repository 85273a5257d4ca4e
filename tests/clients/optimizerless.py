"""pytorch/examples' regression: no optimizer, the weights updated by hand after each
backward, batches made by a function (no DataLoader)."""
import time

import torch

STEPS, BATCH = 200, 32
torch.manual_seed(0)
true_w = torch.randn(4, 1)
fc = torch.nn.Linear(4, 1)


def get_batch():
    x = torch.randn(BATCH, 4)
    return x, x @ true_w + 0.1


started = time.perf_counter()
for _ in range(STEPS):
    x, y = get_batch()
    fc.zero_grad()
    loss = torch.nn.functional.smooth_l1_loss(fc(x), y)
    loss.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
print(f"steps {STEPS} samples {STEPS * BATCH} loss {loss.item():.4f}")
print(f"seconds {time.perf_counter() - started:.4f}")
