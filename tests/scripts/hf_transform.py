"""A Hugging Face dataset whose transform costs ~0.25 ms of CPU an example, set with
set_transform (map-style) or, with --iterable, as IterableDataset.map; under --workers N."""
import argparse
import time

import torch
from datasets import Dataset
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--iterable", action="store_true")
args = parser.parse_args()


def tokenize(batch):  # stands for a tokenizer or an image transform: CPU work an example
    end = time.thread_time() + 0.00025 * len(batch["x"])
    while time.thread_time() < end:
        pass
    return {"x": [[float(v)] * 16 for v in batch["x"]], "y": [v % 2 for v in batch["x"]]}


def main():
    rows = Dataset.from_dict({"x": list(range(1600))})
    if args.iterable:
        dataset = rows.to_iterable_dataset(num_shards=max(1, args.workers)).map(tokenize, batched=True,
                                                                                 batch_size=8)
        dataset = dataset.with_format("torch")
    else:
        rows.set_transform(lambda batch: {k: torch.tensor(v) for k, v in tokenize(batch).items()})
        dataset = rows
    loader = DataLoader(dataset, batch_size=8, num_workers=args.workers)
    model = torch.nn.Linear(16, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for batch in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"]).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
