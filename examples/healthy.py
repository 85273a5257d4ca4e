"""A healthy training run: in-memory data, a model big enough to keep the step busy,
nothing left on that should not be. fastmon should have no advice for it.

    fastmon run examples/healthy.py
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(args.samples, 128)
    y = (x[:, :64].sum(dim=1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True, pin_memory=device == "cuda")
    model = nn.Sequential(nn.Linear(128, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 2))
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=args.epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        model.train()
        running = torch.zeros((), device=device)
        for xb, yb in loader:
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.detach()
        model.eval()
        with torch.no_grad():
            accuracy = (model(x[:1024].to(device)).argmax(dim=1) == y[:1024].to(device)).float().mean()
        print(f"epoch {epoch}: mean loss {(running / len(loader)).item():.4f}, accuracy {accuracy.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
