"""Trains 3,000 short steps (~2 s), says so, then ends without python's exit: os._exit
(no atexit, no flush) or a segmentation fault in native code."""
import argparse
import ctypes
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--how", choices=("os_exit", "segfault"), default="os_exit")
args = parser.parse_args()
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3000):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    time.sleep(0.0005)
print("made 3000 steps", flush=True)
if args.how == "os_exit":
    os._exit(0)
ctypes.string_at(0)  # reads address 0: SIGSEGV
