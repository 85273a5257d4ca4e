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


def test_a_message_that_names_no_rank_is_the_connections_ranks(server):
    # Every rank's probe ends with {"t": "bye", "steps": N}: rank 1's was taken as rank 0's,
    # and a clean 2-rank run's report said rank 1 ended "without its last send".
    probe = connect(server)
    probe.sendall(frame({"t": "hello", "rank": 1, "secret": server.secret}) + frame({"t": "bye", "steps": 80}))
    wait_for(lambda: len(server.received) == 2, "the hello and the bye")
    assert server.received[1] == {"t": "bye", "steps": 80, "rank": 1}


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


def test_a_connection_without_the_secret_may_not_buffer_more_than_a_hello(server):
    # a frame that says it holds 60 MB: refused at its header, before any of it is kept
    intruder = connect(server)
    try:
        intruder.sendall(struct.pack("!I", 60 * 2**20) + b"x" * 65536)
        assert intruder.recv(10) == b""
    except ConnectionResetError:  # closed with what it sent unread
        pass
    wait_for(lambda: server.refused == 1, "the refusal")
    # a probe's frames, once it has shown the secret, may be as large as the wire allows
    probe = connect(server)
    big = {"t": "fact", "key": "k", "value": "v" * 100_000, "rank": 0}
    probe.sendall(frame({"t": "hello", "rank": 0, "secret": server.secret}) + frame(big))
    wait_for(lambda: len(server.received) == 2, "the probe's large fact")


def test_a_tmpdir_too_long_for_a_socket_puts_the_channel_in_a_short_private_folder(tmp_path, monkeypatch):
    import os
    import tempfile

    long_dir = tmp_path / ("d" * 200)
    long_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(long_dir))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    channel = ChannelServer(lambda message: None)
    try:
        assert len(channel.path) <= 107 and not channel.path.startswith(str(long_dir))
        assert os.stat(os.path.dirname(channel.path)).st_mode & 0o777 == 0o700
        sock = connect(channel)
        sock.close()
    finally:
        channel.close()
    assert not os.path.exists(os.path.dirname(channel.path))


def test_eight_connections_without_the_secret_leave_the_monitors_memory_alone(server):
    import psutil

    me = psutil.Process()
    before = me.memory_info().rss
    intruders = [connect(server) for _ in range(8)]
    for sock in intruders:  # each: a frame of a size a hello may have, never finished, then 4 MB more
        sock.sendall(struct.pack("!I", 4000) + b"{" * 3000)
    for sock in intruders:
        try:
            sock.sendall(b"x" * 4 * 2**20)
        except OSError:  # refused and closed on the way
            pass
    wait_for(lambda: server.refused == 8, "the eight refusals", timeout=20)
    assert me.memory_info().rss - before < 10 * 2**20


def test_a_probe_is_admitted_as_it_connects_before_its_publisher_starts(server):
    # the probe connects before its hooks are installed (seconds of a loaded start-up);
    # its first send was a second after those: the hello must not wait for it
    from fastmon.probe.publisher import Publisher

    publisher = Publisher(server.path, 0, {"t": "hello", "secret": server.secret, "rank": 0, "pid": 1})
    try:
        wait_for(lambda: server.ranks() == [0], "the probe's rank, admitted")
        assert server.received[0]["pid"] == 1 and server.refused == 0
    finally:
        publisher.close()
