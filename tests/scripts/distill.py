"""Knowledge distillation: per batch, a frozen teacher (eval mode, no_grad) sees it first,
then the student trains on it."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(640, 8)), batch_size=16)
teacher = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4)).eval()
student = nn.Linear(8, 4)
optimizer = torch.optim.SGD(student.parameters(), lr=0.01)
for (x,) in loader:
    with torch.no_grad():
        target = teacher(x)
    optimizer.zero_grad()
    nn.functional.mse_loss(student(x), target).backward()
    optimizer.step()
print("distilled")
