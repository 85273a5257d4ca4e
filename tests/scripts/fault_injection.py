"""Breaks a probe hook from inside (as a bug in fastmon would) and checks the script's
own result is unchanged: prints the same final weights with or without fastmon."""
import argparse

import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--break-part", default="")
args = parser.parse_args()

try:
    import fastmon.probe

    probe = fastmon.probe.current()
except ImportError:
    probe = None


def boom(*args, **kwargs):
    raise RuntimeError("injected fault")


if probe is not None and args.break_part:
    from fastmon.probe import loader_hooks

    # Something each part's hook calls at every step, replaced by a function that raises.
    owner, name = {"forward": (probe.forward_part, "on_root_forward"), "backward": (probe.backward_part, "before"),
                   "loader": (loader_hooks, "batch_size_of"),
                   "optimizer": (probe.optimizer_part, "on_step_begin")}[args.break_part]
    setattr(owner, name, boom)

torch.manual_seed(0)
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(256, 4), torch.randn(256, 1)), batch_size=32)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
print("weights", [round(v, 6) for v in model.weight.flatten().tolist()])
