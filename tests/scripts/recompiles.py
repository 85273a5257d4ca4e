"""A compiled step that recompiles: it reads a Python string that takes a new value for
the first six steps (a guard on its value fails each time), then repeats them. Prints
dynamo's own count, from its compilation metrics, at the end."""
import torch

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
MODES = ("a", "b", "c", "d", "e", "f")


@torch.compile
def loss_of(x, mode):
    out = model(x).sum()
    return out * 2 if mode in ("a", "c", "e") else out


for step in range(60):
    optimizer.zero_grad()
    loss_of(torch.randn(4, 8), MODES[step % len(MODES)]).backward()
    optimizer.step()
metrics = torch._dynamo.utils.get_compilation_metrics()
print("compilations", len(metrics))
