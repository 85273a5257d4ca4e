"""A tiny transformer language model sharded with FSDP2 (``fully_shard``) on CPU (gloo), or
wrapped in DDP (``--wrap ddp``), or FSDP1 (``--wrap fsdp1``). It times the collectives it
causes itself (the calls and the waits on their ``Work``) and prints the total per rank:
``rank R collectives S s in C calls``, the figure fastmon's comm is checked against.
``--pad N`` makes the last N positions of every sequence padding (attention_mask 0) and
feeds the model a dict, as a tokenizer's output is."""
import argparse
import warnings
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from gloo_exit import destroy_process_group

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--wrap", choices=("fsdp2", "ddp", "fsdp1"), default="fsdp2")
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--seq", type=int, default=64)
parser.add_argument("--pad", type=int, default=0)
args = parser.parse_args()

VOCAB, DIM = 512, 128
warnings.filterwarnings("ignore", message=".*returned a view tensor")  # FSDP2 on the logits: harmless here
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()

timed = {"s": 0.0, "calls": 0}
inside = [0]


def timing(original):
    def collective(*a, **k):
        if inside[0]:
            return original(*a, **k)
        inside[0] += 1
        start = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            inside[0] -= 1
            timed["s"] += time.perf_counter() - start
            timed["calls"] += 1
    return collective


for name in ("all_gather_single", "reduce_scatter_single", "all_gather_into_tensor", "reduce_scatter_tensor",
             "all_reduce", "broadcast", "all_gather"):
    setattr(dist, name, timing(getattr(dist, name)))
Work = dist.Work
_wait = Work.wait


def wait(self, *a, **k):
    if inside[0]:  # a blocking collective waits on its own work: timed with the call
        return _wait(self, *a, **k)
    start = time.perf_counter()
    try:
        return _wait(self, *a, **k)
    finally:
        timed["s"] += time.perf_counter() - start


Work.wait = wait


class Tokens(Dataset):
    def __len__(self):
        return args.steps * args.batch * world

    def __getitem__(self, i):
        ids = torch.randint(0, VOCAB, (args.seq + 1,), generator=torch.Generator().manual_seed(i))
        if not args.pad:
            return ids
        mask = torch.ones(args.seq, dtype=torch.long)
        mask[args.seq - args.pad:] = 0
        return {"input_ids": ids[:-1], "labels": ids[1:], "attention_mask": mask}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(DIM, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
model = LM()
if args.wrap == "fsdp2":
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
elif args.wrap == "fsdp1":
    from torch.distributed.fsdp import FullyShardedDataParallel
    model = FullyShardedDataParallel(model, device_id=torch.device("cpu"))
else:
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(Tokens(), batch_size=args.batch, sampler=DistributedSampler(Tokens(), shuffle=False))
timed.update(s=0.0, calls=0)  # the steps' collectives, not the set-up's
for step, batch in enumerate(loader):
    if args.pad:
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"])
        target = batch["labels"].masked_fill(batch["attention_mask"] == 0, -100)
    else:
        logits, target = model(batch[:, :-1]), batch[:, 1:]
    loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1), ignore_index=-100)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"rank {rank} collectives {timed['s']:.4f} s in {timed['calls']} calls over {step + 1} steps", flush=True)
destroy_process_group()
