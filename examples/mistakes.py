"""Classic mistakes in one loop, each one a line fastmon points at:

- the loss tensor kept in a list (its autograd graph with it),
- evaluation without torch.no_grad(),
- a Conv2d with bias right before BatchNorm,
- Adam with weight_decay (use AdamW),
- zero_grad(set_to_none=False),
- autograd anomaly detection left on.

    fastmon run examples/mistakes.py
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class SmallConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),  # bias=True before BatchNorm: wasted
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=16384)
    args = parser.parse_args()

    torch.manual_seed(0)
    torch.autograd.set_detect_anomaly(True)  # left on after debugging a NaN
    images = torch.randn(args.samples, 3, 16, 16)
    labels = torch.randint(0, 10, (args.samples,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True)
    model = SmallConvNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()

    losses = []
    for epoch in range(args.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad(set_to_none=False)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss)  # keeps every step's graph alive
        model.eval()
        validation = loss_fn(model(images[:256]), labels[:256])  # no torch.no_grad()
        print(f"epoch {epoch}: train loss {sum(losses[-10:]).item() / 10:.3f}, val {validation.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
