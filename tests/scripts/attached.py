"""fastmon.attach() at the top (twice: the second is a no-op), then a DataLoader loop of
--steps steps of at least --step-ms; prints "done" and exits with --exit-code, or SIGKILLs
itself at step --kill-at."""
import argparse
import os
import signal
import sys
import time

import fastmon

runs_dir = sys.argv[sys.argv.index("--runs-dir") + 1] if "--runs-dir" in sys.argv else "fastmon-runs"
fastmon.attach(runs_dir=runs_dir)
fastmon.attach(runs_dir=runs_dir)

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--step-ms", type=float, default=0)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--kill-at", type=int)
parser.add_argument("--runs-dir")
args = parser.parse_args()

model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(args.steps * 8, 16), torch.randn(args.steps * 8, 1)), batch_size=8)
for step, (x, y) in enumerate(loader):
    if step == args.kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    time.sleep(args.step_ms / 1000)
print("done")
sys.exit(args.exit_code)
