"""A loop over a loader wrapper that fetches one batch ahead (accelerate's and timm's
shape), with worker processes kept across epochs (``--persistent``) and epochs cut short
(``--break-after N``: a loop stopped by its step budget, then the next epoch)."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--persistent", action="store_true")
parser.add_argument("--break-after", type=int, default=0)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()
BATCH = 16


def fetched_ahead(loader):
    first, current = True, None
    for batch in loader:
        if not first:
            yield current
        first, current = False, batch
    if not first:
        yield current


torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(320, 8), torch.randn(320, 1)), batch_size=BATCH, shuffle=True,
                    num_workers=args.workers, persistent_workers=args.persistent)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
steps = samples = 0
for epoch in range(args.epochs):
    for i, (x, y) in enumerate(fetched_ahead(loader)):
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        steps, samples = steps + 1, samples + len(x)
        if args.break_after and i + 1 == args.break_after:
            break
print(f"steps {steps} samples {samples}")
