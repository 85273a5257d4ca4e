"""A small transformer block compiled with torch.compile (inductor), trained from a
DataLoader: the way people compile today. Prints dynamo's own counters at the end, so a
graph break or recompilation that fastmon caused shows in the script's own output."""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--samples", type=int, default=1024)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--how", choices=["function", "method", "step", "eager"], default="function")
args = parser.parse_args()

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Net(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.blocks = nn.Sequential(Block(dim), Block(dim))
        self.head = nn.Linear(dim, 10)

    def forward(self, x):
        return self.head(self.blocks(x).mean(dim=1))


model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
data = TensorDataset(torch.randn(args.samples, 16, 64), torch.randint(0, 10, (args.samples,)))
loader = DataLoader(data, batch_size=args.batch, shuffle=True)

if args.how == "function":
    model = torch.compile(model)
elif args.how == "method":
    model.compile()


def train_step(x, y):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


step = torch.compile(train_step) if args.how == "step" else train_step
steps, start, times = 0, time.perf_counter(), []
for epoch in range(args.epochs):
    for x, y in loader:
        began = time.perf_counter()
        loss = step(x, y)
        times.append(time.perf_counter() - began)
        steps += 1
times.sort()
print(f"steps {steps} samples {steps and args.samples * args.epochs} loss {loss.item():.4f}")
print(f"median step ms {1000 * times[len(times) // 2]:.3f}")
if args.how != "eager":
    from torch._dynamo.utils import counters
    print("graph_breaks", sum(counters["graph_break"].values()), dict(counters["graph_break"]))
    print("recompiles", sum(counters["recompiles"].values()) if "recompiles" in counters else 0)
    print("unique_graphs", counters["stats"]["unique_graphs"], dict(counters["stats"]), dict(counters["frames"]))
