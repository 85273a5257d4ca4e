"""Steps of --step-ms each, printing --lines lines a step the --way given: print,
sys.stdout.buffer.write, sys.__stdout__.write, os.write(1, ...), or a child process that
inherits stdout (echo); writes --done-file at the end."""
import argparse
import os
import subprocess
import sys
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--step-ms", type=float, default=20)
parser.add_argument("--lines", type=int, default=20)
parser.add_argument("--way", choices=["print", "buffer", "dunder", "fd", "child"], default="print")
parser.add_argument("--done-file")
args = parser.parse_args()


def write(line: str) -> None:
    if args.way == "print":
        print(line, flush=True)
    elif args.way == "buffer":
        sys.stdout.buffer.write(line.encode() + b"\n")
        sys.stdout.buffer.flush()
    elif args.way == "dunder":
        sys.__stdout__.write(line + "\n")
        sys.__stdout__.flush()
    elif args.way == "fd":
        os.write(1, line.encode() + b"\n")
    else:
        subprocess.run(["echo", line], check=True)


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(args.steps):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    time.sleep(args.step_ms / 1000)
    optimizer.step()
    for k in range(args.lines if args.way != "child" else 1):
        write(f"line {step} {k}")
if args.done_file:
    with open(args.done_file, "w") as f:
        f.write(f"finished {args.steps} steps\n")
