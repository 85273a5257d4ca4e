"""A plain loop with two habits torch's anti-pattern check names (zero_grad to zeros, a
single-tensor optimizer); `--own-profiler` runs the script's own torch.profiler over
steps 20-79, as a user debugging it would. Prints a result that any change would move."""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--own-profiler", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, foreach=False)
x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))
own = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if args.own_profiler else None
for step in range(args.steps):
    if own is not None and step == 20:
        own.start()
    batch = slice((step * 32) % 512, (step * 32) % 512 + 32)
    optimizer.zero_grad(set_to_none=False)
    loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
    loss.backward()
    optimizer.step()
    if own is not None and step == 79:
        own.stop()
        print("own profiler saw addmm:", any(e.key == "aten::addmm" for e in own.key_averages()))
print(f"final loss {loss.item():.6f}")
