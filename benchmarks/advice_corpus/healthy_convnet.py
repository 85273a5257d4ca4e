"""A healthy conv net: in-memory images, convolutions without bias before BatchNorm, SGD
with a schedule, evaluation under no_grad. The corpus of benchmarks/advice_quality.py."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def block(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())


def main():
    torch.manual_seed(0)
    images, labels = torch.randn(2048, 3, 32, 32), torch.randint(0, 10, (2048,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True)
    model = nn.Sequential(block(3, 16), nn.MaxPool2d(2), block(16, 32), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    epochs = 3
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=epochs * len(loader))
    for epoch in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            schedule.step()
        model.eval()
        with torch.no_grad():
            accuracy = (model(images[:512]).argmax(1) == labels[:512]).float().mean().item()
        print(f"epoch {epoch}: accuracy {accuracy:.3f}", flush=True)


if __name__ == "__main__":
    main()
