"""Knowledge distillation: a frozen teacher (eval mode, no_grad) sees a batch first, then the
student trains on it; with --teacher-every N only every Nth batch, the others against labels."""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--teacher-every", type=int, default=1)
args = parser.parse_args()
torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(640, 8), torch.randn(640, 4)), batch_size=16)
teacher = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
student = nn.Linear(8, 4)
optimizer = torch.optim.SGD(student.parameters(), lr=0.01)
for i, (x, labels) in enumerate(loader):
    target = labels
    if i % args.teacher_every == 0:
        with torch.no_grad():
            target = teacher(x)
    optimizer.zero_grad()
    nn.functional.mse_loss(student(x), target).backward()
    optimizer.step()
print("distilled")
