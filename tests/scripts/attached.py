"""fastmon.attach() at the top (twice: the second is a no-op), then a DataLoader loop of
--steps steps of at least --step-ms; prints "done" and exits with --exit-code."""
import argparse
import sys
import time

import fastmon

fastmon.attach()
fastmon.attach()

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--step-ms", type=float, default=0)
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()

model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(args.steps * 8, 16), torch.randn(args.steps * 8, 1)), batch_size=8)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    time.sleep(args.step_ms / 1000)
print("done")
sys.exit(args.exit_code)
