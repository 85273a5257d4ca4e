"""One seed mistake planted in an otherwise healthy loop (in-memory data, an MLP, SGD with
a schedule), each as small as it can be: ``--mistake NAME``; ``--mistake none`` is the
healthy loop itself. The corpus of benchmarks/advice_quality.py."""
import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

MISTAKES = ("none", "anomaly", "starved", "cpu_loading", "spawned", "grad_spike", "profiler", "retained_graph", "tensor_copy",
            "eval_grad", "set_to_none", "adam_weight_decay", "no_schedule", "conv_bias")
parser = argparse.ArgumentParser()
parser.add_argument("--mistake", choices=MISTAKES, default="none")
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--workers", type=int, default=0, help="the slow datasets' DataLoader workers (to time what the "
                                                           "advice predicts, without fastmon)")
args = parser.parse_args()


class SlowDataset(Dataset):
    """2 ms to load a sample, as a JPEG decode or a slow disk would take."""

    def __init__(self, n):
        self.x, self.y = torch.randn(n, 64), torch.randn(n, 1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(0.002)
        return self.x[i], self.y[i]


class DecodedDataset(SlowDataset):
    """0.4 ms of CPU to load a sample (a decode and a transform in Python, as PIL and
    torchvision's transforms take for an MNIST image): workers share the cores with the
    training, so they help only as far as cores are free."""

    def __getitem__(self, i):
        checksum = 0
        for value in range(3000):
            checksum = (checksum * 31 + value) % 1_000_003
        return self.x[i] + checksum * 0, self.y[i]


def model_for(mistake):
    if mistake == "conv_bias":
        return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.Flatten(), nn.Linear(512, 1))
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))


def loader_for(mistake):
    if mistake == "starved":
        return DataLoader(SlowDataset(2048), batch_size=16, shuffle=True, num_workers=args.workers)
    if mistake == "cpu_loading":
        return DataLoader(DecodedDataset(2048), batch_size=16, shuffle=True, num_workers=args.workers)
    if mistake == "spawned":  # short epochs whose workers start again each time
        return DataLoader(SlowDataset(256), batch_size=16, num_workers=2, multiprocessing_context="spawn")
    return DataLoader(TensorDataset(torch.randn(8192, 64), torch.randn(8192, 1)), batch_size=64, shuffle=True)


def main():
    torch.manual_seed(0)
    mistake = args.mistake
    if mistake == "anomaly":
        torch.autograd.set_detect_anomaly(True)
    model = model_for(mistake)
    if mistake == "adam_weight_decay":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    schedule = None if mistake == "no_schedule" else torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.steps)
    loader = loader_for(mistake)
    profiler = torch.autograd.profiler.profile() if mistake == "profiler" else None
    if profiler is not None:
        profiler.__enter__()
    losses, step = [], 0
    started = time.perf_counter()
    while step < args.steps:
        for x, y in loader:
            if mistake == "tensor_copy":
                x = torch.tensor(x.numpy())
            if mistake == "grad_spike" and step == args.steps // 2:
                x = x * 1e4
            optimizer.zero_grad(set_to_none=mistake != "set_to_none")
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if schedule is not None:
                schedule.step()
            losses.append(loss if mistake == "retained_graph" else loss.item())
            if step % 50 == 0:
                model.eval()
                if mistake == "eval_grad":
                    model(x)
                else:
                    with torch.no_grad():
                        model(x)
                model.train()
            step += 1
            if step == args.steps:
                break
    if profiler is not None:
        profiler.__exit__(None, None, None)
    print(f"{mistake}: final loss {float(losses[-1]):.4f}")
    print(f"samples/s {args.steps * loader.batch_size / (time.perf_counter() - started):.1f}")


if __name__ == "__main__":
    main()
