"""An MLP whose FLOPs a step are worked out by hand (tests/test_flops.py), compiled with
``--compile``, with ``--accumulate N`` micro-batches to an optimizer step; prints a digest of its weights after training, so that a run under fastmon can
be compared with a bare one."""

import hashlib
import sys

import torch

WIDTHS = (16, 1024, 1024, 10)
BATCH = 64
STEPS = next((int(a) for a in sys.argv[1:] if a.isdigit()), 20)
ACCUMULATE = int(sys.argv[sys.argv.index("--accumulate") + 1]) if "--accumulate" in sys.argv else 1

torch.manual_seed(0)
layers = []
for n_in, n_out in zip(WIDTHS, WIDTHS[1:]):
    layers += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers[:-1])
if "--compile" in sys.argv:
    model = torch.compile(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for step in range(STEPS):
    for _ in range(ACCUMULATE):
        x, y = torch.randn(BATCH, WIDTHS[0]), torch.randint(0, WIDTHS[-1], (BATCH,))
        loss = torch.nn.functional.cross_entropy(model(x), y) / ACCUMULATE
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
# float32 weights summed in float64: any changed weight changes the digest
sums = [(p.detach().double().sum().item(), p.detach().double().abs().sum().item()) for p in model.parameters()]
print("weights", hashlib.sha256(repr(sums).encode()).hexdigest())
