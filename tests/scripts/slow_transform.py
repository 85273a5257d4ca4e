"""A dataset whose transform is a Compose of three steps, one of them ~2 ms of CPU a sample
(SlowBlur), under --workers N started by --start (fork, spawn, forkserver); --sleepy makes the dataset's read wait 2 ms (a slow disk)
instead. Prints SlowBlur's cost timed alone first: "alone <ms> ms"."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--batches", type=int, default=60)
parser.add_argument("--sleepy", action="store_true")
parser.add_argument("--start", default=None, help="the workers' start method")
parser.add_argument("--validate", action="store_true", help="then a validation loader of other transforms")
args = parser.parse_args()


class Compose:  # as torchvision's: its steps in a list called transforms
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class Scale:
    def __call__(self, x):
        return x * 0.5


class SlowBlur:
    def __call__(self, x):
        end = time.thread_time() + 0.002  # ~2 ms of this thread's CPU
        while time.thread_time() < end:
            pass
        return x + 1


class Clamp:
    def __call__(self, x):
        return x.clamp(-3, 3)


class Images(Dataset):
    def __init__(self, transform):
        self.transform = transform

    def __len__(self):
        return args.batches * 8

    def __getitem__(self, i):
        if args.sleepy:
            time.sleep(0.002)  # the read waits for the disk
        return self.transform(torch.full((16,), float(i))), i % 2


def main():
    blur = SlowBlur()
    start = time.thread_time()
    for _ in range(50):
        blur(torch.zeros(16))
    print(f"alone {(time.thread_time() - start) / 50 * 1000:.3f} ms", flush=True)
    steps = [Scale(), Clamp()] if args.sleepy else [Scale(), SlowBlur(), Clamp()]
    loader = DataLoader(Images(Compose(steps)), batch_size=8, num_workers=args.workers,
                        multiprocessing_context=args.start if args.workers else None)
    model = torch.nn.Linear(16, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    if args.validate:  # timm's way: one dataset class, lighter transforms, workers of its own
        validation = DataLoader(Images(Compose([Clamp(), Scale()])), batch_size=32, num_workers=args.workers)
        with torch.no_grad():
            for x, y in validation:
                model(x)


if __name__ == "__main__":  # a spawned worker imports this file again
    main()
