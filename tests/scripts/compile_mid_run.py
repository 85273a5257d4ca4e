"""The model's call replaced in the middle of a run, while most steps are untimed, as
``Module.compile()`` replaces it (it puts ``torch.compile(self._call_impl)`` in the
``_compiled_call_impl`` slot): every forward after that must go through the new call."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 8), torch.randn(16, 1)
new_calls = 0


def counted(call):
    def counting_call(*args, **kwargs):
        global new_calls
        new_calls += 1
        return call(*args, **kwargs)

    return counting_call


def train(steps: int) -> float:
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


print("loss before", round(train(400), 6))
model._compiled_call_impl = counted(model._call_impl)
print("loss after", round(train(8000), 6))
print("calls through the new call", new_calls)
