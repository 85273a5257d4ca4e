"""No optimizer: parameters updated by hand. Steps fall back to one per backward."""
import torch

torch.manual_seed(0)
w = torch.randn(32, 1, requires_grad=True)
x, y = torch.randn(512, 32), torch.randn(512, 1)
for step in range(40):
    batch = slice((step * 64) % 512, (step * 64) % 512 + 64)
    loss = ((x[batch] @ w - y[batch]) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
print(f"final loss {loss.item():.4f}")
