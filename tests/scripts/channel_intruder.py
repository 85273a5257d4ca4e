"""Trains while another connection (this script, standing in for any process of the same
user) sends the monitor what a probe never would: a hello without the run's secret,
malformed frames, a claim to rank 0. The training's steps must all be recorded."""
import os
import socket
import struct
import json

import torch

STEPS = 300


def frame(message) -> bytes:
    body = json.dumps(message).encode() if isinstance(message, dict) else message
    return struct.pack("!I", len(body)) + body


def intrude() -> list[bytes]:
    answers = []
    for attempt in ({"t": "hello", "rank": 0, "pid": 1},  # no secret
                    {"t": "hello", "rank": "zero", "secret": "guess"},
                    {"t": "fact", "value": 1},
                    b"\x07not a frame at all"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(os.environ["FASTMON_CHANNEL"])
        sock.sendall(frame(attempt))
        sock.settimeout(5)
        answers.append(sock.recv(100))  # b"": the monitor closed it
        sock.close()
    return answers


model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(STEPS):
    if step == 100:
        print("answers", intrude(), "secret seen", "FASTMON_SECRET" in os.environ)
    optimizer.zero_grad()
    model(torch.randn(16, 8)).square().mean().backward()
    optimizer.step()
print("steps", STEPS)
