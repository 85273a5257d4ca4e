"""A training loop in the main thread while another thread steps an optimizer of its own
(a model trained alongside, an actor updated in the background): only the main thread's
steps are the run's steps. Short steps, so that most of them are untimed."""
import threading

import torch
from torch import nn

STEPS = 3000
torch.manual_seed(0)
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 8), torch.randn(16, 1)

side_model = nn.Linear(4, 1)
side_optimizer = torch.optim.SGD(side_model.parameters(), lr=0.01)
done = threading.Event()
side_steps = 0


def train_alongside() -> None:
    global side_steps
    while not done.is_set():
        side_optimizer.zero_grad()
        side_model(torch.randn(4, 4)).sum().backward()
        side_optimizer.step()
        side_steps += 1
        done.wait(0.0005)


side = threading.Thread(target=train_alongside)
side.start()
for _ in range(STEPS):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
done.set()
side.join()
print("main steps", STEPS, "side steps", side_steps)
