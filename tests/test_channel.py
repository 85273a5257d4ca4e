"""The monitor's channel lets in the run's own probes only: a connection without the run's
secret, with a frame it cannot read, or claiming a rank already connected is closed and
counted, and nothing it sends reaches the session or ends the reader."""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from conftest import SCRIPTS
from fastmon.channel import ChannelServer


def frame(message) -> bytes:
    body = json.dumps(message).encode() if isinstance(message, dict) else message
    return struct.pack("!I", len(body)) + body


def wait_for(predicate, what: str, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def server():
    received = []

    def on_message(message):
        received.append(message)
        if message.get("t") == "fact":
            message["key"]  # the session reads it: a frame without one raises there

    channel = ChannelServer(on_message)
    channel.start()
    channel.received = received
    yield channel
    channel.close()


def connect(channel) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(channel.path)
    sock.settimeout(5)
    return sock


def test_a_probe_with_the_secret_is_heard_and_a_message_the_session_cannot_take_is_counted(server):
    probe = connect(server)
    probe.sendall(frame({"t": "hello", "rank": 0, "secret": server.secret}) + frame({"t": "fact", "value": 1})
                  + frame({"t": "fact", "key": "k", "value": 2, "rank": 0}))
    wait_for(lambda: len(server.received) == 3, "the probe's three messages")
    assert "secret" not in server.received[0]  # never recorded
    assert server.failed_messages == 1 and server.refused == 0 and server.ranks() == [0]
    assert server.send({"t": "apply"}, rank=0) == 1


@pytest.mark.parametrize("first", [
    {"t": "hello", "rank": 0},  # no secret
    {"t": "hello", "rank": 0, "secret": "0" * 32},
    {"t": "hello", "rank": "0", "secret": None},
    {"t": "fact", "key": "model", "value": 1},
    b"\x07neither JSON nor an event log",
])
def test_anything_but_the_runs_hello_is_refused(server, first):
    intruder = connect(server)
    intruder.sendall(frame(first))
    assert intruder.recv(10) == b""  # closed by the monitor
    wait_for(lambda: server.refused == 1, "the refusal to be counted")
    assert server.received == [] and server.ranks() == []


def test_a_second_claim_to_a_connected_rank_is_refused(server):
    probe = connect(server)
    probe.sendall(frame({"t": "hello", "rank": 0, "secret": server.secret}))
    wait_for(lambda: server.ranks() == [0], "rank 0")
    usurper = connect(server)
    usurper.sendall(frame({"t": "hello", "rank": 0, "secret": server.secret}))
    assert usurper.recv(10) == b""
    assert server.send({"t": "apply", "n": 1}, rank=0) == 1
    assert probe.recv(100)  # the command went to the probe, not to the usurper


@pytest.mark.e2e
def test_intruders_lose_the_training_no_step(run_fastmon, report):
    out = run_fastmon("run", "--headless", SCRIPTS / "channel_intruder.py")
    assert out.returncode == 0, out.stderr
    assert "answers [b'', b'', b'', b''] secret seen False" in out.stdout
    summary = report()
    assert summary["steps"] == 300 and summary["dropped"] == 0 and summary["channel_refused"] == 4
    assert "connections refused: 4" in out.stderr
